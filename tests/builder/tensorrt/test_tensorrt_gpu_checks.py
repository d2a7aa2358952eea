"""builder.gpu: the checks before a plan build, against a stand-in nvidia-smi on PATH."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import pytest

from builder.errors import GpuUnavailableError
from builder.tensorrt import gpu

# Answers like nvidia-smi 5xx on a two-GPU machine; a name may hold a comma.
FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name) printf 'NVIDIA H200\\nNVIDIA A100-SXM4-80GB, rev 2\\n' ;;
  --query-gpu=index,uuid,compute_cap,name)
    printf '0, GPU-aaaa-1111, 9.0, NVIDIA H200\\n1, GPU-bbbb-2222, 8.0, NVIDIA A100-SXM4-80GB, rev 2\\n' ;;
  *) exit 6 ;;
esac
"""


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE_SMI)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_gpus_and_their_compute_capabilities(smi: None):
    assert gpu.gpu_names() == ["NVIDIA H200", "NVIDIA A100-SXM4-80GB, rev 2"]
    listed = gpu.gpus()
    assert [(g.index, g.compute_capability) for g in listed] == [(0, "9.0"), (1, "8.0")]
    assert listed[1].name == "NVIDIA A100-SXM4-80GB, rev 2" and listed[1].uuid == "GPU-bbbb-2222"
    assert gpu.compute_capability() == "9.0"


@pytest.mark.parametrize(
    "visible, cc",
    [
        (None, "9.0"),
        ("", "9.0"),
        ("1", "8.0"),
        ("1,0", "8.0"),
        ("GPU-bbbb", "8.0"),
        ("7", None),
        ("MIG-x", "9.0"),
    ],
)
def test_build_gpu_honours_cuda_visible_devices(visible: str | None, cc: str | None):
    listed = [gpu.GpuInfo(0, "GPU-aaaa-1111", "H200", "9.0"), gpu.GpuInfo(1, "GPU-bbbb-2222", "A100", "8.0")]
    found = gpu.build_gpu(listed, visible if visible is not None else "")
    assert (found.compute_capability if found else None) == cc


def test_no_gpu_is_exit_9(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert gpu.gpu_names() == [] and gpu.gpus() == []
    with pytest.raises(GpuUnavailableError, match="needs an NVIDIA GPU") as info:
        gpu.require_tensorrt()
    assert info.value.exit_code == 9
    with pytest.raises(GpuUnavailableError, match="no NVIDIA GPU visible"):
        gpu.compute_capability()


def test_gpu_without_tensorrt_names_the_package(smi: None, monkeypatch: pytest.MonkeyPatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "tensorrt" else real(name))
    with pytest.raises(GpuUnavailableError, match="needs the TensorRT Python package") as info:
        gpu.require_tensorrt()
    assert "pip install '.[gpu]'" in (info.value.hint or "")


def test_gpu_and_tensorrt_present_is_ready(smi: None, monkeypatch: pytest.MonkeyPatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: object() if name == "tensorrt" else real(name)
    )
    gpu.require_tensorrt()  # the "not implemented" refusal is gone: the build path exists
