"""What quality is measured against: a version's serving contract, its labels, its predictions.

A ``Contract`` is the part of the serving contract (docs/serving-contract.md) that says how to
score a prediction: the kind, the classes, the decision threshold, whether there are
probabilities, the number of targets. The live monitor builds it from the gateway's
``ModelSpec``; the offline report from ``metadata.json``'s ``serving`` facts, so both score the
same way.

Labels are checked here, once, for both paths (``truth_of``). A classifier's label is accepted
when it is one of ``serving.classes`` or names one in text: the class itself (``1`` for class
``1``, ``"fraud"`` for class ``"fraud"``, ``true`` for class ``true``), a number equal to a
numeric class (``1.0`` for class ``1``), or its text form (``"1"`` or ``"1.0"`` for class ``1``,
``"true"``/``"False"`` for a bool class, ``1`` for class ``"1"``), because CSV files and some
JSON clients write every value as text. A bool never stands for a number, nor a number for a
bool (``true`` is no label of classes ``[0, 1]``): that is a client mixing up columns. A
regressor's label is a finite number (or its text), or a list of ``serving.targets`` of them;
an outlier detector's, ``true`` (outlier) / ``false`` or ``-1`` (outlier) / ``1``, as its label
output says; kinds ``other`` and ``cluster`` (whose ids no ground truth names) take any scalar
and compute nothing.

Predictions are kept compact (``compact``): a binary model's score, a class index, a value;
never the ``Prediction`` object, so a remembered prediction costs a few dozen bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway.catalog import ClassLabel, Kind, ModelSpec
from gateway.quality import metrics as m
from gateway.responses import Prediction
from serving_contract import keys

Truth = int | float | bool | tuple[float, ...] | str  # see truth_of
Compact = float | int | tuple[float, ...] | None  # see compact

DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class Contract:
    kind: Kind
    classes: tuple[ClassLabel, ...] | None
    threshold: float  # binary with probabilities: classes[1] when score >= threshold
    probabilities: bool  # classifiers: the model answers probabilities
    targets: int = 1  # regression

    @classmethod
    def of_spec(cls, spec: ModelSpec) -> Contract:
        """The gateway's spec of a served version (a legacy export is a 0/1 binary model)."""
        classes = spec.classes if spec.classes is not None else ((0, 1) if spec.kind == "binary" else None)
        probabilities = spec.legacy or spec.roles.probabilities is not None
        threshold = spec.decision_threshold if spec.decision_threshold is not None else DEFAULT_THRESHOLD
        return cls(spec.kind, classes, threshold, probabilities, spec.targets)

    @classmethod
    def of_serving(cls, serving: Mapping[str, Any]) -> Contract:
        """``metadata.json``'s ``serving`` facts (serving_contract's ``ServingContract.facts``)."""
        kind = serving.get(keys.KIND, "binary")
        raw = serving.get(keys.CLASSES)
        classes = tuple(raw) if isinstance(raw, list) else ((0, 1) if kind == "binary" else None)
        outputs = serving.get(keys.OUTPUTS)
        # metadata without outputs predates issue 19: a classifier then always had probabilities
        probabilities = not isinstance(outputs, dict) or "probabilities" in outputs
        threshold = serving.get(keys.DECISION_THRESHOLD)
        targets = serving.get(keys.TARGETS, 1)
        return cls(
            kind,
            classes,
            float(threshold) if isinstance(threshold, int | float) else DEFAULT_THRESHOLD,
            probabilities,
            targets if isinstance(targets, int) and targets > 0 else 1,
        )

    @property
    def classifier(self) -> bool:
        return self.kind in ("binary", "multiclass")

    def metric_names(self) -> tuple[str, ...]:
        """The metrics this contract has, in report order."""
        if self.kind == "binary" and self.probabilities:
            return ("auc", "log_loss", "precision", "recall", "ece", "accuracy")
        if self.kind == "binary":
            return ("accuracy", "precision", "recall")
        if self.kind == "multiclass" and self.probabilities:
            return ("accuracy", "macro_f1", "log_loss")
        if self.kind == "multiclass":
            return ("accuracy", "macro_f1")
        if self.kind == "regression":
            return ("mae", "rmse")
        if self.kind == "outlier":
            return ("auc", "precision", "recall", "accuracy")
        return ()


def _number(raw: object) -> float | None:
    """A finite float from a number or its text; None for anything else (a bool included)."""
    if isinstance(raw, bool):
        return None
    try:
        if isinstance(raw, int | float | np.integer | np.floating):
            value = float(raw)
        elif isinstance(raw, str):
            value = float(raw.strip())
        else:
            return None
    except (ValueError, OverflowError):  # "abc"; an integer past float's range (10**999)
        return None
    return value if math.isfinite(value) else None


def _class_index(classes: Sequence[ClassLabel], raw: object) -> int | None:
    if isinstance(raw, np.generic):
        raw = raw.item()
    for i, c in enumerate(classes):
        if isinstance(c, bool):
            if isinstance(raw, bool) and raw is c:
                return i
            if isinstance(raw, str) and raw.strip().lower() == str(c).lower():
                return i
        elif isinstance(c, int | float):
            if isinstance(raw, bool):
                continue
            number = _number(raw)
            if number is not None and number == c:
                return i
        elif (isinstance(raw, str) and raw == c) or (not isinstance(raw, bool | str) and str(raw) == c):
            return i
    return None


def _classes_text(classes: Sequence[ClassLabel]) -> str:
    return ", ".join(repr(c) for c in classes)


