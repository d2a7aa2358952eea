"""Reason codes: a prediction's top-k columns by their exact SHAP contribution (docs/explain.md).

``builder export --explain`` writes ``NAME_explain`` beside the model, named in its serving
contract (``serving.explainer``): the same inputs, and per row the SHAP value of each original
column (``contributions``, rows x columns x outputs) and the base value (rows x outputs), in the
model's raw units (log-odds for a boosted binary classifier). A request asks with ``"explain":
k``; the core (gateway/core.py) then sends the explainer the very inputs it sends the model, in
a call concurrent with the model's, and this module reads the answer: for each row, the output
it explains (a binary classifier's positive class, a multi-class model's predicted class, a
regressor's prediction), the k columns with the largest |contribution|, each with the value the
model saw, plus the base value and the raw score (base value + every column's contribution).

Requests without ``explain`` never reach this module beyond ``explain_count``'s ``None`` check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

from gateway.catalog import ClassLabel, Explainer, ModelSpec
from gateway.errors import InvalidInput, NoExplainer, OutputMismatch
from gateway.responses import Explanation, Prediction, Reason
from gateway.values import Scalar

FIELD: Final = "explain"
# The most reason codes one prediction may ask for: far above any tabular model's columns (k at
# or above the model's column count returns them all), low enough that a typo (1e9) is refused.
MAX_EXPLAIN: Final = 1000
_EXPORT_FLAG: Final = "builder export --explain"


def explain_count(spec: ModelSpec, raw: Scalar | None) -> int:
    """How many reason codes a request asks for: 0 when it asks none (``raw`` None), else a
    whole number in 1..MAX_EXPLAIN for a model with an explainer; anything else an
    InvalidInput naming the field ``explain``."""
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int):
        shown = repr(raw)[:40]
        raise InvalidInput(
            f"explain must be a whole number of reason codes, 1 to {MAX_EXPLAIN}; got {shown}", field=FIELD
        )
    if not 1 <= raw <= MAX_EXPLAIN:
        raise InvalidInput(
            f"explain must be 1 to {MAX_EXPLAIN} reason codes (more than the model's columns returns "
            f"them all); got {raw}",
            field=FIELD,
        )
    explainer_of(spec)
    return raw


def explainer_of(spec: ModelSpec) -> Explainer:
    """The model's explainer, or a NoExplainer naming the model and the export flag."""
    explainer = spec.explainer
    if explainer is None:
        raise NoExplainer(
            f"model {spec.name!r} has no explainer, so it serves no reason codes: export it with "
            f"`{_EXPORT_FLAG}` (it writes {spec.name}_explain beside the model)",
            field=FIELD,
        )
    if len(explainer.outputs) > 1 and spec.kind != "multiclass":
        raise NoExplainer(
            f"model {spec.name!r} is a {spec.kind} model whose explainer explains "
            f"{len(explainer.outputs)} outputs; reason codes are served for one output per prediction",
            field=FIELD,
        )
    return explainer


def _output_index(spec: ModelSpec, explainer: Explainer, prediction: Prediction) -> tuple[int, ClassLabel]:
    """Which of the explainer's outputs a prediction's reasons come from: the predicted class of
    a multi-class model, else the one output (a binary model's positive class, a regressor's
    prediction)."""
    if spec.kind != "multiclass" or len(explainer.outputs) == 1:
        return 0, explainer.outputs[0]
    for i, output in enumerate(explainer.outputs):
        if output == prediction.label or str(output) == str(prediction.label):
            return i, output
    raise OutputMismatch(
        f"model {spec.name!r}: predicted class {prediction.label!r} is not one its explainer "
        f"{explainer.model!r} explains ({list(explainer.outputs)})"
    )


def _column(spec: ModelSpec, inputs: Mapping[str, np.ndarray], j: int) -> np.ndarray:
    """Model column ``j``'s values as sent (a matrix column, or its own ``[N, 1]`` input)."""
    if spec.layout == "matrix":
        return inputs[spec.input_name][:, j]
    return inputs[spec.columns[j].name].reshape(-1)


def _seen(value: object) -> bool | int | float | str | None:
    """A served value as the caller reads it: a float32 by its shortest text (``0.1``, not
    ``0.10000000149``), a missing one (NaN, ``""``: the stand-in the model got) as None."""
    if isinstance(value, np.floating):
        return None if np.isnan(value) else float(str(value))
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value or None
    return None


def explain(
    spec: ModelSpec,
    out: Mapping[str, np.ndarray],
    inputs: Mapping[str, np.ndarray],
    predictions: Sequence[Prediction],
    ks: Sequence[int],
) -> list[Prediction]:
    """``predictions`` with their explanations, from the explainer's answer ``out`` for the
    same ``inputs`` (row ``i`` of each is prediction ``i``); ``ks[i]`` reasons for row ``i``."""
    explainer = explainer_of(spec)
    n, width, outputs = len(predictions), len(spec.columns), len(explainer.outputs)
    phi = out.get(explainer.contributions)
    base = out.get(explainer.base_value)
    if phi is None or base is None or phi.shape != (n, width, outputs) or base.size != n * outputs:
        got = "missing" if phi is None or base is None else f"{list(phi.shape)} and {list(base.shape)}"
        raise OutputMismatch(
            f"model {spec.name!r}: its explainer {explainer.model!r} answered {got}; the contract "
            f"promises contributions [{n}, {width}, {outputs}] and base_value [{n}, {outputs}]"
        )
    phi = phi.astype(np.float64, copy=False)
    base = base.reshape(n, outputs).astype(np.float64, copy=False)
    explained = []
    for i, prediction in enumerate(predictions):
        o, explains = _output_index(spec, explainer, prediction)
        row = phi[i, :, o]
        top = np.argsort(-np.abs(row), kind="stable")[: ks[i]]
        reasons = tuple(
            Reason(spec.columns[j].name, _seen(_column(spec, inputs, j)[i]), float(row[j])) for j in top
        )
        explanation = Explanation(
            explains=explains,
            units=explainer.units,
            base_value=float(base[i, o]),
            raw_score=float(base[i, o] + row.sum()),
            columns=width,
            reasons=reasons,
        )
        explained.append(dataclasses.replace(prediction, explanation=explanation))
    return explained
