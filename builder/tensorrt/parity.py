"""Parity of a plan: the TensorRT engine's outputs against ONNX Runtime's, on the same rows.

The ONNX model has already matched the original model (``builder.parity``); this second check
bounds what the engine's precision and kernels add, with the precision's tolerance (see
``builder.tensorrt.options``). The comparison rule is the ONNX check's own (``compare``).
"""

from __future__ import annotations

import numpy as np

from builder.errors import ParityError
from builder.parity.compare import ParityReport, compare
from builder.tensorrt.options import PlanOptions


def plan_parity(
    engine: dict[str, np.ndarray],
    onnxruntime: dict[str, np.ndarray],
    *,
    rows: int,
    source: str,
    options: PlanOptions,
) -> ParityReport:
    """Compare every ONNX Runtime output with the engine's, at the precision's tolerance."""
    atol, rtol = options.tolerance
    try:
        return compare(engine, onnxruntime, rows=rows, source=source, atol=atol, rtol=rtol)
    except ParityError as exc:  # a missing or reshaped output: say it is the engine's
        raise ParityError(f"TensorRT engine: {exc.message}", hint="nothing was written") from exc


def require_plan_pass(report: ParityReport, model_ref: str, precision: str) -> None:
    """Raise ParityError with the figures, and the ways out, when the engine missed."""
    if report.passed:
        return
    detail = "; ".join(
        f"{o.name}: {o.mismatches}/{o.elements} outside tolerance, max abs err {o.max_abs_err:.3g}, "
        f"max rel err {o.max_rel_err:.3g}"
        for o in report.outputs
        if o.mismatches
    )
    wider = {"int8": "fp16", "fp16": "tf32", "tf32": "fp32"}.get(precision)
    raise ParityError(
        f"{model_ref}: TensorRT {precision} output differs from ONNX Runtime (atol={report.atol:g}, "
        f"rtol={report.rtol:g}): {detail}",
        hint=(f"build with --plan-precision {wider}, or " if wider else "")
        + "loosen with --plan-atol/--plan-rtol if the difference is acceptable; nothing was written",
    )
