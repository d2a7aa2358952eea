"""What a prediction is, by model kind, read from Triton's outputs through the recorded roles.

- binary: ``score`` (the probability of ``classes[1]``), ``label`` (a class value: with
  ``serving.decision_threshold``, ``classes[1]`` if score >= threshold else ``classes[0]``;
  without, the model's own label), ``probabilities``;
- multiclass: ``label`` and ``probabilities`` per class; the response carries ``classes`` once;
- binary or multiclass without probabilities: ``label`` (the model's) and ``scores``, its
  decision-function values (not probabilities, so no ``score`` and no threshold);
- regression: ``value``, a number, or a list of ``serving.targets`` numbers when there are more;
- outlier: ``outlier``, ``label`` (-1 outlier, 1 inlier) and ``score`` (decision function,
  lower is more anomalous); without a label output, outlier = score < ``outlier_below``;
- cluster: ``label`` (the cluster id, an int) and ``distances`` (to each cluster centre, a list
  of ``serving.clusters`` numbers; absent when the model has no distances output);
- other: ``outputs``, every output of the model passed through by name.

An answer that does not fit the contract (a value with more columns than targets, no score, a
label outside -1/1, a cluster id outside ``0..clusters-1``) is an OutputMismatch naming the
output, never a silently wrong answer.

Labels are class values and keep their type (an int stays an int, a string a string). Models
exported before ``serving.kind`` are read as the gateway always read them: ``score`` (else the
last probability column), ``label`` (else score >= 0.5) and ``probabilities``, found by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.catalog import ClassLabel, Kind, ModelSpec
from gateway.errors import OutputMismatch


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason code: a column, the value the model saw (None: missing, the model got its
    stand-in), and its signed SHAP contribution to the raw score (gateway/explain.py)."""

    column: str
    value: bool | int | float | str | None
    contribution: float


@dataclass(frozen=True, slots=True)
class Explanation:
    """A prediction's top reasons, largest |contribution| first, for the output ``explains``
    (a class label, or ``"prediction"``) in ``units``. ``base_value`` plus every column's
    contribution (``columns`` of them; ``reasons`` may hold fewer) is ``raw_score``."""

    explains: ClassLabel
    units: str
    base_value: float
    raw_score: float
    columns: int
    reasons: tuple[Reason, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "explains": self.explains,
            "units": self.units,
            "base_value": self.base_value,
            "raw_score": self.raw_score,
            "reasons": [
                {"column": r.column, "value": r.value, "contribution": r.contribution} for r in self.reasons
            ],
        }


@dataclass(frozen=True)
class Prediction:
    defaults_used: bool  # some online value was missing and stood in for (see gateway/assemble.py)
    score: float | None = None
    label: ClassLabel | None = None
    probabilities: tuple[float, ...] = ()
    value: float | None = None
    outputs: Mapping[str, np.ndarray] = field(default_factory=dict)  # kind "other": this row's
    # classifiers without probabilities: the decision function's values (None: the model has
    # probabilities, and the answer keeps the shape it always had)
    scores: tuple[float, ...] | None = None
    values: tuple[float, ...] | None = None  # regression with serving.targets > 1
    outlier: bool | None = None  # kind outlier
    distances: tuple[float, ...] | None = None  # kind cluster: to each cluster centre
    explanation: Explanation | None = None  # reason codes, when the request asked (``explain``)


@dataclass(frozen=True)
class PredictResult:
    model: str
    version: str
    kind: Kind
    classes: tuple[ClassLabel, ...] | None
    predictions: list[Prediction]
    feature_age_s: float
    id: str = ""  # the request's id; prediction ``i``'s is ``{id}-{i}`` (feedback names it)

    def prediction_ids(self) -> list[str]:
        return [f"{self.id}-{i}" for i in range(len(self.predictions))] if self.id else []

    def to_dict(self) -> dict[str, Any]:
        """The JSON body; a binary prediction keeps the shape it always had, plus its ``id``."""
        body: dict[str, Any] = {"model": self.model, "version": self.version, "kind": self.kind}
        if self.id:
            body["id"] = self.id
        if self.classes is not None:
            body["classes"] = list(self.classes)
        rows = [_as_dict(self.kind, p) for p in self.predictions]
        for row, prediction_id in zip(rows, self.prediction_ids(), strict=False):
            row["id"] = prediction_id
        for row, p in zip(rows, self.predictions, strict=True):
            if p.explanation is not None:
                row["explanation"] = p.explanation.to_dict()
        body["predictions"] = rows
        body["feature_age_seconds"] = self.feature_age_s
        return body


