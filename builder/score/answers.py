"""The prediction columns, read from the graph's outputs by the serving contract's roles, with
the names and values the gateway answers (gateway/responses.py; the builder never imports the
gateway, so the reading is written once more here, and the skew check holds the two equal):

- binary: ``score`` (the probability of ``classes[1]``), ``label`` (``classes[1]`` when score >=
  ``serving.decision_threshold``, else ``classes[0]``; without a threshold the model's own),
  ``probabilities``;
- multiclass: ``label``, ``probabilities`` (one per class, in ``serving.classes`` order);
- a classifier without probabilities: ``label`` and ``scores`` (its decision function);
- regression: ``value`` (a double; a list of ``serving.targets`` doubles when there are more);
- outlier: ``outlier``, ``label`` (-1/1) and ``score``; cluster: ``label`` and ``distances``.

Labels keep their classes' type: a Spark long for integer classes, a string for text, a boolean
for booleans. A row that is not scorable has nulls in every prediction column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from serving_contract import ServingContract

FLOATS = pa.list_(pa.float64())


@dataclass(frozen=True)
class AnswerPlan:
    """What to read from the outputs, and the columns it makes (picklable, for the executors)."""

    kind: str
    classes: tuple | None
    label_type: str  # long | string | boolean | double
    probabilities: str | None  # output tensor names by role
    label: str | None
    scores: str | None
    value: str | None
    score: str | None
    distances: str | None
    threshold: float | None
    targets: int
    outlier_below: float | None

    def columns(self) -> list[tuple[str, pa.DataType, str]]:
        """(name, Arrow type, Spark DDL type) of each prediction column, in answer order."""
        label = {"long": pa.int64(), "string": pa.string(), "boolean": pa.bool_(), "double": pa.float64()}
        label_column = ("label", label[self.label_type], self.label_type)
        if self.kind in ("binary", "multiclass") and self.probabilities is None:
            return [label_column, ("scores", FLOATS, "array<double>")]
        if self.kind == "binary":
            return [
                ("score", pa.float64(), "double"),
                label_column,
                ("probabilities", FLOATS, "array<double>"),
            ]
        if self.kind == "multiclass":
            return [label_column, ("probabilities", FLOATS, "array<double>")]
        if self.kind == "regression":
            if self.targets > 1:
                return [("value", FLOATS, "array<double>")]
            return [("value", pa.float64(), "double")]
        if self.kind == "outlier":
            return [
                ("outlier", pa.bool_(), "boolean"),
                ("label", pa.int64(), "long"),
                ("score", pa.float64(), "double"),
            ]
        cluster = [("label", pa.int64(), "long")]
        return cluster + ([("distances", FLOATS, "array<double>")] if self.distances else [])

    def outputs(self) -> list[str]:
        """The graph outputs the answers read."""
        named = (self.probabilities, self.label, self.scores, self.value, self.score, self.distances)
        return [n for n in dict.fromkeys(named) if n]


def answer_plan(contract: ServingContract) -> AnswerPlan:
    roles = contract.roles
    classes = tuple(contract.classes) if contract.classes is not None else None
    return AnswerPlan(
        kind=str(contract.kind),
        classes=classes,
        label_type=_label_type(str(contract.kind), classes),
        probabilities=roles.probabilities,
        label=roles.label,
        scores=roles.scores,
        value=roles.value,
        score=roles.score,
        distances=roles.distances,
        threshold=contract.decision_threshold,
        targets=contract.targets or 1,
        outlier_below=contract.score.outlier_below if contract.score is not None else None,
    )


def _label_type(kind: str, classes: tuple | None) -> str:
    if kind in ("outlier", "cluster") or not classes:
        return "long"
    if all(isinstance(c, bool) for c in classes):
        return "boolean"
    if all(isinstance(c, int) and not isinstance(c, bool) for c in classes):
        return "long"
    if all(isinstance(c, int | float) and not isinstance(c, bool) for c in classes):
        return "double"
    return "string"


def _text(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


_NUMPY = {"long": np.int64, "double": np.float64, "boolean": np.bool_, "string": object}
_KINDS = {"long": "iu", "double": "iuf", "boolean": "biu"}  # raw dtypes that cast as they are


def _labels(plan: AnswerPlan, raw: np.ndarray) -> np.ndarray:
    """The model's label output as class values of the column's type (an array of it)."""
    values = np.asarray(raw).reshape(len(raw), -1)[:, 0]
    if values.dtype.kind in _KINDS.get(plan.label_type, ""):
        return values.astype(_NUMPY[plan.label_type])  # numbers already are the class values
    known = {c: c for c in plan.classes or ()}
    return np.array(
        [_cast_label(plan, known.get(v, v)) for v in map(_text, values.tolist())],
        dtype=_NUMPY[plan.label_type],
    )


def _classes(plan: AnswerPlan) -> np.ndarray:
    return np.array([_cast_label(plan, c) for c in plan.classes or ()], dtype=_NUMPY[plan.label_type])


def _matrix(outputs: Mapping[str, np.ndarray], name: str, n: int, width: int | None = None) -> np.ndarray:
    array = np.asarray(outputs[name]).reshape(n, -1).astype(np.float64)
    if width is not None and array.shape[1] != width:
        raise ValueError(f"the model's output {name!r} has {array.shape[1]} column(s); {width} expected")
    return array


def _lists(values: np.ndarray, present: np.ndarray) -> pa.Array:
    """A list<double> column: ``values`` ([scored rows, k]) spread over ``present`` (bool per
    row), null where a row was not scored."""
    n, k = len(present), values.shape[1] if values.ndim == 2 else 0
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(present.astype(np.int32) * k, out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(values.reshape(-1), type=pa.float64()), mask=pa.array(~present)
    )


def _spread(values: np.ndarray, present: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A scalar column: ``values`` (one per scored row) at the rows ``present``, else null."""
    values = np.asarray(values)
    if present.all():
        return pa.array(values, type=kind)
    full = (
        np.zeros(len(present), dtype=values.dtype)
        if values.dtype != object
        else np.full(len(present), "", object)
    )
    full[present] = values
    return pa.array(full, type=kind, mask=~present)


