"""What a TensorRT engine build needs, checked before any work starts.

Engines are built for the GPU they run on, so ``--format tensorrt`` needs an NVIDIA GPU and
the TensorRT Python package (``pip install .[gpu]``); without them the export stops at once,
before anything is downloaded or written, and ``--format onnx`` keeps working.

The builder process never imports ``tensorrt`` itself: the build runs in a subprocess (see
``builder.tensorrt.build``), so only the package's presence is checked here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass

from builder.errors import GpuUnavailableError


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as nvidia-smi lists it."""

    index: int
    uuid: str
    name: str
    compute_capability: str  # "9.0": the key Triton's cc_model_filenames uses


def _query(fields: str) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-gpu``; the last field may hold commas (GPU names can)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    maxsplit = fields.count(",")
    return [
        [c.strip() for c in line.split(",", maxsplit)] for line in out.stdout.splitlines() if line.strip()
    ]


def gpu_names() -> list[str]:
    """Names of the visible NVIDIA GPUs (empty without a driver or a GPU)."""
    return [row[0] for row in _query("name") if row[0]]


def gpus() -> list[GpuInfo]:
    """Every GPU nvidia-smi lists, with its compute capability (empty without a GPU)."""
    found = []
    for row in _query("index,uuid,compute_cap,name"):
        if len(row) == 4 and row[0].isdigit():
            found.append(GpuInfo(index=int(row[0]), uuid=row[1], compute_capability=row[2], name=row[3]))
    return found


def build_gpu(listed: list[GpuInfo] | None = None, visible: str | None = None) -> GpuInfo | None:
    """The GPU a CUDA process started now would use as device 0, as far as nvidia-smi can tell.

    nvidia-smi ignores ``CUDA_VISIBLE_DEVICES``, so its first entry is honoured here (an index
    or a ``GPU-…`` UUID prefix). CUDA may still order devices differently from nvidia-smi on a
    mixed machine; the engine script reports the capability it really built for, and the
    build is refused if the two disagree.
    """
    listed = gpus() if listed is None else listed
    if not listed:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    first = (visible or "").split(",")[0].strip()
    if first.isdigit():
        return next((g for g in listed if g.index == int(first)), None)
    if first.startswith("GPU-"):
        return next((g for g in listed if g.uuid.startswith(first)), None)
    return listed[0]


def compute_capability() -> str:
    """Compute capability ("9.0") of the GPU a build would run on; GpuUnavailableError if none."""
    gpu = build_gpu()
    if gpu is None or not gpu.compute_capability:
        raise GpuUnavailableError(
            "no NVIDIA GPU visible to build on (nvidia-smi lists none, or none matches CUDA_VISIBLE_DEVICES)",
            hint="check nvidia-smi and CUDA_VISIBLE_DEVICES",
        )
    return gpu.compute_capability


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
            hint="pip install '.[gpu]' (TensorRT 10.5, the version Triton 24.10 loads plans of)",
        )
