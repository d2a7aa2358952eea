"""(d) The three serving routes of a neural network, side by side, per batch size.

Routes (docs/gpu.md, "Routes"): ONNX Runtime on CPU; ONNX Runtime on CUDA, plain and with its
TensorRT accelerator (FP16, the config's ``--gpu-accelerator tensorrt``); the TensorRT plan
``builder export --format tensorrt`` builds (FP16). Each is called directly with numpy arrays,
not through Triton, so the table isolates the engines: the embedded Triton has no GPU backends,
and on a GPU Triton the server's overhead is the same for every route.

1. registers a small PyTorch MLP (random weights; timing does not need training) in run.py's
   throwaway registry and exports it with ``builder export`` (``--format all`` where a GPU and
   tensorrt are present, so the plan is the one the export built and checked);
2. checks that every ONNX Runtime route answers like the CPU one (the plan passed the export's
   own parity check);
3. times one closed-loop caller per route and batch size, copies included (host to host), in
   alternating rounds (A B C D, D C B A) so drift hits every route alike. The plan runs in
   ``build_engine.py bench``, the script the export leaves beside it, so this process never
   imports TensorRT.

A route that cannot run here (no GPU, no onnxruntime-gpu, no tensorrt) is listed with the reason;
on the development machines (no GPU) only the CPU route is measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MODEL = "gpu-mlp"
CPU = "onnxruntime CPU"
CUDA = "onnxruntime CUDA"
ORT_TRT = "onnxruntime + TensorRT EP (fp16)"
PLAN = "TensorRT plan (fp16)"
ROUTES = (CPU, CUDA, ORT_TRT, PLAN)
# Same-precision routes must agree closely; the FP16 ones within the plan's fp16 tolerance.
TOLERANCE = {CUDA: 1e-4, ORT_TRT: 1e-2}
PLAN_TIMEOUT_S = 600.0


class GpuBenchError(Exception):
    """A reason not to report these numbers (a route that answers wrongly, a failed plan run)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu-batch-sizes", type=batch_sizes, default=[1, 8, 64], help="batch sizes of part (d)"
    )
    parser.add_argument(
        "--gpu-seconds", type=float, default=2.0, help="measured seconds per route and batch size"
    )
    parser.add_argument("--gpu-features", type=int, default=64, help="input width of the MLP")
    parser.add_argument("--gpu-hidden", type=int, default=512, help="width of its two hidden layers")


