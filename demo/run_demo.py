"""`make demo`: data -> feast apply -> materialize -> train from historical features ->
register (alias champion) -> builder export (+ ensemble) -> builder validate -> builder serve
(real Triton, no GPU) -> gateway serve -> predictions through the gateway over HTTP and gRPC ->
skew check -> release gate (Locust against the gateway, loose demo SLA).

Every step is the command a user would run; the demo only chains them and prints what they
give back. State lives in .demo/ (MLflow registry and artifacts), feature_repo/data/ and
model_repo/.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STATE = ROOT / ".demo"
REPO = ROOT / "model_repo"
FEATURES = ROOT / "feature_repo"
MODEL = "fraud-detector"
console = Console(highlight=False)


def step(title: str) -> None:
    console.rule(f"[bold]{title}")


def run(cmd: str, *args: str) -> None:
    """Run a project command as a user would; stop the demo if it fails."""
    console.print(f"[dim]$ {cmd} {' '.join(args)}[/]")
    result = subprocess.run([sys.executable, "-m", cmd, *args])
    if result.returncode != 0:
        sys.exit(f"demo: `{cmd} {args[0]}` failed with exit code {result.returncode}")


def free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


def wait_for(
    what: str, check: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 180
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"demo: {what} exited before it was ready")
        try:
            if check():
                return
        except Exception:  # connection refused while it starts
            pass
        time.sleep(0.5)
    sys.exit(f"demo: {what} was not ready within {timeout:.0f}s")


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def http_json(url: str, body: object | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def predictions(gateway_http: str, gateway_grpc: str) -> None:
    import grpc

    from gateway.proto import gateway_pb2, gateway_pb2_grpc

    rows = [
        {"user_id": 17, "merchant_id": 3, "amount": 42.5, "hour": 13},
        {"user_id": 250, "merchant_id": 88, "amount": 980.0, "hour": 3},
        {"user_id": 401, "merchant_id": 12, "amount": 12.0, "hour": 20},
    ]
    status, http_result = http_json(f"http://{gateway_http}/v1/models/{MODEL}/predict", {"rows": rows})
    if status != 200:
        sys.exit(f"demo: gateway answered {status}: {http_result}")
    with grpc.insecure_channel(gateway_grpc) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = gateway_pb2.PredictRequest(
            model=MODEL,
            rows=[
                gateway_pb2.Row(
                    fields={
                        "user_id": gateway_pb2.Value(int_value=r["user_id"]),
                        "merchant_id": gateway_pb2.Value(int_value=r["merchant_id"]),
                        "amount": gateway_pb2.Value(double_value=r["amount"]),
                        "hour": gateway_pb2.Value(double_value=r["hour"]),
                    }
                )
                for r in rows
            ],
        )
        grpc_result = stub.Predict(request, timeout=10)
    table = Table(
        title=f"{MODEL} v{http_result['version']} through the gateway "
        f"(features {http_result['feature_age_seconds'] / 3600:.1f} h old)"
    )
    for col in ("user_id", "merchant_id", "amount", "hour", "score (HTTP)", "score (gRPC)", "fraud?"):
        table.add_column(col, justify="right")
    for row, p, g in zip(rows, http_result["predictions"], grpc_result.predictions, strict=True):
        table.add_row(
            str(row["user_id"]),
            str(row["merchant_id"]),
            f"{row['amount']:.2f}",
            str(row["hour"]),
            f"{p['score']:.4f}",
            f"{g.score:.4f}",
            "yes" if p["label"] else "no",
        )
    console.print(table)
    status, err = http_json(
        f"http://{gateway_http}/v1/models/{MODEL}/predict",
        {"user_id": 999999, "merchant_id": 3, "amount": 1.0, "hour": 1},
    )
    console.print(f"unknown user -> HTTP {status}: {err.get('error')}")


def main() -> None:
    import mlflow

    from demo.train import prepare_feature_store, train_and_register

    STATE.mkdir(exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{STATE / 'mlflow.db'}")
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])

    step("1. feature store: generate data, feast apply, materialize (SQLite online store)")
    fs = prepare_feature_store(FEATURES)
    step("2. train from Feast historical features (point-in-time), register in MLflow")
    experiment = mlflow.get_experiment_by_name("fraud-demo")
    exp_id = (
        experiment.experiment_id
        if experiment
        else mlflow.create_experiment("fraud-demo", artifact_location=(STATE / "artifacts").as_uri())
    )
    trained = train_and_register(fs, MODEL, exp_id)
    console.print(
        f"columns {trained.columns}\ntest AUC {trained.auc:.3f}; registered {MODEL} "
        f"version {trained.version} with alias champion"
    )

    step("3. builder export (ONNX + parity + config + ensemble)")
    run("builder", "export", f"models:/{MODEL}@champion", "--repo", str(REPO), "--ensemble")
    step("4. builder validate")
    run("builder", "validate", "--repo", str(REPO))

    step("5. builder serve (real Triton, CPU) and gateway serve")
    tp = {name: free_port(p) for name, p in (("http", 8000), ("grpc", 8001), ("metrics", 8002))}
    triton = subprocess.Popen(
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
            str(tp["http"]),
            "--grpc-port",
            str(tp["grpc"]),
            "--metrics-port",
            str(tp["metrics"]),
        ]
    )
    gateway = None
    gate_rc = 0
    try:
        wait_for(
            "Triton", lambda: http_status(f"http://127.0.0.1:{tp['http']}/v2/health/ready") == 200, triton
        )
        gp = {"http": free_port(8080), "grpc": free_port(50051)}
        gateway = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--port",
                str(gp["http"]),
                "--grpc-port",
                str(gp["grpc"]),
                "--triton-url",
                f"127.0.0.1:{tp['grpc']}",
                "--feature-repo",
                str(FEATURES),
                "--model",
                MODEL,
            ]
        )
        wait_for("the gateway", lambda: http_status(f"http://127.0.0.1:{gp['http']}/readyz") == 200, gateway)
        step("6. predictions through the gateway over HTTP and gRPC")
        predictions(f"127.0.0.1:{gp['http']}", f"127.0.0.1:{gp['grpc']}")
        step("7. training-serving skew check")
        run(
            "gateway",
            "skew-check",
            "--model",
            MODEL,
            "--triton-url",
            f"127.0.0.1:{tp['grpc']}",
            "--feature-repo",
            str(FEATURES),
        )
        step("8. release gate: Locust against the gateway, SLA loadtests/sla/demo.yaml")
        reports = STATE / "gate"
        args = [
            "gate",
            "--target",
            f"http://127.0.0.1:{gp['http']}",
            "--sla",
            "demo",
            "--user-class",
            "gateway",
            "--users",
            "8",
            "--spawn-rate",
            "8",
            "--run-time",
            "15s",
            "--model",
            MODEL,
            "--out",
            str(reports),
        ]
        console.print(f"[dim]$ loadtests {' '.join(args)}[/]")
        gate_rc = subprocess.run([sys.executable, "-m", "loadtests", *args]).returncode
        verdict = "PASS" if gate_rc == 0 else f"FAIL (exit {gate_rc})"
        console.print(
            f"gate verdict: {verdict}; reports (summary.json, Locust CSV/HTML, latency.png) in {reports}"
        )
    finally:
        if gateway is not None:
            stop(gateway)
        stop(triton)
    step("done")
    console.print(f"model repository: {REPO}\nregistry: {os.environ['MLFLOW_TRACKING_URI']}")
    if gate_rc:
        sys.exit(gate_rc)


if __name__ == "__main__":
    main()