def answer_columns(
    plan: AnswerPlan, outputs: Mapping[str, np.ndarray], present: np.ndarray
) -> list[pa.Array]:
    """The prediction columns (``plan.columns()`` order) over every row of the batch; ``outputs``
    hold the graph's answers for the rows ``present`` marks, in order."""
    n = int(present.sum())
    kind = plan.kind
    if kind in ("binary", "multiclass") and plan.probabilities is None:
        assert plan.label is not None  # the contract's check: a label without probabilities
        labels = _labels(plan, outputs[plan.label]) if n else _classes(plan)[:0]
        scores = _matrix(outputs, plan.scores, n) if plan.scores and n else np.zeros((n, 0))
        return [_spread(labels, present, plan.columns()[0][1]), _lists(scores, present)]
    if kind in ("binary", "multiclass"):
        assert plan.classes is not None and plan.probabilities is not None
        probs = (
            _matrix(outputs, plan.probabilities, n, len(plan.classes))
            if n
            else np.zeros((0, len(plan.classes)))
        )
        if kind == "binary" and plan.threshold is not None:  # classes[1] at or above the threshold
            labels = _classes(plan)[(probs[:, 1] >= plan.threshold).astype(np.int64)]
        elif plan.label is not None and n:
            labels = _labels(plan, outputs[plan.label])
        else:  # no label output: the most probable class
            labels = _classes(plan)[probs.argmax(axis=1)]
        label_type = plan.columns()[1 if kind == "binary" else 0][1]
        columns = [_spread(labels, present, label_type), _lists(probs, present)]
        return [_spread(probs[:, 1], present, pa.float64()), *columns] if kind == "binary" else columns
    if kind == "regression":
        assert plan.value is not None
        values = _matrix(outputs, plan.value, n, plan.targets) if n else np.zeros((0, plan.targets))
        return [_lists(values, present) if plan.targets > 1 else _spread(values[:, 0], present, pa.float64())]
    if kind == "outlier":
        assert plan.score is not None and plan.outlier_below is not None
        scores = _matrix(outputs, plan.score, n, 1)[:, 0] if n else np.zeros(0)
        if plan.label is not None and n:
            marks = np.asarray(outputs[plan.label]).reshape(n, -1)[:, 0].astype(np.int64)
        else:
            marks = np.where(scores < plan.outlier_below, -1, 1)
        return [
            _spread(marks == -1, present, pa.bool_()),
            _spread(marks, present, pa.int64()),
            _spread(scores, present, pa.float64()),
        ]
    assert plan.label is not None
    ids = (
        np.asarray(outputs[plan.label]).reshape(n, -1)[:, 0].astype(np.int64) if n else np.zeros(0, np.int64)
    )
    columns = [_spread(ids, present, pa.int64())]
    if plan.distances:
        columns.append(_lists(_matrix(outputs, plan.distances, n) if n else np.zeros((0, 0)), present))
    return columns


def _cast_label(plan: AnswerPlan, value: object) -> object:
    return {"long": int, "string": str, "boolean": bool, "double": float}[plan.label_type](value)
