"""Part (d) of ``make bench``: which serving routes run where, how they are timed and checked,
and what the table says, on real ONNX Runtime sessions (CPU here; the GPU routes need a GPU and
say so rather than falling back to the CPU without a word)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benchmarks import gpu_routes
from benchmarks.report import gpu_markdown, to_markdown
from builder.tensorrt.profiles import BatchProfile, input_shapes
from builder.tensorrt.script import ScriptSpec, render_script
from builder.tensors import TensorSpec


def scale_model(path: Path, factor: float) -> Path:
    """y = x * factor on a [N, 4] float input named ``input``."""
    node = helper.make_node("Mul", ["input", "k"], ["y"])
    graph = helper.make_graph(
        [node],
        "scale",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor("k", TensorProto.FLOAT, [1], [factor])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def cpu_session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_without_a_gpu_only_the_cpu_route_runs_and_the_others_say_why():
    reasons = gpu_routes.availability(None, ["CPUExecutionProvider"], tensorrt=True)
    assert reasons[gpu_routes.CPU] is None
    assert {reasons[r] for r in gpu_routes.ROUTES if r != gpu_routes.CPU} == {
        "no NVIDIA GPU visible (nvidia-smi finds none)"
    }


def test_with_a_gpu_each_route_needs_its_own_package():
    cpu_only = gpu_routes.availability("NVIDIA H200", ["CPUExecutionProvider"], tensorrt=False)
    assert "CUDAExecutionProvider" in (cpu_only[gpu_routes.CUDA] or "")
    assert "TensorrtExecutionProvider" in (cpu_only[gpu_routes.ORT_TRT] or "")
    assert "tensorrt is not installed" in (cpu_only[gpu_routes.PLAN] or "")
    full = gpu_routes.availability(
        "NVIDIA H200", ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"], True
    )
    assert set(full.values()) == {None}


def test_batch_sizes_parse_sorted_and_refuse_nonsense():
    assert gpu_routes.batch_sizes("64,1,8,8") == [1, 8, 64]
    for bad in ("", "0,8", "a"):
        with pytest.raises(argparse.ArgumentTypeError):
            gpu_routes.batch_sizes(bad)


def test_a_gpu_route_that_falls_back_to_the_cpu_is_refused(tmp_path: Path):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: the fallback cannot be shown here")
    model = scale_model(tmp_path / "m.onnx", 2.0)
    # ONNX Runtime only warns, and runs the session on the CPU: the bench must not time that.
    with (
        pytest.warns(UserWarning, match="CUDAExecutionProvider"),
        pytest.raises(gpu_routes.GpuBenchError, match="did not take CUDAExecutionProvider"),
    ):
        gpu_routes.ort_session(gpu_routes.CUDA, model, tmp_path, [1, 8], "input:{}x4")


def test_timed_calls_are_real_runs_and_summarized(tmp_path: Path):
    session = cpu_session(scale_model(tmp_path / "m.onnx", 2.0))
    rows = np.ones((8, 4), dtype=np.float32)
    ns = gpu_routes.time_session(session, rows, seconds=0.05, warmup=0.0)
    assert len(ns) > 1 and (ns > 0).all()
    point = gpu_routes.summarize(8, [ns, ns])
    assert point["calls"] == 2 * len(ns) and point["p50_ms"] <= point["p99_ms"]
    # rows/s is rows per second of calls, not calls per second.
    assert point["rows_per_s"] == pytest.approx(8 * 2 * len(ns) / (2 * ns.sum() / 1e9))


def test_a_route_that_answers_differently_stops_the_bench(tmp_path: Path):
    rows = np.ones((8, 4), dtype=np.float32)
    same = {
        gpu_routes.CPU: cpu_session(scale_model(tmp_path / "a.onnx", 2.0)),
        gpu_routes.CUDA: cpu_session(scale_model(tmp_path / "b.onnx", 2.0)),
    }
    gpu_routes.check_routes(same, rows)
    same[gpu_routes.CUDA] = cpu_session(scale_model(tmp_path / "c.onnx", 2.001))
    with pytest.raises(gpu_routes.GpuBenchError, match=r"differs from onnxruntime CPU by up to 0\.001"):
        gpu_routes.check_routes(same, rows)


def test_a_failed_plan_run_is_one_clear_reason(tmp_path: Path):
    """build_engine.py bench, as the export leaves it, run where tensorrt is missing."""
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    spec = ScriptSpec(
        model="models:/gpu-mlp/1",
        plan="model.sm90.plan",
        precision="fp16",
        shapes=input_shapes(BatchProfile(1, 8, 64), [TensorSpec("input", "float32", (-1, 4))]),
        workspace_mb=1024,
        timing_cache=None,
        calibration=False,
    )
    (tmp_path / "build_engine.py").write_text(render_script(spec))
    (tmp_path / "model.sm90.plan").write_bytes(b"plan")
    np.savez(tmp_path / "rows.npz", input=np.ones((8, 4), dtype=np.float32))
    with pytest.raises(gpu_routes.GpuBenchError, match=r"failed \(3\): error: cannot import tensorrt"):
        gpu_routes.time_plan(tmp_path, tmp_path / "rows.npz", [1, 8], seconds=0.1, warmup=0.0)
    help_text = subprocess.run(
        [sys.executable, "build_engine.py", "bench", "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert help_text.returncode == 0 and "--batch-sizes" in help_text.stdout


def test_the_table_compares_each_route_with_the_cpu_and_lists_the_rest():
    point = {"calls": 10, "p50_ms": 0.5, "p99_ms": 0.9}
    result = {
        "baseline": gpu_routes.CPU,
        "settings": {
            "model": "MLP",
            "caller": "one caller",
            "seconds": 2.0,
            "rounds": 2,
            "gpu": "NVIDIA H200",
            "onnxruntime": "1.32.0",
        },
        "routes": [
            {
                "route": gpu_routes.CPU,
                "reason": None,
                "points": [{**point, "batch_size": 8, "rows_per_s": 1000.0}],
            },
            {
                "route": gpu_routes.PLAN,
                "reason": None,
                "points": [{**point, "batch_size": 8, "rows_per_s": 4000.0}],
            },
            {"route": gpu_routes.CUDA, "reason": "onnxruntime has no CUDAExecutionProvider", "points": []},
        ],
    }
    text = "\n".join(gpu_markdown(result))
    assert f"| {gpu_routes.PLAN} | 8 | 0.500 | 0.900 | 4,000 | 4.00× |" in text
    assert f"| {gpu_routes.CPU} | 8 | 0.500 | 0.900 | 1,000 | 1.00× |" in text
    assert f"- {gpu_routes.CUDA}: onnxruntime has no CUDAExecutionProvider" in text
    report = {
        "timestamp": "2026-12-01T00:00:00Z",
        "machine": {"cpu": "x", "cores_usable": 2, "python": "3.11", "triton": "not run"},
        "gpu_routes": result,
    }
    assert "## (d) Serving routes" in to_markdown(report)
