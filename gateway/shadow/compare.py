"""How a champion's and a challenger's answers to the same rows are compared, by model kind.

Per row pair, up to three things:
- whether the labels agree (classifiers, outlier detectors and clusterers, whose cluster ids a
  retrain may number otherwise: a disagreement clients of the ids see too; None where the kind
  has none);
- the difference of their scores or values: binary ``|score - score|`` (the probability of
  ``classes[1]``), multi-class the largest ``|p_k - q_k|`` over the classes, regression
  ``|value - value|`` (the largest over targets), outlier ``|score - score|``; None where
  there is no number to compare (label-only classifiers, kind ``other``);
- the value whose distribution each side's PSI is computed over: the prediction the drift
  reference bins (gateway/stats/reference.py ``prediction_of``: a binary score, a label, a
  regression value), in the reference's bins. Without a reference, a binary score falls into
  ten equal bins over [0, 1]; other kinds get no PSI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from gateway.catalog import ModelSpec
from gateway.responses import Prediction
from gateway.stats.counts import categorical_bins, categorical_lookup, numeric_bins
from gateway.stats.reference import Binned, prediction_of, reference_of

_UNIT_BINS: Final = Binned("score", "numeric", (0,) * 10, 0, edges=tuple(np.linspace(0.1, 0.9, 9)))


@dataclass(frozen=True)
class Compared:
    """A batch of compared rows, as arrays over those rows."""

    agree: np.ndarray | None  # bool per row; None: the kind has no label
    difference: np.ndarray | None  # float64 per row; None: nothing numeric to compare
    champion_bins: np.ndarray | None  # bin index per row in ``bins``; None: no PSI
    challenger_bins: np.ndarray | None


def psi_bins(spec: ModelSpec) -> Binned | None:
    """The bins both sides' predictions are counted in for PSI, or None when there are none."""
    reference = reference_of(spec)
    if reference is not None and reference.prediction is not None:
        return reference.prediction
    if spec.kind == "binary" and spec.roles.probabilities is not None and not spec.legacy:
        return _UNIT_BINS
    return None


def compare(
    spec: ModelSpec, champion: Sequence[Prediction], challenger: Sequence[Prediction], bins: Binned | None
) -> Compared:
    """Compare the rows' answers (same length, same order); ``spec`` is the champion's."""
    agree = None
    if spec.kind in ("binary", "multiclass", "outlier", "cluster") and not spec.legacy:
        agree = np.fromiter((a.label == b.label for a, b in zip(champion, challenger, strict=True)), bool)
    return Compared(
        agree, _difference(spec, champion, challenger), *_binned(spec, bins, champion, challenger)
    )


def _difference(
    spec: ModelSpec, champion: Sequence[Prediction], challenger: Sequence[Prediction]
) -> np.ndarray | None:
    if spec.kind in ("binary", "outlier") and all(p.score is not None for p in (*champion, *challenger)):
        a = np.fromiter((p.score for p in champion), np.float64)
        b = np.fromiter((p.score for p in challenger), np.float64)
        return np.abs(a - b)
    if spec.kind == "multiclass" and champion and champion[0].probabilities:
        a2 = np.array([p.probabilities for p in champion], dtype=np.float64)
        b2 = np.array([p.probabilities for p in challenger], dtype=np.float64)
        if a2.shape != b2.shape:
            return None
        return np.abs(a2 - b2).max(axis=1)
    if spec.kind == "regression":
        a2 = np.array([p.values if p.values is not None else (p.value,) for p in champion], dtype=np.float64)
        b2 = np.array(
            [p.values if p.values is not None else (p.value,) for p in challenger], dtype=np.float64
        )
        if a2.shape != b2.shape:
            return None
        return np.abs(a2 - b2).max(axis=1)
    return None


def _binned(
    spec: ModelSpec, bins: Binned | None, champion: Sequence[Prediction], challenger: Sequence[Prediction]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    predicted = prediction_of(spec)
    if bins is None or predicted is None:
        return None, None
    name, _ = predicted
    if bins.kind == "numeric":
        a = np.fromiter(
            (np.nan if getattr(p, name) is None else getattr(p, name) for p in champion), np.float64
        )
        b = np.fromiter(
            (np.nan if getattr(p, name) is None else getattr(p, name) for p in challenger), np.float64
        )
        return numeric_bins(bins, a), numeric_bins(bins, b)
    lookup = categorical_lookup(bins, string=False)
    other = len(bins.categories)
    return (
        categorical_bins(lookup, other, [getattr(p, name) for p in champion]),
        categorical_bins(lookup, other, [getattr(p, name) for p in challenger]),
    )
