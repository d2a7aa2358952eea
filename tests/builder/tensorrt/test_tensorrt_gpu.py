"""TensorRT plans on a real GPU: build an engine for a small model, run it, compare it with ONNX
Runtime, and check the repository it lands in.

Skipped, with the reason, where no NVIDIA GPU is visible or the tensorrt package is missing
(``pip install '.[gpu]'``). The embedded Triton has no TensorRT backend, so serving the plan is
left to a GPU Triton (NGC 24.10); here the engine runs through the same script the export leaves
beside the plan, and its outputs are compared with ONNX Runtime on the same rows.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.export import ExportRequest, export_model
from builder.repository.triton_config import parse_pbtxt
from builder.repository.validate import validate_repository
from builder.tensorrt import gpu
from builder.tensorrt.options import TOLERANCES, PlanOptions
from support import models

pytestmark = [
    pytest.mark.integration,
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.gpu_names(), reason="no NVIDIA GPU visible (nvidia-smi finds none)"),
    pytest.mark.skipif(
        importlib.util.find_spec("tensorrt") is None, reason="tensorrt not installed (pip install '.[gpu]')"
    ),
]


@pytest.fixture(scope="module")
def mlp(mlflow_registry: str) -> models.Registered:
    pytest.importorskip("torch")
    return models.pytorch_mlp("trt-gpu-mlp")


@pytest.fixture(scope="module")
def timing_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trt-cache") / "timing.cache"


def export(mlp: models.Registered, repo: Path, formats: tuple[str, ...], cache: Path, **plan: Any):
    return export_model(
        ExportRequest(
            f"models:/{mlp.name}@champion",
            repo,
            formats=formats,
            tensorrt=PlanOptions(timing_cache=cache, **plan),
        )
    )


def test_fp16_plan_beside_the_onnx_model(mlp: models.Registered, tmp_path: Path, timing_cache: Path):
    repo = tmp_path / "repo"
    result = export(mlp, repo, ("onnx", "tensorrt"), timing_cache, precision="fp16")
    assert [w.name for w in result.written] == [mlp.name, f"{mlp.name}_trt"]
    assert result.plan_parity is not None and result.plan_parity.passed
    assert validate_repository(repo)[1] == []

    cc = gpu.compute_capability()
    config = parse_pbtxt((repo / f"{mlp.name}_trt" / "config.pbtxt").read_text())
    plan_file = f"model.sm{cc.replace('.', '')}.plan"
    assert config.platform == "tensorrt_plan" and dict(config.cc_model_filenames) == {cc: plan_file}
    version = repo / f"{mlp.name}_trt" / "1"
    meta = json.loads((version / "metadata.json").read_text())["tensorrt"]
    print(
        "tensorrt metadata:", json.dumps({k: meta[k] for k in ("gpu", "tensorrt_version", "build_seconds")})
    )
    print("parity:", json.dumps(meta["parity"]["outputs"]))
    assert meta["compute_capability"] == cc and meta["tensorrt_version"].startswith("10.")
    assert (version / plan_file).stat().st_size > 0
    assert timing_cache.is_file() and meta["timing_cache"]["saved"]


def test_timing_cache_is_reused_by_the_next_build(mlp: models.Registered, tmp_path: Path, timing_cache: Path):
    export(mlp, tmp_path / "first", ("tensorrt",), timing_cache, precision="fp32")
    export(mlp, tmp_path / "second", ("tensorrt",), timing_cache, precision="tf32")
    meta = json.loads((tmp_path / "second" / mlp.name / "1" / "metadata.json").read_text())["tensorrt"]
    assert meta["timing_cache"]["reused"] is True
    assert meta["parity"]["atol"] == TOLERANCES["tf32"] and meta["parity"]["passed"]


def test_int8_plan_calibrated_on_the_input_example(
    mlp: models.Registered, tmp_path: Path, timing_cache: Path
):
    result = export(mlp, tmp_path / "repo", ("tensorrt",), timing_cache, precision="int8")
    assert result.plan_parity is not None and result.plan_parity.passed
    meta = json.loads((tmp_path / "repo" / mlp.name / "1" / "metadata.json").read_text())["tensorrt"]
    assert "INT8" in meta["flags"] and meta["calibration"]["source"] == "input_example"


def test_the_reproduce_script_rebuilds_and_runs_the_plan(
    mlp: models.Registered, tmp_path: Path, timing_cache: Path
):
    repo = tmp_path / "repo"
    export(mlp, repo, ("tensorrt",), timing_cache, precision="fp16")
    rerun = tmp_path / "rerun"
    shutil.copytree(repo / mlp.name / "1", rerun)
    plan = next(rerun.glob("model.sm*.plan"))
    plan.unlink()
    command = shlex.split((rerun / "build_command.txt").read_text().splitlines()[-1])
    built = subprocess.run(command, cwd=rerun, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-2000:]
    assert plan.is_file()

    rows = np.random.default_rng(7).normal(size=(100, 5)).astype(np.float32)  # > max batch: two runs
    np.savez(rerun / "rows.npz", input=rows)
    ran = subprocess.run(
        [
            sys.executable,
            "build_engine.py",
            "infer",
            "--plan",
            plan.name,
            "--inputs",
            "rows.npz",
            "--outputs",
            "out.npz",
        ],
        cwd=rerun,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    import onnxruntime as ort

    session = ort.InferenceSession(str(rerun / "model.onnx"), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"input": rows})
    with np.load(rerun / "out.npz") as out:
        (got,) = [out[name] for name in out.files]
    np.testing.assert_allclose(got, expected, atol=TOLERANCES["fp16"], rtol=TOLERANCES["fp16"])