def _as_dict(kind: Kind, p: Prediction) -> dict[str, Any]:
    if kind in ("binary", "multiclass") and p.scores is not None:
        return {"label": p.label, "scores": list(p.scores), "defaults_used": p.defaults_used}
    if kind == "binary":
        return {
            "score": p.score,
            "label": p.label,
            "probabilities": list(p.probabilities),
            "defaults_used": p.defaults_used,
        }
    if kind == "multiclass":
        return {"label": p.label, "probabilities": list(p.probabilities), "defaults_used": p.defaults_used}
    if kind == "regression":
        value = list(p.values) if p.values is not None else p.value
        return {"value": value, "defaults_used": p.defaults_used}
    if kind == "outlier":
        return {"outlier": p.outlier, "label": p.label, "score": p.score, "defaults_used": p.defaults_used}
    if kind == "cluster":
        if p.distances is None:
            return {"label": p.label, "defaults_used": p.defaults_used}
        return {"label": p.label, "distances": list(p.distances), "defaults_used": p.defaults_used}
    return {"outputs": {k: v.tolist() for k, v in p.outputs.items()}, "defaults_used": p.defaults_used}


def _text(array: np.ndarray) -> np.ndarray:
    """A BYTES output (object array of bytes) as strings; other arrays unchanged."""
    if array.dtype != object:
        return array
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(array)


def _output(out: Mapping[str, np.ndarray], name: str, n: int) -> np.ndarray:
    array = out.get(name)
    if array is None or len(array) != n:
        raise OutputMismatch(f"the model's output {name!r} is missing or has not one row per input row")
    return array


def _columns(out: Mapping[str, np.ndarray], name: str, n: int, want: int, what: str) -> np.ndarray:
    """Output ``name`` as ``[n, want]`` float64; any other width is the contract broken."""
    array = _output(out, name, n).reshape(n, -1)
    if array.shape[1] != want:
        raise OutputMismatch(
            f"the model's {what} output {name!r} has {array.shape[1]} column(s); {want} expected"
        )
    return array.astype(np.float64)


def _class_values(classes: tuple[ClassLabel, ...] | None, labels: np.ndarray) -> list[ClassLabel]:
    """The model's label output as class values (the class's own type, where one matches)."""
    known = {c: c for c in classes or ()}
    values: list[ClassLabel] = []
    for raw in _text(labels.reshape(len(labels), -1)[:, 0]):
        value: ClassLabel = raw.item() if isinstance(raw, np.generic) else raw
        values.append(known.get(value, value))
    return values


def predictions(spec: ModelSpec, out: Mapping[str, np.ndarray], defaults: list[bool]) -> list[Prediction]:
    """One Prediction per row of ``out`` (Triton's outputs by name), per the model's kind."""
    n = len(defaults)
    if spec.legacy:
        return _legacy(out, defaults)
    if spec.kind == "regression":
        assert spec.roles.value is not None  # the catalog requires it
        what = f"value (serving.targets {spec.targets})"
        values = _columns(out, spec.roles.value, n, spec.targets, what)
        if spec.targets == 1:
            return [Prediction(defaults[i], value=float(values[i, 0])) for i in range(n)]
        return [Prediction(defaults[i], values=tuple(map(float, values[i]))) for i in range(n)]
    if spec.kind == "outlier":
        return _outliers(spec, out, defaults)
    if spec.kind == "cluster":
        return _clusters(spec, out, defaults)
    if spec.kind == "other":
        arrays = {name: _text(_output(out, name, n)) for name in spec.outputs}
        return [Prediction(defaults[i], outputs={k: v[i] for k, v in arrays.items()}) for i in range(n)]
    assert spec.classes is not None  # the catalog requires them
    classes = spec.classes
    if spec.roles.probabilities is None:
        return _decisions(spec, classes, out, defaults)
    probs = _output(out, spec.roles.probabilities, n).astype(np.float64)
    if probs.ndim != 2 or probs.shape[1] != len(classes):
        raise OutputMismatch(
            f"the model's probabilities have shape {list(probs.shape)}; serving.classes has {len(classes)}"
        )
    rows = probs.tolist()  # Python floats, once: a float() per value per row cost more (make bench)
    if spec.kind == "binary" and spec.decision_threshold is not None:
        labels = [classes[1] if r[1] >= spec.decision_threshold else classes[0] for r in rows]
    elif spec.roles.label is not None:
        labels = _class_values(classes, _output(out, spec.roles.label, n))
    else:  # no label output: the most probable class
        labels = [classes[j] for j in probs.argmax(axis=1)]
    binary = spec.kind == "binary"
    return [
        Prediction(defaults[i], score=r[1] if binary else None, label=labels[i], probabilities=tuple(r))
        for i, r in enumerate(rows)
    ]


