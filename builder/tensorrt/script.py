"""The reproduce script: ``engine_script.py`` with one export's settings as its defaults.

Rendering is pure (settings in, text out), so tests can compile the text and run its argument
parsing without TensorRT. The script's body is a real module of this package, linted and
type-checked with the rest; only its ``DEFAULTS`` line is replaced.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.tensorrt import engine_script
from builder.tensorrt.profiles import InputShapes

SCRIPT_NAME = "build_engine.py"
COMMAND_NAME = "build_command.txt"
ONNX_NAME = "model.onnx"
CALIBRATION_NAME = "calibration.npz"
RESULT_NAME = "build.json"
_DEFAULTS_LINE = "DEFAULTS: dict[str, Any] = {}\n"


@dataclass(frozen=True)
class ScriptSpec:
    """One export's build settings: what the script does when run with no flags."""

    model: str  # the registry model it came from, for the header
    plan: str  # file name of the engine, e.g. model.sm90.plan
    precision: str
    shapes: tuple[InputShapes, ...]
    workspace_mb: int
    timing_cache: Path | None
    calibration: bool  # a calibration.npz lies beside the script

    def defaults(self) -> dict[str, Any]:
        return {
            "onnx": ONNX_NAME,
            "plan": self.plan,
            "precision": self.precision,
            "min_shapes": engine_script.format_shapes({s.name: s.min for s in self.shapes}),
            "opt_shapes": engine_script.format_shapes({s.name: s.opt for s in self.shapes}),
            "max_shapes": engine_script.format_shapes({s.name: s.max for s in self.shapes}),
            "workspace_mb": self.workspace_mb,
            "timing_cache": str(self.timing_cache) if self.timing_cache else "",
            "calibration": CALIBRATION_NAME if self.calibration else "",
            "result": RESULT_NAME,
        }

    def build_args(self) -> list[str]:
        """The build's flags, every setting spelled out (the defaults say the same)."""
        d = self.defaults()
        args = ["build", "--onnx", d["onnx"], "--plan", d["plan"], "--precision", d["precision"]]
        for edge in ("min", "opt", "max"):
            if d[f"{edge}_shapes"]:
                args += [f"--{edge}-shapes", d[f"{edge}_shapes"]]
        args += ["--workspace-mb", str(d["workspace_mb"]), "--timing-cache", d["timing_cache"]]
        if d["calibration"]:
            args += ["--calibration", d["calibration"]]
        return [*args, "--result", d["result"]]


def script_source() -> str:
    """The script's body, as this package ships it."""
    return Path(engine_script.__file__).read_text()


def render_script(spec: ScriptSpec) -> str:
    """The standalone build script of one export."""
    source = script_source()
    if source.count(_DEFAULTS_LINE) != 1:
        raise RuntimeError("engine_script.py has lost its DEFAULTS line")  # a packaging bug, not a user error
    # repr() of str and int values is a Python literal; one setting a line reads well in a diff.
    literal = "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in spec.defaults().items()) + "}"
    header = f"# Written by `builder export` for {spec.model}: rebuilds {spec.plan}.\n"
    return header + source.replace(_DEFAULTS_LINE, f"DEFAULTS: dict[str, Any] = {literal}\n", 1)


def command_text(python: str, args: Sequence[str]) -> str:
    """build_command.txt: the exact command, to run in the folder that holds the script."""
    return (
        f"# Rebuild the plan: run this in the folder that holds {SCRIPT_NAME} and {ONNX_NAME}.\n"
        f"{shlex.join([python, SCRIPT_NAME, *args])}\n"
    )