def batch_sizes(text: str) -> list[int]:
    """``1,8,64`` -> [1, 8, 64], sorted, each >= 1 (an argparse type)."""
    try:
        sizes = sorted({int(b) for b in text.split(",") if b.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: batch sizes must be >= 1")
    return sizes


@dataclass
class Route:
    name: str
    reason: str | None = None  # why it is not measured; None: measured
    latencies: dict[int, list[np.ndarray]] = field(default_factory=dict)  # batch -> ns per round


def availability(gpu: str | None, providers: list[str], tensorrt: bool) -> dict[str, str | None]:
    """Why each route cannot run here (None where it can), from what the machine has."""
    if not gpu:
        no_gpu = "no NVIDIA GPU visible (nvidia-smi finds none)"
        return {CPU: None, CUDA: no_gpu, ORT_TRT: no_gpu, PLAN: no_gpu}

    def provider(name: str) -> str | None:
        return None if name in providers else f"onnxruntime has no {name} (pip install '.[gpu]')"

    return {
        CPU: None,
        CUDA: provider("CUDAExecutionProvider"),
        ORT_TRT: provider("TensorrtExecutionProvider"),
        PLAN: None if tensorrt else "tensorrt is not installed (pip install '.[gpu]')",
    }


def register(features: int, hidden: int) -> None:
    """A 3-layer MLP as ``gpu-mlp@champion`` (sigmoid output, one column)."""
    import mlflow
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
        torch.nn.Sigmoid(),
    ).eval()
    example = np.random.default_rng(0).normal(size=(8, features)).astype(np.float32)
    with mlflow.start_run():
        info = mlflow.pytorch.log_model(
            module, name="model", input_example=example, registered_model_name=MODEL
        )
    mlflow.MlflowClient().set_registered_model_alias(MODEL, "champion", str(info.registered_model_version))


def export(repo: Path, max_batch: int, with_plan: bool) -> tuple[Path, Path | None]:
    """The exported ``model.onnx`` and, with ``with_plan``, the folder of the FP16 plan."""
    from builder.export import ExportRequest, export_model
    from builder.repository.triton_config import ServingOptions
    from builder.tensorrt.options import PlanOptions

    formats = ("onnx", "tensorrt") if with_plan else ("onnx",)
    export_model(
        ExportRequest(
            f"models:/{MODEL}@champion",
            repo,
            serving=ServingOptions(max_batch_size=max_batch),
            formats=formats,
            tensorrt=PlanOptions(precision="fp16"),
        )
    )
    return repo / MODEL / "1" / "model.onnx", (repo / f"{MODEL}_trt" / "1") if with_plan else None


def ort_session(route: str, onnx_path: Path, cache: Path, sizes: list[int], input_shape: str) -> Any:
    """A session on ``route``'s provider; ``input_shape`` is ``NAME:{}xWIDTH`` for the TensorRT EP's
    profile (the batch goes into the braces)."""
    import onnxruntime as ort

    providers: list[Any]
    if route == CPU:
        providers = ["CPUExecutionProvider"]
    elif route == CUDA:
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    else:
        # One engine profile over every batch size, so no shape triggers a rebuild mid-run.
        trt_options = {
            "trt_fp16_enable": True,
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(cache),
            "trt_profile_min_shapes": input_shape.format(sizes[0]),
            "trt_profile_opt_shapes": input_shape.format(sizes[len(sizes) // 2]),
            "trt_profile_max_shapes": input_shape.format(sizes[-1]),
        }
        providers = [
            ("TensorrtExecutionProvider", trt_options),
            "CUDAExecutionProvider",
            "CPUExecutionProvider",
        ]
    session = ort.InferenceSession(str(onnx_path), providers=providers)
    wanted = providers[0] if isinstance(providers[0], str) else providers[0][0]
    if session.get_providers()[0] != wanted:  # ONNX Runtime falls back to CPU without a word
        raise GpuBenchError(
            f"{route}: onnxruntime did not take {wanted} (it runs on {session.get_providers()})"
        )
    return session


def time_session(session: Any, rows: np.ndarray, seconds: float, warmup: float) -> np.ndarray:
    """Latencies (ns) of back-to-back ``session.run`` calls on ``rows`` for ``seconds``."""
    feeds = {session.get_inputs()[0].name: rows}
    deadline = time.perf_counter() + warmup
    while time.perf_counter() < deadline:
        session.run(None, feeds)
    times: list[int] = []
    end = time.perf_counter_ns() + int(seconds * 1e9)
    while (start := time.perf_counter_ns()) < end or not times:
        session.run(None, feeds)
        times.append(time.perf_counter_ns() - start)
    return np.asarray(times, dtype=np.int64)


def time_plan(
    plan_dir: Path, rows_file: Path, sizes: list[int], seconds: float, warmup: float
) -> dict[int, np.ndarray]:
    """Latencies (ns) per batch size from ``build_engine.py bench`` in a subprocess."""
    plan = next(plan_dir.glob("model.sm*.plan"))
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as tmp:
        out = Path(tmp) / "latencies.npz"
        command = [sys.executable, "build_engine.py", "bench", "--plan", plan.name]
        command += ["--batch-sizes", ",".join(map(str, sizes)), "--seconds", str(seconds)]
        command += ["--warmup", str(warmup), "--inputs", str(rows_file), "--latencies", str(out)]
        ran = subprocess.run(command, cwd=plan_dir, capture_output=True, text=True, timeout=PLAN_TIMEOUT_S)
        if ran.returncode != 0:
            last = (ran.stderr.strip().splitlines() or ["no output"])[-1]
            raise GpuBenchError(f"build_engine.py bench failed ({ran.returncode}): {last}")
        with np.load(out) as data:
            return {b: np.asarray(data[f"batch{b}"]) for b in sizes}


def summarize(batch: int, rounds: list[np.ndarray]) -> dict[str, Any]:
    ns = np.concatenate(rounds)
    return {
        "batch_size": batch,
        "calls": len(ns),
        "p50_ms": float(np.percentile(ns, 50) / 1e6),
        "p99_ms": float(np.percentile(ns, 99) / 1e6),
        "rows_per_s": float(batch * len(ns) / (ns.sum() / 1e9)),
    }


def check_routes(sessions: dict[str, Any], rows: np.ndarray) -> None:
    """Every ONNX Runtime route answers like the CPU one on the same rows."""
    if CPU not in sessions:
        return
    feeds = {sessions[CPU].get_inputs()[0].name: rows}
    (expected,) = sessions[CPU].run(None, feeds)
    for route, session in sessions.items():
        if route == CPU:
            continue
        (got,) = session.run(None, feeds)
        tol = TOLERANCE[route]
        if not np.allclose(got, expected, atol=tol, rtol=tol):
            worst = float(np.max(np.abs(got - expected)))
            raise GpuBenchError(f"{route} differs from {CPU} by up to {worst:.3g} (tolerance {tol})")


def run(args: argparse.Namespace, root: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Part (d): settings, and per route either its points or the reason it is not measured."""
    import onnxruntime as ort

    from builder.tensorrt import gpu

    sizes: list[int] = args.gpu_batch_sizes
    gpus = gpu.gpu_names()
    has_trt = importlib.util.find_spec("tensorrt") is not None
    reasons = availability(gpus[0] if gpus else None, list(ort.get_available_providers()), has_trt)
    routes = [Route(name, reasons[name]) for name in ROUTES]
    say(f"gpu routes: {', '.join(r.name for r in routes if r.reason is None)} measured here")

    say(f"gpu routes: registering {MODEL} ({args.gpu_features} → {args.gpu_hidden} → {args.gpu_hidden} → 1)")
    register(args.gpu_features, args.gpu_hidden)
    with_plan = reasons[PLAN] is None
    say(f"gpu routes: exporting ({'onnx + tensorrt plan' if with_plan else 'onnx'})")
    onnx_path, plan_dir = export(root / "model_repo", max(sizes[-1], 1), with_plan)

    import onnx

    graph_input = onnx.load(str(onnx_path), load_external_data=False).graph.input[0].name
    rows = np.random.default_rng(1).normal(size=(sizes[-1], args.gpu_features)).astype(np.float32)
    rows_file = root / "rows.npz"
    np.savez(rows_file, **{graph_input: rows})
    shape = f"{graph_input}:{{}}x{args.gpu_features}"
    sessions = {
        r.name: ort_session(r.name, onnx_path, root / "ort-trt-cache", sizes, shape)
        for r in routes
        if r.reason is None and r.name != PLAN
    }
    check_routes(sessions, rows)

    per_round, warmup = args.gpu_seconds / args.rounds, min(args.warmup, 0.5)
    for round_ in range(args.rounds):
        order = routes if round_ % 2 == 0 else routes[::-1]
        for route in (r for r in order if r.reason is None):
            say(f"gpu routes: round {round_ + 1}/{args.rounds}: {route.name}")
            if route.name == PLAN:
                assert plan_dir is not None
                measured = time_plan(plan_dir, rows_file, sizes, per_round, warmup)
            else:
                measured = {b: time_session(sessions[route.name], rows[:b], per_round, warmup) for b in sizes}
            for b, ns in measured.items():
                route.latencies.setdefault(b, []).append(ns)

    return {
        "baseline": CPU,
        "settings": {
            "model": f"PyTorch MLP {args.gpu_features} → {args.gpu_hidden} → {args.gpu_hidden} → 1 "
            "(ReLU, sigmoid), FP32 ONNX",
            "batch_sizes": sizes,
            "seconds": args.gpu_seconds,
            "rounds": args.rounds,
            "gpu": gpus[0] if gpus else None,
            "onnxruntime": ort.__version__,
            "onnxruntime_providers": list(ort.get_available_providers()),
            "caller": "one closed-loop caller per route, numpy in and out (copies included)",
        },
        "routes": [
            {
                "route": r.name,
                "reason": r.reason,
                "points": [summarize(b, r.latencies[b]) for b in sizes] if r.reason is None else [],
            }
            for r in routes
        ],
    }
