"""Install NVIDIA's ``perf_analyzer`` into ``.runtime/perf-analyzer/`` (``make perf-analyzer``).

PyPI's ``perf-analyzer`` is a placeholder; the binary ships in the ``tritonclient==2.41.0``
wheel (``tritonclient-2.41.0.data/data/bin/perf_analyzer``), which the project does not install
(it pins a newer tritonclient). It links ``libb64.so.0d`` (Debian's ``libb64-0d``, which the
make target installs) and a ``libcudart.so.12``, which the embedded Triton runtime carries as
``nvidia_pytriton.libs/libcudart-*.so.12*`` (/work/shared/triton-embedded.md). So: download the
wheel (no install), take the binary out of it, copy that CUDA runtime beside it under its plain
name. ``LD_LIBRARY_PATH=.runtime/perf-analyzer/lib`` then runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".runtime" / "perf-analyzer"
WHEEL = "tritonclient==2.41.0"
MEMBER = "tritonclient-2.41.0.data/data/bin/perf_analyzer"


def install(target: Path = TARGET) -> Path:
    """The binary's path, after installing it if it is not there yet."""
    binary = target / "perf_analyzer"
    if binary.exists():
        return binary
    cudart = sorted((ROOT / ".runtime").glob("pytriton/nvidia_pytriton.libs/libcudart*.so.12*"))
    if not cudart:
        raise SystemExit("error: no libcudart.so.12 in .runtime/pytriton: run `make runtime` first")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                tmp,
                WHEEL,
            ],
            check=True,
        )
        (wheel,) = Path(tmp).glob("tritonclient-2.41.0-*.whl")
        (target / "lib").mkdir(parents=True, exist_ok=True)
        staged = target / "perf_analyzer.tmp"
        with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src, staged.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        shutil.copy(cudart[0], target / "lib" / "libcudart.so.12")
        staged.chmod(0o755)
        staged.replace(binary)  # whole or not at all: a half-copied binary is never found
    return binary


if __name__ == "__main__":
    print(install())
