"""``make bench``: the registry model in-process vs the exported model on the embedded Triton.

What it does, start to finish, in a throwaway MLflow registry and model repository:

1. trains the tests' GradientBoosting pipeline (``support.models.sklearn_classifier``) and
   registers it as ``fraud@champion``;
2. exports it twice with ``builder export``: ``fraud_batch`` (dynamic batching) and
   ``fraud_nobatch`` (none), same ``max_batch_size``, one instance;
3. (a) times one-row calls of the native model (``mlflow.pyfunc`` and sklearn directly);
4. starts the real ``tritonserver``, checks both models answer like the native one, then
   (b) drives each model with a closed-loop gRPC client in a separate process at each
   concurrency, alternating the two models (A B B A) so drift and noise hit both equally;
5. (c) the gateway against direct Triton on the same rows, the Feast read alone, and a profile
   of the gateway's request path (``gateway_bench.py``); its CPU per request on both online
   stores, stage by stage, and issue 33's must-show figures with their verdicts
   (``gateway_cpu.py``, ``gateway_targets.py``; ``--only targets``: those alone); what drift
   counting, shadow traffic and the shared evidence store cost, each on vs off (``--only
   evidence``: that comparison alone);
6. (d) a neural network's serving routes, per batch size: ONNX Runtime on CPU, on CUDA, with its
   TensorRT accelerator, and the TensorRT plan (``gpu_routes.py``; without a GPU only the CPU
   route is measured and the others say why);
7. (e) what an ensemble costs: the bare model against its ``steps`` and ``fused`` ensembles on
   the same raw rows (``ensemble_bench.py``);
8. (f) the peer to beat: MLServer on the same scikit-learn model against the builder's default
   export on Triton, both over HTTP under ``wrk`` (``peer_bench.py``; MLServer in its own venv);
   the demo's typed model too;
9. (g) the embedded runtime's onnxruntime shim against its floor: a Python-backend model that
   returns its inputs, plus ``session.run`` in-process (``shim_bench.py``);
   (h) the load generator's own ceiling: one Locust process against a master and 2 workers
   (``locust_bench.py``); (i) reason codes: predict vs ``"explain": 3`` through the gateway on
   the demo's model, and the explainer of a 500-tree depth-8 LightGBM in Triton
   (``explain_bench.py``, ``--only explain``);
10. prints a markdown table and writes ``benchmarks/results/<UTC timestamp>.json`` and
   ``benchmarks/results/latest.md`` (and ``gateway-profile.txt``).

Run: ``make bench`` or ``.venv/bin/python benchmarks/run.py [--duration 6 --only gateway ...]``.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# Run as a script, only benchmarks/ is on sys.path; the project's packages and this
# package's helpers are imported from the repository root.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import (  # noqa: E402
    ensemble_bench,
    explain_bench,
    gateway_bench,
    gpu_routes,
    locust_bench,
    peer_bench,
    report,
    shim_bench,
)
from builder.tune import load  # noqa: E402

_VERSIONED = ("mlflow", "scikit-learn", "onnxruntime", "tritonclient", "grpcio", "numpy")
MODEL = "fraud"
BATCH, NOBATCH = f"{MODEL}_batch", f"{MODEL}_nobatch"


class BenchError(Exception):
    """A reason not to report numbers, e.g. a served model that answers wrongly."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=6.0, help="measured seconds per point")
    parser.add_argument("--rounds", type=int, default=2, help="alternating windows a point is split into")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each window")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated client counts")
    parser.add_argument("--queue-delay-us", type=int, default=500, help="fraud_batch max_queue_delay_us")
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--native-seconds", type=float, default=3.0, help="measured seconds per native path")
    parser.add_argument("--results-dir", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument(
        "--explain-seconds", type=float, default=6.0, help="measured seconds per explain point (both sides)"
    )
    parser.add_argument("--explain-calls", type=int, default=100, help="explainer calls of the large model")
    parser.add_argument(
        "--only",
        choices=(
            "triton",
            "gateway",
            "targets",
            "evidence",
            "gpu",
            "ensemble",
            "peer",
            "shim",
            "locust",
            "explain",
        ),
        help="run one part: (a)+(b), (c), (c)'s request-path figures of issue 33 alone (wrk on both "
        "stores, stages, the feature read, gRPC and OIP-gRPC), (c)'s evidence-store on vs off alone, "
        "(d), (e), (f) or (g)",
    )
    gateway_bench.add_arguments(parser)
    shim_bench.add_arguments(parser)
    locust_bench.add_arguments(parser)
    gpu_routes.add_arguments(parser)
    args = parser.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.rounds < 1 or args.duration <= 0 or min(args.concurrency) < 1:
        parser.error("--rounds, --duration and every --concurrency must be positive")
    return args


def say(message: str) -> None:
    """Progress goes to stderr, so stdout carries only the results table."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def warn_if_busy(sample_s: float = 1.0) -> None:
    """Say so up front when others load the machine: on 2 cores they change every number."""
    before = load.machine_cpu_seconds()
    time.sleep(sample_s)
    busy = (load.machine_cpu_seconds() - before) / sample_s
    if busy > 0.25:
        say(f"warning: the machine is already busy ({busy:.1f} cores in use); results will be noisy")


def use_throwaway_registry(root: Path) -> None:
    """A fresh SQLite registry under ``root``, as tests/conftest.py makes one."""
    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its INFO lines drown the progress
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    experiment = mlflow.create_experiment("bench", artifact_location=str(root / "artifacts"))
    mlflow.set_experiment(experiment_id=experiment)


def export_both(repo: Path, args: argparse.Namespace) -> None:
    """The same registered version under two names: only the batching settings differ."""
    from builder.export import ExportRequest, export_model
    from builder.repository.triton_config import ServingOptions

    uri = f"models:/{MODEL}@champion"
    common = {"max_batch_size": args.max_batch_size, "instances": 1}
    export_model(
        ExportRequest(
            uri, repo, name=BATCH, serving=ServingOptions(max_queue_delay_us=args.queue_delay_us, **common)
        )
    )
    export_model(
        ExportRequest(uri, repo, name=NOBATCH, serving=ServingOptions(dynamic_batching=False, **common))
    )


def time_calls(call: Callable[[Any], Any], rows: Sequence[Any], warmup_s: float, seconds: float) -> Any:
    """Latencies (ns) of back-to-back ``call(row)`` in this thread, after a warm-up."""
    import numpy as np

    latencies: list[int] = []
    end_warmup = time.perf_counter() + warmup_s
    while time.perf_counter() < end_warmup:
        call(rows[0])
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter_ns()
        call(rows[i % len(rows)])
        latencies.append(time.perf_counter_ns() - t0)
        i += 1
    return np.asarray(latencies, dtype=np.int64)


def measure_native(registered: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """(a)'s in-process rows: what a Python service calling the model directly would see."""
    import mlflow

    frames = [registered.X.iloc[[i]] for i in range(64)]  # one-row DataFrames, as served
    pyfunc = mlflow.pyfunc.load_model(f"models:/{MODEL}@champion")
    paths = [
        ("MLflow pyfunc predict (label), in-process", pyfunc.predict),
        ("sklearn predict_proba, in-process", registered.native.predict_proba),
    ]
    results = []
    for mode, call in paths:
        say(f"native: {mode} for {args.native_seconds:g} s")
        latencies = time_calls(call, frames, warmup_s=0.5, seconds=args.native_seconds)
        results.append({"mode": mode, **report.latency_summary(latencies, args.native_seconds)})
    return results


def check_answers(url: str, registered: Any) -> None:
    """Refuse to benchmark a model that answers wrongly: both exports must match sklearn."""
    import numpy as np
    import pandas as pd
    import tritonclient.grpc as grpcclient

    x = registered.X.iloc[:16].to_numpy(dtype=np.float32)
    want = registered.native.predict_proba(pd.DataFrame(x.astype(np.float64), columns=registered.X.columns))
    client = grpcclient.InferenceServerClient(url)
    try:
        for name in (BATCH, NOBATCH):
            inp = grpcclient.InferInput("input", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            got = client.infer(name, [inp], client_timeout=10).as_numpy("probabilities")
            error = float(np.abs(got - want).max())
            if not error <= 1e-5:  # also catches NaN
                raise BenchError(f"{name} disagrees with sklearn: max abs error {error:.2g}")
    finally:
        client.close()


def measure_triton(
    url: str, server_pgid: int, registered: Any, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """(b): every (model, concurrency) point, its rounds interleaved A B B A per concurrency."""
    import numpy as np

    rows = registered.X.iloc[:64].to_numpy(dtype=np.float32)
    window = args.duration / args.rounds
    segments: dict[tuple[str, int], list[load.Segment]] = {}
    # spawn, not fork: the client process must not inherit MLflow, sklearn or their threads.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as client_process:
        for concurrency in args.concurrency:
            for r in range(args.rounds):
                for name in (BATCH, NOBATCH) if r % 2 == 0 else (NOBATCH, BATCH):
                    say(f"triton: {name} at concurrency {concurrency}, window {r + 1}/{args.rounds}")
                    plan = load.Plan(concurrency, args.warmup, window)
                    job = client_process.submit(
                        load.measure, url, name, load.float_rows(rows), plan, server_pgid=server_pgid
                    )
                    segments.setdefault((name, concurrency), []).append(job.result())
    return [
        report.triton_point(segments[(name, c)], batching=name == BATCH)
        for c in args.concurrency
        for name in (BATCH, NOBATCH)
    ]


def batching_ratio(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    """Batching on / off at one concurrency, from the same run's interleaved windows."""
    return {
        "concurrency": on["concurrency"],
        "throughput_ratio": on["throughput_per_s"] / off["throughput_per_s"],
        "p99_ratio": on["p99_ms"] / off["p99_ms"],
    }


def notes(points: list[dict[str, Any]], args: argparse.Namespace, cores: int) -> list[str]:
    """What a reader needs to read the table right; the contention figures are measured."""
    busiest = max(points, key=lambda p: p["client_cores"] + p["server_cores"])
    used = busiest["client_cores"] + busiest["server_cores"] + busiest["other_cores"]
    if used >= 0.9 * cores:
        limit = (
            "the CPUs were saturated, so the client's share came out of the server's: "
            "high-concurrency throughput understates the server alone."
        )
    else:
        limit = (
            f"with {used:.1f} of {cores} cores busy the limit was not CPU but the one model "
            "instance running one execution at a time."
        )
    return [
        f"The load generator and the server share this machine's {cores} cores. At "
        f"{busiest['model']} concurrency {busiest['concurrency']} the client (one Python asyncio "
        f"process) used {busiest['client_cores']:.2f} cores and the server {busiest['server_cores']:.2f}; "
        + limit,
        f"Other processes on the machine used up to {max(p['other_cores'] for p in points):.1f} cores "
        "during the windows (column 'other'); well above 0 means these numbers are low and noisy.",
        "Closed loop over gRPC on loopback: each of N clients sends one row, waits for the answer, "
        "sends the next. Latency is client-side (perf_counter_ns), including gRPC and client queueing.",
        f"Each Triton point: {args.rounds} windows of {args.duration / args.rounds:g} s, each after "
        f"{args.warmup:g} s unmeasured warm-up, batching on/off alternated A B B A.",
        "mean batch = Triton's inference_count / execution_count over the windows (statistics API); "
        "queue ms = Triton's mean time a request waited in the scheduler before execution.",
        "Native rows run in the benchmark's own process on one thread with no network: what a "
        "Python service calling the registry model directly pays per row.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 0, or non-zero with the reason on one line (plus a log tail)."""
    from builder.errors import BuilderError

    args = parse_args(argv)
    try:
        return run(args)
    except BuilderError as exc:  # setup, export or server start: the builder's own reasons
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"bench: error: {exc.message}{hint}", file=sys.stderr)
        return exc.exit_code
    except (
        BenchError,
        gateway_bench.GatewayBenchError,
        gpu_routes.GpuBenchError,
        ensemble_bench.EnsembleBenchError,
        peer_bench.PeerBenchError,
        shim_bench.ShimBenchError,
        locust_bench.LocustBenchError,
        explain_bench.ExplainBenchError,
    ) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    """Everything ``main`` promises, raising on the first failure."""
    started = time.monotonic()
    from builder.runtime.install import install_runtime
    from builder.runtime.paths import default_runtime_dir

    warn_if_busy()
    runtime = install_runtime(default_runtime_dir(), log=say)  # idempotent: a stamp check when done
    result: dict[str, Any] = {"timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        root = Path(tmp)
        use_throwaway_registry(root)
        if args.only in (None, "triton"):
            result.update(run_triton(args, runtime, root))
        if args.only in (None, "gateway", "targets", "evidence"):  # targets, evidence: only that part
            result["gateway"] = gateway_bench.run(args, runtime, root / "gateway", say)
        if args.only in (None, "gpu"):
            result["gpu_routes"] = gpu_routes.run(args, root / "gpu", say)
        if args.only in (None, "ensemble"):
            result["ensemble"] = ensemble_bench.run(args, runtime, root / "ensemble", say)
        if args.only in (None, "peer"):
            result["peer"] = peer_bench.run(args, runtime, root / "peer", say)
        if args.only in (None, "shim"):
            result["shim"] = shim_bench.run(args, runtime, root / "shim", say)
        if args.only in (None, "locust"):
            result["locust"] = locust_bench.run(args, root / "locust", say)
        if args.only in (None, "explain"):
            result["explain"] = explain_bench.run(args, runtime, root / "explain", say)
    version = (
        result.pop("triton_version", None)
        or result.get("gateway", {}).get("triton_version")
        or result.get("ensemble", {}).get("triton_version", "not run")
    )
    result["machine"] = report.machine_info(version)
    result["versions"] = {pkg: metadata.version(pkg) for pkg in _VERSIONED}
    if "triton" in result:
        result["notes"] = notes(result["triton"], args, result["machine"]["cores_usable"])
    result["run_seconds"] = round(time.monotonic() - started, 1)
    json_path, md_path = report.write_results(result, args.results_dir)
    print(report.to_markdown(result))
    say(f"wrote {json_path} and {md_path} in {result['run_seconds']:.0f} s")
    return 0


def run_triton(args: argparse.Namespace, runtime: Any, root: Path) -> dict[str, Any]:
    """(a) and (b): the registry model in-process and the two exports on the embedded Triton."""
    from builder.runtime.server import ServerOptions, TritonServer
    from support import models

    say("training and registering fraud@champion")
    registered = models.sklearn_classifier(MODEL)
    say(f"exporting {BATCH} and {NOBATCH}")
    repo = root / "model_repo"
    export_both(repo, args)
    native = measure_native(registered, args)

    server = TritonServer(
        repo,
        ServerOptions.explicit([BATCH, NOBATCH]),
        runtime=runtime,
        log_path=root / "tritonserver.log",
    )
    say("starting tritonserver")
    server.start(timeout=180)
    try:
        assert server.pid is not None
        check_answers(server.grpc_url, registered)
        version = load.triton_version(server.grpc_url)
        # The server runs in its own session: its pid is the group of server + stubs.
        points = measure_triton(server.grpc_url, server.pid, registered, args)
    finally:
        server.stop()

    by_key = {(p["model"], p["concurrency"]): p for p in points}
    per_row = native + [
        {"mode": f"Triton gRPC (label + probabilities), {name}, concurrency 1", **by_key[(name, 1)]}
        for name in (BATCH, NOBATCH)
        if (name, 1) in by_key
    ]
    return {
        "triton_version": version,
        "settings": {
            "model": "GradientBoosting (20 trees, depth 3) in a StandardScaler Pipeline, 5 FP32 features",
            "max_batch_size": args.max_batch_size,
            "max_queue_delay_us": args.queue_delay_us,
            "instances": 1,
            "duration_s": args.duration,
            "rounds": args.rounds,
            "warmup_s": args.warmup,
            "concurrency": args.concurrency,
            "native_seconds": args.native_seconds,
            "load_generator": "benchmarks/load.py (tritonclient.grpc.aio, closed loop, own process)",
        },
        "per_row": per_row,
        "triton": points,
        "batching_ratio": [
            batching_ratio(by_key[(BATCH, c)], by_key[(NOBATCH, c)]) for c in args.concurrency
        ],
    }


if __name__ == "__main__":
    sys.exit(main())
