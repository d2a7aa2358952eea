"""Run the engine script in a subprocess: build the plan, then run it on the parity rows.

The work folder is laid out as the version folder will be (``model.onnx``, ``build_engine.py``,
``calibration.npz``), and the script runs there with relative paths, so the command recorded in
``build_command.txt`` is exactly the one that ran and reruns unchanged in the version folder.
A failed build keeps its folder (script, ONNX model, log) for the user to rerun by hand.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import ConversionError, GpuUnavailableError
from builder.tensorrt.script import (
    CALIBRATION_NAME,
    COMMAND_NAME,
    ONNX_NAME,
    RESULT_NAME,
    SCRIPT_NAME,
    ScriptSpec,
    command_text,
    render_script,
)

LOG_NAME = "build.log"
_PARITY_IN, _PARITY_OUT = "parity_inputs.npz", "parity_outputs.npz"
_TAIL_LINES = 12
_EXIT_MISSING = 3  # engine_script's exit code for "no tensorrt / driver / GPU"


@dataclass(frozen=True)
class PlanBuild:
    """A built plan, its engine's outputs on the parity rows, and the files to keep beside it."""

    plan: bytes
    result: dict[str, Any]  # the script's build.json
    outputs: dict[str, np.ndarray]
    files: dict[str, bytes]  # build_engine.py, build_command.txt, build.log, model.onnx, ...
    command: tuple[str, ...]

    @property
    def compute_capability(self) -> str:
        return str(self.result["device"]["compute_capability"])

    @property
    def tensorrt_version(self) -> str:
        return str(self.result["tensorrt_version"])


def default_timing_cache(compute_capability: str) -> Path:
    """One timing cache per GPU generation, reused by every build on this machine."""
    # Keyed by GPU generation: a timing cache measured on one GPU misleads a build on another.
    # (The script also sets aside a cache from another TensorRT version, which TensorRT flags.)
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "triton-stack" / "tensorrt" / f"timing-sm{compute_capability.replace('.', '')}.cache"


def build_plan(
    spec: ScriptSpec,
    onnx_bytes: bytes,
    feeds: dict[str, np.ndarray],
    workdir: Path,
    *,
    expected_cc: str,
    calibration_npz: bytes | None = None,
    timeout_s: float = 1800.0,
) -> PlanBuild:
    """Build ``spec`` from ``onnx_bytes`` in ``workdir`` and run it on ``feeds``, with this
    interpreter (the one the recorded command names)."""
    python = sys.executable
    workdir.mkdir(parents=True, exist_ok=True)
    script = render_script(spec)
    build_args = spec.build_args()
    keep = {
        SCRIPT_NAME: script.encode(),
        COMMAND_NAME: command_text(python, build_args).encode(),
        ONNX_NAME: onnx_bytes,
    }
    if calibration_npz is not None:
        keep[CALIBRATION_NAME] = calibration_npz
    for name, data in keep.items():
        (workdir / name).write_bytes(data)
    np.savez(workdir / _PARITY_IN, allow_pickle=False, **feeds)

    log: list[str] = []
    build = _run([python, SCRIPT_NAME, *build_args], workdir, timeout_s, log, "build")
    try:
        result = json.loads((workdir / RESULT_NAME).read_text())
        plan = (workdir / spec.plan).read_bytes()
    except (OSError, ValueError) as exc:
        raise _failure(
            workdir, log, f"the engine build left no readable plan or {RESULT_NAME}: {exc}"
        ) from exc
    built_cc = str(result.get("device", {}).get("compute_capability"))
    if built_cc != expected_cc:
        raise _failure(
            workdir,
            log,
            f"the engine was built on a GPU of compute capability {built_cc}, but nvidia-smi named "
            f"{expected_cc} for device 0",
            hint="set CUDA_VISIBLE_DEVICES to the one GPU to build for (and CUDA_DEVICE_ORDER=PCI_BUS_ID)",
        )
    infer_args = ["infer", "--plan", spec.plan, "--inputs", _PARITY_IN, "--outputs", _PARITY_OUT]
    _run([python, SCRIPT_NAME, *infer_args], workdir, timeout_s, log, "run on the parity rows")
    try:
        with np.load(workdir / _PARITY_OUT) as data:
            outputs = {name: data[name] for name in data.files}
    except (OSError, ValueError) as exc:
        raise _failure(workdir, log, f"the engine run left no readable outputs: {exc}") from exc
    keep[LOG_NAME] = "".join(log).encode()
    return PlanBuild(plan=plan, result=result, outputs=outputs, files=keep, command=tuple(build.args))


def _run(
    command: Sequence[str], cwd: Path, timeout_s: float, log: list[str], what: str
) -> subprocess.CompletedProcess[str]:
    log.append(f"$ {shlex.join(command)}\n")
    try:
        done = subprocess.run(
            list(command),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        log.append(_text(exc.stdout) + _text(exc.stderr))
        raise _failure(cwd, log, f"the TensorRT {what} did not finish within {timeout_s:.0f}s") from exc
    except OSError as exc:
        raise _failure(cwd, log, f"cannot start {command[0]}: {exc}") from exc
    log.append(done.stdout + done.stderr + f"[exit {done.returncode}]\n")
    if done.returncode == _EXIT_MISSING:
        raise GpuUnavailableError(
            f"the TensorRT {what} found no usable TensorRT or GPU: {_last_error(done.stderr)}",
            hint="pip install '.[gpu]' on a machine whose NVIDIA driver nvidia-smi can reach",
        )
    if done.returncode != 0:
        raise _failure(
            cwd, log, f"the TensorRT {what} failed (exit {done.returncode}): {_last_error(done.stderr)}"
        )
    return done


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _last_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors[-1].removeprefix("error:").strip() if errors else (lines[-1] if lines else "no output"))[
        :500
    ]


def _failure(workdir: Path, log: list[str], message: str, hint: str | None = None) -> ConversionError:
    """A ConversionError carrying the log's last lines, with the work folder kept for a rerun."""
    kept = Path(tempfile.mkdtemp(prefix="builder-trt-failed-"))
    for name in (SCRIPT_NAME, COMMAND_NAME, ONNX_NAME, CALIBRATION_NAME, _PARITY_IN):
        if (workdir / name).is_file():
            shutil.copy2(workdir / name, kept / name)
    (kept / LOG_NAME).write_text("".join(log))
    tail = [line for line in "".join(log).splitlines() if line.strip()][-_TAIL_LINES:]
    detail = "\n".join(f"  | {line}" for line in tail)
    return ConversionError(
        f"{message}\n{detail}" if detail else message,
        hint=hint
        or f"the script, its inputs and the full log are in {kept}; rerun with the command in "
        f"{kept / COMMAND_NAME} (cd there first), or export with --format onnx",
    )
