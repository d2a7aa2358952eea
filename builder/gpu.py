"""What a TensorRT engine build needs, checked before any work starts.

Engines are built for the GPU they run on, so ``--format tensorrt`` needs an NVIDIA GPU and
the TensorRT Python package (``pip install .[gpu]``); without them the export stops at once,
before anything is downloaded or written, and ``--format onnx`` keeps working.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

from builder.errors import GpuUnavailableError


def gpu_names() -> list[str]:
    """Names of the visible NVIDIA GPUs (empty without a driver or a GPU)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def require_tensorrt() -> None:
    """Raise GpuUnavailableError unless a GPU and the tensorrt package are both present."""
    if not gpu_names():
        raise GpuUnavailableError(
            "--format tensorrt needs an NVIDIA GPU, and none is visible here (nvidia-smi finds none)",
            hint="export with --format onnx here (it serves on CPU and GPU Triton alike), and build "
            "the TensorRT plan on a machine with the target GPU",
        )
    if importlib.util.find_spec("tensorrt") is None:
        raise GpuUnavailableError(
            "--format tensorrt needs the TensorRT Python package, which is not installed",
            hint="pip install '.[gpu]'",
        )
    raise GpuUnavailableError(
        "TensorRT engine builds are not implemented in this release",
        hint="use --format onnx with --gpu-accelerator tensorrt for ONNX Runtime's TensorRT route",
    )
