"""What ``--format tensorrt`` was asked: precision, batch profile, workspace, caches, tolerances.

Parity tolerances follow the precision (``|trt - ort| <= atol + rtol * |ort|``, ONNX Runtime on
CPU as the reference, on the same rows):

| precision | atol = rtol | why |
|---|---|---|
| fp32 | 1e-4 | true FP32 (TF32 off); only kernel choice and summation order differ |
| tf32 | 1e-3 | TF32 matmuls and convolutions keep a 10-bit mantissa (~5e-4 per product) |
| fp16 | 1e-2 | FP16 keeps ~3 decimal digits; errors add up over layers |
| int8 | 1e-1 | 8-bit activations and weights, calibrated ranges; a coarse check only |

Integer outputs (class labels) must be equal at every precision: a flipped label is a real
difference, and the answer is a wider precision (``--plan-precision tf32``), not a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.errors import UsageError

PRECISIONS = ("fp32", "tf32", "fp16", "int8")
TOLERANCES: dict[str, float] = {"fp32": 1e-4, "tf32": 1e-3, "fp16": 1e-2, "int8": 1e-1}
CALIBRATION_SUFFIXES = (".npy", ".npz")
# The TensorRT of Triton 24.10 (the release this project targets): a plan loads only on the
# TensorRT version that built it, so a build with another one is flagged in its step line.
TRITON_TENSORRT = "10.5"
# Generous: a large engine with many tactics takes minutes, and a hung build must still end.
BUILD_TIMEOUT_S = 1800.0
_CALIBRATION_HINT = "save representative rows with numpy.save (one input) or numpy.savez(input_name=rows)"


@dataclass(frozen=True)
class PlanOptions:
    """How the TensorRT plan is built; every field is a ``builder export`` flag."""

    precision: str = "fp16"
    opt_batch_size: int | None = None  # None: the largest preferred batch size, else max // 2
    workspace_mb: int = 1024
    timing_cache: Path | None = None  # None: ~/.cache/triton-stack/tensorrt/timing-smXY.cache
    int8_calibration: Path | None = None  # .npy (one input) or .npz keyed by input name
    atol: float | None = None  # None: TOLERANCES[precision]
    rtol: float | None = None
    build_timeout_s: float = BUILD_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(
                f"--plan-precision {self.precision!r}: use one of {', '.join(PRECISIONS)}",
                hint="fp16 is the usual choice; --trt-precision (FP16|FP32) is the ONNX Runtime route's flag",
            )
        if self.workspace_mb < 1:
            raise UsageError("--workspace-mb must be >= 1", hint="the default, 1024, suits small models")
        if self.opt_batch_size is not None and self.opt_batch_size < 1:
            raise UsageError("--opt-batch-size must be >= 1", hint="leave it out for max_batch_size // 2")
        if self.int8_calibration is not None and self.precision != "int8":
            raise UsageError(
                "--int8-calibration is only used with --plan-precision int8",
                hint="add --plan-precision int8, or drop --int8-calibration",
            )
        if (self.atol is not None and self.atol < 0) or (self.rtol is not None and self.rtol < 0):
            raise UsageError(
                "--plan-atol and --plan-rtol must be >= 0",
                hint="leave them out for the precision's tolerance",
            )
        if self.build_timeout_s <= 0:
            raise UsageError("the build timeout must be positive")

    @property
    def tolerance(self) -> tuple[float, float]:
        """(atol, rtol) of the plan's parity check: the flags if given, else the precision's."""
        default = TOLERANCES[self.precision]
        return (
            default if self.atol is None else self.atol,
            default if self.rtol is None else self.rtol,
        )

    def check_files(self) -> None:
        """Refuse a calibration file that cannot be one, before anything is downloaded."""
        path = self.int8_calibration
        if path is None:
            return
        if path.suffix not in CALIBRATION_SUFFIXES:
            raise UsageError(
                f"--int8-calibration {path}: expected a .npy (one input) or an .npz (arrays by input name)",
                hint=_CALIBRATION_HINT,
            )
        if not path.is_file():
            raise UsageError(f"--int8-calibration {path}: no such file", hint=_CALIBRATION_HINT)
