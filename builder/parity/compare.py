"""Numerical parity: the ONNX model in onnxruntime against the original through its flavor.

Float outputs pass when ``|onnx - native| <= atol + rtol * |native|`` element-wise (numpy's
``allclose`` rule); integer and string outputs (class labels) must be equal. The defaults, atol 1e-5 and
rtol 1e-5, are Model Navigator's: tight enough to catch a wrong conversion, loose enough for
float32 tree thresholds and reordered float sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from builder.errors import ParityError

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-5


@dataclass(frozen=True)
class OutputParity:
    name: str
    max_abs_err: float
    max_rel_err: float
    mismatches: int  # elements outside tolerance (or unequal, for integers)
    elements: int

    def to_dict(self) -> dict[str, object]:
        return {
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "mismatches": self.mismatches,
            "elements": self.elements,
        }


@dataclass(frozen=True)
class ParityReport:
    rows: int
    source: str  # "input_example" or "generated"
    atol: float
    rtol: float
    outputs: tuple[OutputParity, ...]

    @property
    def passed(self) -> bool:
        return all(o.mismatches == 0 for o in self.outputs)

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "rows": self.rows,
            "source": self.source,
            "atol": self.atol,
            "rtol": self.rtol,
            "outputs": {o.name: o.to_dict() for o in self.outputs},
        }


class GraphSession:
    """The one onnxruntime session of an export's final graph. Parity, the drift reference (in
    batches) and the TensorRT step all run it: a session costs a serialization and a graph
    optimization, too much to pay per caller or per batch. Made on first use, so that a graph
    onnxruntime refuses is refused by the step that runs it (parity), with that step's message."""

    def __init__(self, graph: onnx.ModelProto) -> None:
        self._graph = graph
        self._session: Any = None

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.log_severity_level = 3  # the shape-inference warnings are noise to a user here
            self._session = ort.InferenceSession(
                self._graph.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        names = [o.name for o in self._session.get_outputs()]
        return dict(zip(names, self._session.run(names, feeds), strict=True))


def compare(
    converted: dict[str, np.ndarray],
    native: dict[str, np.ndarray],
    *,
    rows: int,
    source: str,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> ParityReport:
    """Compare outputs present in both; a native output the ONNX model lacks is a failure."""
    results = []
    for name, expected in native.items():
        if name not in converted:
            raise ParityError(f"the ONNX model has no output {name!r} (it has {sorted(converted)})")
        got = converted[name]
        if got.shape != expected.shape:
            raise ParityError(
                f"output {name!r}: ONNX shape {got.shape} differs from the original's {expected.shape}"
            )
        results.append(_compare_one(name, got, expected, atol, rtol))
    return ParityReport(rows=rows, source=source, atol=atol, rtol=rtol, outputs=tuple(results))


def _compare_one(name: str, got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> OutputParity:
    if expected.dtype.kind in "OUS" or got.dtype.kind in "OUS":  # string class labels: equal or not
        unequal = got.astype(str) != expected.astype(str)
        bad = int(np.count_nonzero(unequal))
        return OutputParity(name, float(bad > 0), float(bad > 0), bad, int(expected.size))
    if expected.dtype.kind in "iub" and got.dtype.kind in "iub":
        diff = np.abs(got.astype(np.int64) - expected.astype(np.int64)).astype(np.float64)
        bad = int(np.count_nonzero(diff))
        rel = diff / np.maximum(np.abs(expected.astype(np.float64)), 1.0)
    else:
        g, e = got.astype(np.float64), expected.astype(np.float64)
        diff = np.abs(g - e)
        bad = int(np.count_nonzero(~(diff <= atol + rtol * np.abs(e))))
        rel = diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny)
    return OutputParity(
        name=name,
        max_abs_err=float(diff.max(initial=0.0)),
        max_rel_err=float(rel.max(initial=0.0)),
        mismatches=bad,
        elements=int(expected.size),
    )


# A miss is "a different model", not a tolerance question, when a float output's worst element
# is off by more than GROSS_FACTOR times both tolerances (the defaults at least, so that --atol 0
# does not turn float32 rounding into a "different model"): max abs err > 100·max(atol, 1e-5)
# and max rel err > 100·max(rtol, 1e-5), or when class labels differ on more than GROSS_SHARE of
# the rows. Float32 rounding and reordered sums stay orders of magnitude below that.
GROSS_FACTOR = 100.0
GROSS_SHARE = 0.10


def gross_miss(output: OutputParity, atol: float, rtol: float, *, exact: bool = False) -> bool:
    """Whether ``output`` misses by a margin no tolerance explains (the rule above); ``exact``
    outputs (class labels, compared for equality) are judged by their share of unequal rows."""
    if output.mismatches == 0:
        return False
    if exact:
        return output.mismatches > GROSS_SHARE * max(output.elements, 1)
    return output.max_abs_err > GROSS_FACTOR * max(atol, DEFAULT_ATOL) and (
        output.max_rel_err > GROSS_FACTOR * max(rtol, DEFAULT_RTOL)
    )


def require_pass(report: ParityReport, model_ref: str) -> None:
    """Raise ParityError with the figures a user needs to judge the miss. A miss by a wide
    margin (``gross_miss``) says the graph computes a different model, and does not suggest
    loosening the tolerance; labels compare exactly, so a near miss of labels alone does not
    either."""
    if report.passed:
        return
    from builder.kinds import LABEL

    worst = [o for o in report.outputs if o.mismatches]
    detail = "; ".join(
        f"{o.name}: {o.mismatches}/{o.elements} outside tolerance, max abs err {o.max_abs_err:.3g}, "
        f"max rel err {o.max_rel_err:.3g}"
        for o in worst
    )
    tolerance = f"atol={report.atol:g}, rtol={report.rtol:g}"
    if any(gross_miss(o, report.atol, report.rtol, exact=o.name == LABEL) for o in worst):
        raise ParityError(
            f"{model_ref}: the converted graph computes a different model than the native one "
            f"({tolerance}): {detail}",
            hint="no tolerance explains a miss this wide: log the model in a form the converter "
            "reproduces (docs/support-matrix.md lists what exports), or convert it to ONNX yourself "
            "and log it with mlflow.onnx.log_model; nothing was written",
        )
    if all(o.name == LABEL for o in worst):
        raise ParityError(
            f"{model_ref}: ONNX output differs from the original ({tolerance}): {detail}",
            hint="labels must be equal (--atol/--rtol do not apply to them); a few differing "
            "labels are usually ties between class probabilities; nothing was written",
        )
    raise ParityError(
        f"{model_ref}: ONNX output differs from the original ({tolerance}): {detail}",
        hint="loosen with --atol/--rtol if the difference is acceptable; nothing was written",
    )
