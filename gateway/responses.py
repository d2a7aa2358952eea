"""What a prediction is, by model kind, read from Triton's outputs through the recorded roles.

- binary: ``score`` (the probability of ``classes[1]``), ``label`` (a class value: with
  ``serving.decision_threshold``, ``classes[1]`` if score >= threshold else ``classes[0]``;
  without, the model's own label), ``probabilities``;
- multiclass: ``label`` and ``probabilities`` per class; the response carries ``classes`` once;
- regression: ``value``;
- other: ``outputs``, every output of the model passed through by name.

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
from gateway.errors import GatewayError


@dataclass(frozen=True)
class Prediction:
    defaults_used: bool  # some online value was missing and stood in for (see gateway/assemble.py)
    score: float | None = None
    label: ClassLabel | None = None
    probabilities: tuple[float, ...] = ()
    value: float | None = None
    outputs: Mapping[str, np.ndarray] = field(default_factory=dict)  # kind "other": this row's


@dataclass(frozen=True)
class PredictResult:
    model: str
    version: str
    kind: Kind
    classes: tuple[ClassLabel, ...] | None
    predictions: list[Prediction]
    feature_age_s: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON body; a binary prediction keeps the shape it always had."""
        body: dict[str, Any] = {"model": self.model, "version": self.version, "kind": self.kind}
        if self.classes is not None:
            body["classes"] = list(self.classes)
        body["predictions"] = [_as_dict(self.kind, p) for p in self.predictions]
        body["feature_age_seconds"] = self.feature_age_s
        return body


def _as_dict(kind: Kind, p: Prediction) -> dict[str, Any]:
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
        return {"value": p.value, "defaults_used": p.defaults_used}
    return {"outputs": {k: v.tolist() for k, v in p.outputs.items()}, "defaults_used": p.defaults_used}


def _text(array: np.ndarray) -> np.ndarray:
    """A BYTES output (object array of bytes) as strings; other arrays unchanged."""
    if array.dtype != object:
        return array
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(array)


def _output(out: Mapping[str, np.ndarray], name: str, n: int) -> np.ndarray:
    array = out.get(name)
    if array is None or len(array) != n:
        raise GatewayError(f"the model's output {name!r} is missing or has not one row per input row")
    return array


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
        values = _output(out, spec.roles.value, n).reshape(n, -1)[:, 0]
        return [Prediction(defaults[i], value=float(values[i])) for i in range(n)]
    if spec.kind == "other":
        arrays = {name: _text(_output(out, name, n)) for name in spec.outputs}
        return [Prediction(defaults[i], outputs={k: v[i] for k, v in arrays.items()}) for i in range(n)]
    assert spec.classes is not None and spec.roles.probabilities is not None  # the catalog requires them
    classes = spec.classes
    probs = _output(out, spec.roles.probabilities, n).astype(np.float64)
    if probs.ndim != 2 or probs.shape[1] != len(classes):
        raise GatewayError(
            f"the model's probabilities have shape {list(probs.shape)}; serving.classes has {len(classes)}"
        )
    if spec.kind == "binary" and spec.decision_threshold is not None:
        labels = [classes[1] if p >= spec.decision_threshold else classes[0] for p in probs[:, 1]]
    elif spec.roles.label is not None:
        labels = _class_values(classes, _output(out, spec.roles.label, n))
    else:  # no label output: the most probable class
        labels = [classes[j] for j in probs.argmax(axis=1)]
    return [
        Prediction(
            defaults[i],
            score=float(probs[i, 1]) if spec.kind == "binary" else None,
            label=labels[i],
            probabilities=tuple(float(p) for p in probs[i]),
        )
        for i in range(n)
    ]


def _legacy(out: Mapping[str, np.ndarray], defaults: list[bool]) -> list[Prediction]:
    probs = out.get("probabilities")
    if "score" in out:
        scores = out["score"][:, 0]
    elif probs is not None:
        scores = probs[:, -1]
    else:
        raise GatewayError("the model returned neither score nor probabilities")
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