def _decisions(
    spec: ModelSpec, classes: tuple[ClassLabel, ...], out: Mapping[str, np.ndarray], defaults: list[bool]
) -> list[Prediction]:
    """A classifier without probabilities: its own label, and its decision-function scores
    ([N, C], or [N, 1] for a binary model's one signed distance)."""
    n = len(defaults)
    assert spec.roles.label is not None  # the catalog requires a label without probabilities
    labels = _class_values(classes, _output(out, spec.roles.label, n))
    scores: np.ndarray = np.empty((n, 0))
    if spec.roles.scores is not None:
        scores = _output(out, spec.roles.scores, n).reshape(n, -1).astype(np.float64)
        widths = (1, 2) if spec.kind == "binary" else (len(classes),)
        if scores.shape[1] not in widths:
            raise OutputMismatch(
                f"the model's scores output {spec.roles.scores!r} has {scores.shape[1]} column(s); a "
                f"{spec.kind} model over {len(classes)} classes has {' or '.join(map(str, widths))}"
            )
    return [Prediction(defaults[i], label=labels[i], scores=tuple(map(float, scores[i]))) for i in range(n)]


def _outliers(spec: ModelSpec, out: Mapping[str, np.ndarray], defaults: list[bool]) -> list[Prediction]:
    n = len(defaults)
    assert spec.roles.score is not None and spec.outlier_score is not None  # the catalog requires them
    scores = _columns(out, spec.roles.score, n, 1, "score")[:, 0]
    if spec.roles.label is not None:
        raw = _output(out, spec.roles.label, n).reshape(n, -1)
        if raw.shape[1] != 1 or raw.dtype == object or not np.isin(raw, (-1, 1)).all():
            raise OutputMismatch(
                f"the model's label output {spec.roles.label!r} is not one column of -1 (outlier) "
                "or 1 (inlier)"
            )
        labels = raw[:, 0].astype(np.int64)
    else:  # the label an outlier detector's predict() gives: -1 below the threshold
        labels = np.where(scores < spec.outlier_score.outlier_below, -1, 1)
    return [
        Prediction(defaults[i], score=float(scores[i]), label=int(labels[i]), outlier=bool(labels[i] == -1))
        for i in range(n)
    ]


def _clusters(spec: ModelSpec, out: Mapping[str, np.ndarray], defaults: list[bool]) -> list[Prediction]:
    """A clusterer: its cluster id per row (an int, within ``0..clusters-1`` when the contract
    says how many) and, when it has them, its distances to the cluster centres."""
    n = len(defaults)
    assert spec.roles.label is not None  # the catalog requires it
    raw = _output(out, spec.roles.label, n).reshape(n, -1)
    known = spec.clusters
    if (
        raw.shape[1] != 1
        or raw.dtype.kind not in "iu"
        or (known is not None and n and not ((raw >= 0) & (raw < known)).all())
    ):
        within = f" within 0..{known - 1}" if known is not None else ""
        raise OutputMismatch(
            f"the model's label output {spec.roles.label!r} is not one column of integer cluster ids{within}"
        )
    labels = raw[:, 0].tolist()  # Python ints
    if spec.roles.distances is None:
        return [Prediction(defaults[i], label=labels[i]) for i in range(n)]
    width = known if known is not None else _output(out, spec.roles.distances, n).reshape(n, -1).shape[1]
    what = f"distances (serving.clusters {known})"
    distances = _columns(out, spec.roles.distances, n, width, what).tolist()
    return [Prediction(defaults[i], label=labels[i], distances=tuple(distances[i])) for i in range(n)]


def _legacy(out: Mapping[str, np.ndarray], defaults: list[bool]) -> list[Prediction]:
    probs = out.get("probabilities")
    if "score" in out:
        scores = out["score"][:, 0]
    elif probs is not None:
        scores = probs[:, -1]
    else:
        raise OutputMismatch("the model returned neither score nor probabilities")
    labels = out["label"][:, 0] if "label" in out else (scores >= 0.5).astype(np.int64)
    return [
        Prediction(
            defaults[i],
            score=float(scores[i]),
            label=int(labels[i]),
            probabilities=tuple(float(p) for p in probs[i]) if probs is not None else (),
        )
        for i in range(len(scores))
    ]
