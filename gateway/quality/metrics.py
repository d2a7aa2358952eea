"""Model-quality metrics as pure functions over numpy arrays, and which way each one is better.

Every function answers None where the metric is undefined (no rows, one class only for AUC, no
predicted positives for precision) rather than a number that would read as a measurement: a
release gate must be able to tell "0.0" from "not measurable". scikit-learn computes what it
has a careful implementation of (ROC AUC with ties, macro F1); the rest is a line of numpy, so
nothing warns (the test suite turns warnings into errors) and nothing re-validates its input.

Conventions: ``truth`` of a binary model is a bool array (True: ``classes[1]``, the positive
class); of a classifier, the class index into ``serving.classes``; ``probabilities`` are
``[N, C]`` in class order. Probabilities are clipped to ``[EPS, 1 - EPS]`` for the log loss, so
one confident miss costs a large finite amount, not infinity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

EPS: Final = 1e-15
BINS: Final = 10  # ECE / reliability: equal-width bins over [0, 1]

# For the release gate: True when a larger value is better.
HIGHER_IS_BETTER: Final[dict[str, bool]] = {
    "auc": True,
    "log_loss": False,
    "precision": True,
    "recall": True,
    "accuracy": True,
    "ece": False,
    "macro_f1": True,
    "mae": False,
    "rmse": False,
}


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of a reliability (calibration) plot: predictions with score in [lower, upper)."""

    lower: float
    upper: float
    mean_predicted: float | None  # None: no row fell in the bin
    observed_rate: float | None
    count: int

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "mean_predicted": self.mean_predicted,
            "observed_rate": self.observed_rate,
            "count": self.count,
        }


def _bools(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=bool).reshape(-1)


def auc(truth: np.ndarray, score: np.ndarray) -> float | None:
    """ROC AUC of ``score`` for the positive class; None with no rows or a single class."""
    y = _bools(truth)
    if len(y) == 0 or y.all() or not y.any():
        return None
    # The Mann-Whitney form (tied scores share their average rank), equal to scikit-learn's
    # roc_auc_score: the serving image has no scikit-learn (docs/release.md).
    ranks = _average_ranks(np.asarray(score, dtype=np.float64).reshape(-1))
    positives = int(y.sum())
    negatives = len(y) - positives
    return float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, ties given the mean of the ranks they span."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # the highest rank of each distinct value
    return (last - (counts - 1) / 2)[inverse]


def binary_log_loss(truth: np.ndarray, score: np.ndarray) -> float | None:
    """Mean negative log-likelihood of the positive-class probability ``score``."""
    y = _bools(truth)
    if len(y) == 0:
        return None
    p = np.clip(np.asarray(score, dtype=np.float64).reshape(-1), EPS, 1 - EPS)
    return float(-np.mean(np.where(y, np.log(p), np.log1p(-p))))


def log_loss(truth: np.ndarray, probabilities: np.ndarray) -> float | None:
    """Mean negative log of the probability given to the true class (``truth``: class indices)."""
    y = np.asarray(truth, dtype=np.intp).reshape(-1)
    if len(y) == 0:
        return None
    p = np.asarray(probabilities, dtype=np.float64).reshape(len(y), -1)
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], EPS, 1 - EPS))))


def accuracy(truth: np.ndarray, predicted: np.ndarray) -> float | None:
    """Share of rows whose prediction equals the truth (any comparable dtype)."""
    t, p = np.asarray(truth).reshape(-1), np.asarray(predicted).reshape(-1)
    return float(np.mean(t == p)) if len(t) else None


def precision(truth: np.ndarray, predicted: np.ndarray) -> float | None:
    """TP / (TP + FP) over bool arrays; None when nothing was predicted positive."""
    t, p = _bools(truth), _bools(predicted)
    flagged = int(p.sum())
    return float((t & p).sum() / flagged) if flagged else None


def recall(truth: np.ndarray, predicted: np.ndarray) -> float | None:
    """TP / (TP + FN) over bool arrays; None when no row is truly positive."""
    t, p = _bools(truth), _bools(predicted)
    positives = int(t.sum())
    return float((t & p).sum() / positives) if positives else None


def macro_f1(truth: np.ndarray, predicted: np.ndarray) -> float | None:
    """Unweighted mean F1 over the classes present in the truth or the predictions."""
    t, p = np.asarray(truth).reshape(-1), np.asarray(predicted).reshape(-1)
    if len(t) == 0:
        return None
    # As scikit-learn's f1_score(average="macro", zero_division=0), without scikit-learn.
    classes = np.union1d(t, p)
    true_pos = np.array([np.sum((t == c) & (p == c)) for c in classes], dtype=np.float64)
    claimed = np.array([np.sum(p == c) for c in classes], dtype=np.float64)
    actual = np.array([np.sum(t == c) for c in classes], dtype=np.float64)
    denominator = claimed + actual  # 2 TP + FP + FN
    f1 = np.divide(2 * true_pos, denominator, out=np.zeros_like(true_pos), where=denominator > 0)
    return float(f1.mean())


def reliability(truth: np.ndarray, score: np.ndarray, bins: int = BINS) -> list[ReliabilityBin]:
    """Per equal-width score bin: mean predicted probability, observed positive rate, rows.
    A score of exactly 1.0 falls in the last bin."""
    y = _bools(truth).astype(np.float64)
    s = np.asarray(score, dtype=np.float64).reshape(-1)
    index = np.clip((s * bins).astype(np.intp), 0, bins - 1) if len(s) else np.zeros(0, np.intp)
    counts = np.bincount(index, minlength=bins)
    sum_pred = np.bincount(index, weights=s, minlength=bins)
    sum_true = np.bincount(index, weights=y, minlength=bins)
    out = []
    for b in range(bins):
        n = int(counts[b])
        out.append(
            ReliabilityBin(
                b / bins,
                (b + 1) / bins,
                float(sum_pred[b] / n) if n else None,
                float(sum_true[b] / n) if n else None,
                n,
            )
        )
    return out


def ece(truth: np.ndarray, score: np.ndarray, bins: int = BINS) -> float | None:
    """Expected calibration error: the row-weighted mean of |mean predicted - observed rate|
    over ``bins`` equal-width bins."""
    table = reliability(truth, score, bins)
    total = sum(b.count for b in table)
    if total == 0:
        return None
    gap = sum(
        b.count * abs(b.mean_predicted - b.observed_rate)
        for b in table
        if b.mean_predicted is not None and b.observed_rate is not None
    )
    return float(gap / total)


def _targets(truth: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(truth, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    if t.ndim == 1:  # one target: a column
        t, p = t[:, None], p.reshape(-1, 1)
    return t, p.reshape(t.shape)


def mae(truth: np.ndarray, predicted: np.ndarray) -> float | None:
    """Mean absolute error; with several targets (``[N, K]``), the mean of each target's MAE."""
    t, p = _targets(truth, predicted)
    if len(t) == 0:
        return None
    return float(np.mean(np.mean(np.abs(t - p), axis=0)))


def rmse(truth: np.ndarray, predicted: np.ndarray) -> float | None:
    """Root mean squared error; with several targets, the mean of each target's RMSE."""
    t, p = _targets(truth, predicted)
    if len(t) == 0:
        return None
    return float(np.mean(np.sqrt(np.mean((t - p) ** 2, axis=0))))
