"""`make bench` starts at all: every benchmark module imports (a module moved under them once
broke `make bench` with no test noticing), and `benchmarks/run.py --help` lists every part."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_benchmark_module_imports() -> None:
    names = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")
    code = f"import importlib\nfor name in {names!r}:\n    importlib.import_module('benchmarks.' + name)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_bench_runner_lists_its_parts() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for part in ("triton", "gateway", "evidence", "gpu", "ensemble", "peer", "shim", "locust"):
        assert part in done.stdout