def truth_of(contract: Contract, raw: object) -> tuple[Truth | None, str]:
    """The label as a truth value (see the module doc), or None and why it is refused."""
    if raw is None:
        return None, "the label is null"
    if contract.classifier:
        classes = contract.classes or ()
        index = _class_index(classes, raw)
        if index is None:
            return None, f"label {raw!r} is not one of the model's classes [{_classes_text(classes)}]"
        return index, ""
    if contract.kind == "regression":
        return _regression_truth(contract.targets, raw)
    if contract.kind == "outlier":
        if isinstance(raw, bool):
            return raw, ""
        number = _number(raw)
        if number in (-1.0, 1.0):
            return number == -1.0, ""
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true", ""
        return None, f"label {raw!r} is not an outlier label (true/false, or -1 outlier / 1 inlier)"
    if isinstance(raw, bool | int | float | str):  # kind other, cluster: counted, nothing to compare with
        return raw, ""
    return None, f"label {raw!r} is not a number, text or true/false"


def _regression_truth(targets: int, raw: object) -> tuple[Truth | None, str]:
    if targets == 1:
        number = _number(raw)
        if number is None:
            return None, f"label {raw!r} is not a finite number"
        return number, ""
    if isinstance(raw, list | tuple) and len(raw) == targets:
        numbers = [_number(v) for v in raw]
        if all(n is not None for n in numbers):
            return tuple(n for n in numbers if n is not None), ""
    return None, f"label {raw!r} is not a list of {targets} finite numbers (one per target)"


def compact(contract: Contract, prediction: Prediction) -> Compact:
    """What scoring needs of one answer (see the module doc); None when nothing (kind other)."""
    kind = contract.kind
    if contract.classifier and contract.probabilities:
        if kind == "binary":
            return prediction.score
        return prediction.probabilities
    if contract.classifier:
        return label_index(contract, prediction.label)
    if kind == "regression":
        return prediction.values if prediction.values is not None else prediction.value
    if kind == "outlier":  # the score and the detector's own flag (its label output, or its threshold)
        if prediction.score is None or prediction.outlier is None:
            return None
        return (prediction.score, 1.0 if prediction.outlier else 0.0)
    return None


def label_index(contract: Contract, label: object) -> int:
    """A predicted label's class index (-1: not a class, so never equal to a truth)."""
    index = _class_index(contract.classes or (), label)
    return -1 if index is None else index


def evaluate(
    contract: Contract, truths: Sequence[Any], predictions: Sequence[Any]
) -> dict[str, float | None]:
    """Every metric of ``contract`` over paired truth and compact prediction values; rows whose
    prediction is missing (None: a challenger that failed) are left out."""
    keep = [i for i, p in enumerate(predictions) if p is not None]
    t = [truths[i] for i in keep]
    p = [predictions[i] for i in keep]
    names = contract.metric_names()
    values = _compute(contract, t, p) if t else {}
    return {name: values.get(name) for name in names}


def _compute(contract: Contract, t: list[Any], p: list[Any]) -> dict[str, float | None]:
    kind = contract.kind
    if kind == "binary" and contract.probabilities:
        truth, score = np.array(t) == 1, np.array(p, dtype=np.float64)
        decided = score >= contract.threshold
        return {
            "auc": m.auc(truth, score),
            "log_loss": m.binary_log_loss(truth, score),
            "precision": m.precision(truth, decided),
            "recall": m.recall(truth, decided),
            "ece": m.ece(truth, score),
            "accuracy": m.accuracy(truth, decided),
        }
    if kind == "binary":
        truth, index = np.array(t), np.array(p)
        return {
            "accuracy": m.accuracy(truth, index),
            "precision": m.precision(truth == 1, index == 1),
            "recall": m.recall(truth == 1, index == 1),
        }
    if kind == "multiclass":
        truth = np.array(t, dtype=np.intp)
        probabilities = np.array(p, dtype=np.float64) if contract.probabilities else None
        index = probabilities.argmax(axis=1) if probabilities is not None else np.array(p)
        out = {"accuracy": m.accuracy(truth, index), "macro_f1": m.macro_f1(truth, index)}
        if probabilities is not None:
            out["log_loss"] = m.log_loss(truth, probabilities)
        return out
    if kind == "regression":
        truth, value = np.array(t, dtype=np.float64), np.array(p, dtype=np.float64)
        return {"mae": m.mae(truth, value), "rmse": m.rmse(truth, value)}
    if kind == "outlier":
        truth, answered = np.array(t, dtype=bool), np.array(p, dtype=np.float64).reshape(len(p), 2)
        flagged = answered[:, 1] == 1.0
        return {  # the positive class is "outlier"; a lower score is more anomalous
            "auc": m.auc(truth, -answered[:, 0]),
            "precision": m.precision(truth, flagged),
            "recall": m.recall(truth, flagged),
            "accuracy": m.accuracy(truth, flagged),
        }
    return {}


def reliability(
    contract: Contract, truths: Sequence[Any], predictions: Sequence[Any]
) -> list[m.ReliabilityBin]:
    """A binary model's reliability bins (empty for any other contract)."""
    if not (contract.kind == "binary" and contract.probabilities):
        return []
    pairs = [(t, p) for t, p in zip(truths, predictions, strict=True) if p is not None]
    truth = np.array([t == 1 for t, _ in pairs], dtype=bool)
    return m.reliability(truth, np.array([p for _, p in pairs], dtype=np.float64))
