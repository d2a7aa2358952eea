"""(i) Reason codes: what ``"explain": k`` costs through the gateway, and the explainer in Triton.

1. The demo's model (``support.train``: the fraud Pipeline, 60 trees of depth 3, one-hot
   ``channel`` and ``merchant_category``) exported as the demo exports it (``--ensemble fused
   --explain``), the embedded Triton, ``gateway serve``; one-row HTTP requests from closed-loop
   client threads at 1 and 16 clients, predict without ``explain`` and with ``"explain": 3``
   alternated (A B B A) in the same run: p50/p99 latency and the gateway's and Triton's CPU per
   request (their processes' CPU time over the window / requests answered).
2. Triton alone: a 500-tree, depth-8 LightGBM (255 leaves) exported with ``--explain``; one-row
   gRPC calls to the model and to ``NAME_explain``, p50/p99.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL, LARGE = "fraud-detector", "lgbm-large"


class ExplainBenchError(Exception):
    """A reason not to report explain numbers (a wrong answer, a server that did not start)."""


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its children that ran (from /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _group_cpu(pgid: int) -> float:
    """CPU of every process in the group ``pgid`` (Triton and its Python-backend stubs)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    total += _cpu_seconds(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return total


def _window(url: str, bodies: list[bytes], clients: int, seconds: float) -> list[float]:
    """Closed-loop one-row POSTs from ``clients`` threads for ``seconds``: each latency (s)."""
    import requests

    latencies: list[float] = []
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def client(seed: int) -> None:
        mine, i = [], seed
        with requests.Session() as session:
            while time.perf_counter() < end:
                start = time.perf_counter()
                response = session.post(url, data=bodies[i % len(bodies)], timeout=30)
                mine.append(time.perf_counter() - start)
                if response.status_code != 200:
                    raise ExplainBenchError(f"gateway answered {response.status_code}: {response.text[:200]}")
                i += 1
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def _point(latencies: list[float], requests_: int, gateway_cpu: float, triton_cpu: float) -> dict[str, Any]:
    ms = np.asarray(latencies) * 1000
    return {
        "requests": requests_,
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "gateway_cpu_us_per_request": round(gateway_cpu / requests_ * 1e6, 1),
        "triton_cpu_us_per_request": round(triton_cpu / requests_ * 1e6, 1),
    }


def gateway_points(args: Any, runtime: Any, root: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    import mlflow

    from benchmarks.gateway_bench import pick_rows
    from builder.export import ExportRequest, export_model
    from builder.runtime.server import ServerOptions, TritonServer
    from support import servers
    from support.train import prepare_feature_store, train_and_register

    repo = root / "feature_repo"
    shutil.copytree(REPO_ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    store = prepare_feature_store(repo)
    experiment = mlflow.get_experiment_by_name("bench")
    assert experiment is not None
    say("explain: training the demo's model (60 trees), exporting it as the demo does, with --explain")
    trained = train_and_register(store, MODEL, experiment.experiment_id)
    model_repo = root / "model_repo"
    export_model(
        ExportRequest(
            f"models:/{MODEL}@champion", model_repo, ensemble=True, ensemble_mode="fused", explain=True
        )
    )
    rows, _ = pick_rows(store, trained.columns, 64)
    names = [p.name for p in model_repo.iterdir() if p.is_dir()]
    server = TritonServer(
        model_repo, ServerOptions.explicit(names), runtime=runtime, log_path=root / "triton.log"
    )
    server.start(timeout=180)
    points: list[dict[str, Any]] = []
    try:
        env = {
            "GATEWAY_TRITON_URL": f"http://{server.http_url}",
            "GATEWAY_FEATURE_REPO": str(repo),
            "GATEWAY_MODELS": json.dumps([MODEL]),
        }
        (root / "gw").mkdir(exist_ok=True)
        with servers.gateway_process(root / "gw", env) as gw:
            url = f"{gw.url}/v1/models/{MODEL}/predict"
            bodies = {
                "predict": [json.dumps(r).encode() for r in rows],
                "predict + explain 3": [json.dumps({"rows": [r], "explain": 3}).encode() for r in rows],
            }
            for mode in bodies:  # warm both paths (the explainer's first call loads its session)
                _window(url, bodies[mode], 1, 1.0)
            assert server.pid is not None
            for clients in (1, 16):
                sums: dict[str, list[Any]] = {m: [[], 0.0, 0.0] for m in bodies}
                for mode in (*bodies, *reversed(bodies)):  # A B B A
                    g0, t0 = _cpu_seconds(gw.proc.pid), _group_cpu(server.pid)
                    latencies = _window(url, bodies[mode], clients, args.explain_seconds / 2)
                    sums[mode][0] += latencies
                    sums[mode][1] += _cpu_seconds(gw.proc.pid) - g0
                    sums[mode][2] += _group_cpu(server.pid) - t0
                for mode, (latencies, gcpu, tcpu) in sums.items():
                    point = {
                        "mode": mode,
                        "clients": clients,
                        **_point(latencies, len(latencies), gcpu, tcpu),
                    }
                    say(f"explain: {point}")
                    points.append(point)
    finally:
        server.stop()
    return points


def triton_points(args: Any, runtime: Any, root: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    import lightgbm
    import mlflow
    import pandas as pd
    import tritonclient.grpc as grpcclient
    from mlflow import MlflowClient

    from builder.export import ExportRequest, export_model
    from builder.runtime.server import ServerOptions, TritonServer

    rng = np.random.default_rng(0)
    x = pd.DataFrame(rng.normal(size=(20_000, 20)), columns=[f"f{i}" for i in range(20)])
    y = (x.f0 + x.f1 * x.f2 + rng.normal(0, 0.5, len(x)) > 0).astype(int)
    say("explain: training a 500-tree depth-8 LightGBM, exporting it with --explain")
    model = lightgbm.LGBMClassifier(n_estimators=500, max_depth=8, num_leaves=255, verbose=-1).fit(x, y)
    with mlflow.start_run():
        info = mlflow.lightgbm.log_model(
            model, name="model", input_example=x.iloc[:5], registered_model_name=LARGE
        )
    MlflowClient().set_registered_model_alias(LARGE, "champion", str(info.registered_model_version))
    repo = root / "large_repo"
    export_model(ExportRequest(f"models:/{LARGE}@champion", repo, explain=True))
    names = [LARGE, f"{LARGE}_explain"]
    server = TritonServer(
        repo, ServerOptions.explicit(names), runtime=runtime, log_path=root / "triton-large.log"
    )
    server.start(timeout=180)
    points = []
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        config = client.get_model_config(LARGE, as_json=True)["config"]
        (tensor,) = config["input"]
        row = x.iloc[:1].to_numpy(np.float32)
        for name, calls in ((LARGE, args.explain_calls * 10), (f"{LARGE}_explain", args.explain_calls)):
            inp = grpcclient.InferInput(tensor["name"], list(row.shape), "FP32")
            inp.set_data_from_numpy(row)
            client.infer(name, [inp])  # warm
            latencies = []
            for _ in range(calls):
                start = time.perf_counter()
                client.infer(name, [inp])
                latencies.append(time.perf_counter() - start)
            ms = np.asarray(latencies) * 1000
            point = {
                "model": name,
                "calls": calls,
                "p50_ms": round(float(np.percentile(ms, 50)), 2),
                "p99_ms": round(float(np.percentile(ms, 99)), 2),
            }
            say(f"explain: {point}")
            points.append(point)
        client.close()
    finally:
        server.stop()
    return points


def run(args: Any, runtime: Any, root: Path, say: Callable[[str], None]) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    return {
        "gateway": gateway_points(args, runtime, root, say),
        "triton_large": triton_points(args, runtime, root, say),
    }


def markdown(result: dict[str, Any]) -> list[str]:
    lines = [
        "## (i) Reason codes: predict vs predict + explain 3 (demo model, gateway HTTP, one row)",
        "",
        "| mode | clients | p50 ms | p99 ms | gateway CPU µs/req | Triton CPU µs/req |",
        "|---|---|---|---|---|---|",
    ]
    for p in result["gateway"]:
        lines.append(
            f"| {p['mode']} | {p['clients']} | {p['p50_ms']} | {p['p99_ms']} | "
            f"{p['gateway_cpu_us_per_request']} | {p['triton_cpu_us_per_request']} |"
        )
    lines += ["", "| Triton gRPC, 1 row, LightGBM 500 trees depth 8 | p50 ms | p99 ms |", "|---|---|---|"]
    lines += [f"| {p['model']} | {p['p50_ms']} | {p['p99_ms']} |" for p in result["triton_large"]]
    return [*lines, ""]
