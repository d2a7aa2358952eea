"""The rows an INT8 plan is calibrated on: a given file, else the model's input example.

INT8 maps each activation onto 256 levels over a range TensorRT measures on real rows; rows
generated from the signature (random normals) would measure the wrong ranges, so they are never
used, and an INT8 build with neither a file nor an input example is refused.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builder.errors import UsageError
from builder.tensors import TensorSpec

_HINT = "one array per input name (numpy.savez(input=rows)), rows first, each row shaped like the input's"


@dataclass(frozen=True)
class CalibrationSet:
    arrays: dict[str, np.ndarray]
    source: str  # "input_example" or the file's path

    @property
    def rows(self) -> int:
        return len(next(iter(self.arrays.values())))

    def to_npz(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, allow_pickle=False, **self.arrays)
        return buf.getvalue()

    def sha256(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.arrays):
            h.update(name.encode() + b"\0" + np.ascontiguousarray(self.arrays[name]).tobytes())
        return h.hexdigest()

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "rows": self.rows, "sha256": self.sha256()}


def calibration_set(
    inputs: Sequence[TensorSpec],
    file: Path | None,
    example: dict[str, np.ndarray] | None,
) -> CalibrationSet:
    """The calibration rows, cast to the inputs' dtypes; UsageError when there are none."""
    if file is not None:
        arrays, source = _load(file, inputs), str(file)
    elif example:
        arrays, source = dict(example), "input_example"
    else:
        raise UsageError(
            "--plan-precision int8 needs rows to calibrate on, and this model has no input example",
            hint="pass --int8-calibration FILE (.npy for a one-input model, .npz keyed by input name) "
            "with a few hundred representative rows, or use --plan-precision fp16",
        )
    checked: dict[str, np.ndarray] = {}
    for tensor in inputs:
        if tensor.name not in arrays:
            raise UsageError(f"calibration set ({source}) has no array for input {tensor.name!r}", hint=_HINT)
        array = np.asarray(arrays[tensor.name])
        if array.ndim != len(tensor.shape) or any(
            d >= 0 and d != a for d, a in zip(tensor.shape[1:], array.shape[1:], strict=False)
        ):
            raise UsageError(
                f"calibration rows for {tensor.name!r} have shape {list(array.shape)}, "
                f"the input takes {list(tensor.shape)}",
                hint=_HINT,
            )
        if len(array) == 0:
            raise UsageError(f"calibration set ({source}) holds no rows for {tensor.name!r}", hint=_HINT)
        checked[tensor.name] = np.ascontiguousarray(array, dtype=tensor.dtype)
    if len({len(a) for a in checked.values()}) > 1:
        raise UsageError(f"calibration set ({source}): inputs have different numbers of rows", hint=_HINT)
    return CalibrationSet(checked, source)


def _load(path: Path, inputs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    try:
        if path.suffix == ".npy":
            if len(inputs) != 1:
                raise UsageError(
                    f"--int8-calibration {path}: a .npy holds one array, the model takes "
                    f"{len(inputs)} inputs",
                    hint="pass an .npz with one array per input name",
                )
            return {inputs[0].name: np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as exc:
        raise UsageError(f"--int8-calibration {path} cannot be read: {exc}", hint=_HINT) from exc
