"""`make demo`: train -> register (alias champion) -> builder export (+ ensemble) -> builder
validate -> builder serve (real Triton, no GPU) -> predictions over HTTP and gRPC.

Every step is the command a user would run; the demo only chains them and prints what they
give back. State lives in .demo/ (MLflow registry and artifacts) and model_repo/.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from demo.fraud_data import FEATURES, transactions  # noqa: E402

STATE = ROOT / ".demo"
REPO = ROOT / "model_repo"
MODEL = "fraud-detector"
console = Console(highlight=False)


def step(title: str) -> None:
    console.rule(f"[bold]{title}")


def train_and_register() -> int:
    """Train on preprocessed features; log the preprocessing + threshold with the run."""
    import mlflow
    from mlflow import MlflowClient
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.metrics import roc_auc_score

    from builder.ensemble_models import transforms

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    experiment = mlflow.get_experiment_by_name("fraud-demo")
    exp_id = (
        experiment.experiment_id
        if experiment
        else mlflow.create_experiment("fraud-demo", artifact_location=(STATE / "artifacts").as_uri())
    )
    X, y = transactions()
    train, test = slice(0, 3000), slice(3000, None)
    spec = {
        "preprocess": transforms.fit_preprocess(X.iloc[train].to_numpy()),
        "postprocess": {"positive_index": 1},
    }
    features = pd.DataFrame(transforms.preprocess(X.to_numpy(), spec["preprocess"]), columns=FEATURES)
    model = GradientBoostingClassifier(n_estimators=60, max_depth=3, random_state=0)
    model.fit(features.iloc[train], y[train])
    auc = roc_auc_score(y[test], model.predict_proba(features.iloc[test])[:, 1])
    with mlflow.start_run(experiment_id=exp_id, run_name="fraud-gbm"):
        mlflow.log_params({"n_estimators": 60, "max_depth": 3, "decision_threshold": 0.35})
        mlflow.log_metric("test_auc", auc)
        mlflow.log_dict(spec, "serving/ensemble.json")
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=features.iloc[:5],
            registered_model_name=MODEL,
            skops_trusted_types=["sklearn.tree._tree.Tree"],
        )
    version = int(info.registered_model_version)
    MlflowClient().set_registered_model_alias(MODEL, "champion", str(version))
    console.print(
        f"trained GradientBoosting on {train.stop} rows, test AUC {auc:.3f}; "
        f"registered {MODEL} version {version} with alias champion"
    )
    return version


def builder(*args: str) -> None:
    """Run a `builder` command as a user would; stop the demo if it fails."""
    console.print(f"[dim]$ builder {' '.join(args)}[/]")
    result = subprocess.run([sys.executable, "-m", "builder", *args])
    if result.returncode != 0:
        sys.exit(f"demo: `builder {args[0]}` failed with exit code {result.returncode}")


def free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


def wait_ready(http_url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit("demo: builder serve exited before Triton was ready")
        try:
            if client.is_server_ready() and client.is_model_ready(f"{MODEL}_ensemble"):
                return
        except Exception:  # connection refused while the server starts
            pass
        time.sleep(0.5)
    sys.exit(f"demo: Triton was not ready within {timeout:.0f}s")


def predictions(http_url: str, grpc_url: str) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    X, _ = transactions(rows=6, seed=99)
    X.loc[2, "merchant_risk"] = np.nan  # a missing value: the ensemble's preprocess imputes it
    raw = X.to_numpy(dtype=np.float32)

    http = httpclient.InferenceServerClient(http_url)
    inp = httpclient.InferInput("input", list(raw.shape), "FP32")
    inp.set_data_from_numpy(raw)
    via_http = http.infer(f"{MODEL}_ensemble", [inp])

    grpc = grpcclient.InferenceServerClient(grpc_url)
    ginp = grpcclient.InferInput("input", list(raw.shape), "FP32")
    ginp.set_data_from_numpy(raw)
    via_grpc = grpc.infer(f"{MODEL}_ensemble", [ginp])

    table = Table(title=f"{MODEL}_ensemble: raw transactions -> preprocess -> model -> threshold 0.35")
    for col in [*FEATURES, "score (HTTP)", "score (gRPC)", "fraud?"]:
        table.add_column(col, justify="right")
    for i in range(len(raw)):
        table.add_row(
            *(("NaN" if np.isnan(v) else f"{v:.2f}") for v in raw[i]),
            f"{via_http.as_numpy('score')[i, 0]:.4f}",
            f"{via_grpc.as_numpy('score')[i, 0]:.4f}",
            "yes" if via_grpc.as_numpy("label")[i, 0] else "no",
        )
    console.print(table)
    assert np.array_equal(via_http.as_numpy("score"), via_grpc.as_numpy("score")), "HTTP and gRPC disagree"

    # The bare model too (already-preprocessed features), as a client without the ensemble.
    stats = http.get_inference_statistics(f"{MODEL}_ensemble")["model_stats"][0]
    console.print(f"Triton statistics for the ensemble: {stats['inference_count']} inferences")


def main() -> None:
    STATE.mkdir(exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{STATE / 'mlflow.db'}")
    step("1. train and register in MLflow")
    train_and_register()
    step("2. builder export (ONNX + parity + config + ensemble)")
    builder("export", f"models:/{MODEL}@champion", "--repo", str(REPO), "--ensemble")
    step("3. builder validate")
    builder("validate", "--repo", str(REPO))
    step("4. builder serve (real Triton, CPU)")
    ports = {name: free_port(p) for name, p in (("http", 8000), ("grpc", 8001), ("metrics", 8002))}
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "builder",
            "serve",
            "--repo",
            str(REPO),
            "--address",
            "127.0.0.1",
            "--http-port",
            str(ports["http"]),
            "--grpc-port",
            str(ports["grpc"]),
            "--metrics-port",
            str(ports["metrics"]),
        ],
    )
    try:
        http_url, grpc_url = f"127.0.0.1:{ports['http']}", f"127.0.0.1:{ports['grpc']}"
        wait_ready(http_url, serve)
        step("5. predictions over HTTP and gRPC")
        predictions(http_url, grpc_url)
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
    step("done")
    console.print(f"model repository: {REPO}   registry: {os.environ['MLFLOW_TRACKING_URI']}")


if __name__ == "__main__":
    main()
