"""The quality metrics (gateway/quality/metrics.py, contract.py) on small rows, no servers.

Every expected value is computed here by hand, row by row in plain Python (pairs of scores for
AUC, a loop over bins for ECE, per-class counts for F1), never by calling the function tested.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gateway.quality import metrics as m
from gateway.quality.contract import Contract, evaluate, truth_of


def rows(n: int, seed: int = 0) -> tuple[list[bool], list[float]]:
    rng = random.Random(seed)
    truth, score = [], []
    for _ in range(n):
        y = rng.random() < 0.3
        truth.append(y)
        score.append(min(max(rng.gauss(0.65 if y else 0.35, 0.2), 0.0), 1.0))
    score[:3] = [0.0, 1.0, 0.5]  # the edges: clipping, the last bin, the threshold
    return truth, score


def hand_auc(truth: list[bool], score: list[float]) -> float:
    pos = [s for y, s in zip(truth, score, strict=True) if y]
    neg = [s for y, s in zip(truth, score, strict=True) if not y]
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def test_binary_metrics_equal_the_hand_computed_ones() -> None:
    truth, score = rows(400)
    t, s = np.array(truth), np.array(score)
    assert m.auc(t, s) == pytest.approx(hand_auc(truth, score), abs=1e-12)

    eps = 1e-15
    losses = [-math.log(min(max(p, eps), 1 - eps)) if y else -math.log(1 - min(max(p, eps), 1 - eps))
              for y, p in zip(truth, score, strict=True)]  # fmt: skip
    assert m.binary_log_loss(t, s) == pytest.approx(sum(losses) / len(losses), rel=1e-9)

    threshold = 0.5
    tp = sum(1 for y, p in zip(truth, score, strict=True) if y and p >= threshold)
    fp = sum(1 for y, p in zip(truth, score, strict=True) if not y and p >= threshold)
    fn = sum(1 for y, p in zip(truth, score, strict=True) if y and p < threshold)
    tn = len(truth) - tp - fp - fn
    decided = s >= threshold
    assert m.precision(t, decided) == pytest.approx(tp / (tp + fp))
    assert m.recall(t, decided) == pytest.approx(tp / (tp + fn))
    assert m.accuracy(t, decided) == pytest.approx((tp + tn) / len(truth))

    bins: list[list[tuple[bool, float]]] = [[] for _ in range(10)]
    for y, p in zip(truth, score, strict=True):
        bins[min(int(p * 10), 9)].append((y, p))
    gap = sum(
        len(b) * abs(sum(p for _, p in b) / len(b) - sum(1 for y, _ in b if y) / len(b)) for b in bins if b
    )
    assert m.ece(t, s) == pytest.approx(gap / len(truth), rel=1e-9)
    table = m.reliability(t, s)
    assert [b.count for b in table] == [len(b) for b in bins]
    assert table[9].count >= 1  # score 1.0 is in the last bin, not an eleventh
    for got, want in zip(table, bins, strict=True):
        if want:
            assert got.observed_rate == pytest.approx(sum(1 for y, _ in want if y) / len(want))
            assert got.mean_predicted == pytest.approx(sum(p for _, p in want) / len(want))
        else:
            assert got.observed_rate is None and got.mean_predicted is None


def test_undefined_metrics_are_none_not_a_number() -> None:
    empty = np.array([], dtype=bool)
    assert m.auc(np.array([True, True]), np.array([0.2, 0.9])) is None  # one class only
    assert m.auc(empty, np.array([])) is None
    assert m.binary_log_loss(empty, np.array([])) is None
    assert m.precision(np.array([True, False]), np.array([False, False])) is None  # nothing flagged
    assert m.recall(np.array([False, False]), np.array([True, False])) is None  # no positives
    assert m.ece(empty, np.array([])) is None
    assert m.mae(np.array([]), np.array([])) is None
    assert m.macro_f1(np.array([]), np.array([])) is None
    # a confident miss costs a large, finite amount
    assert math.isfinite(m.binary_log_loss(np.array([True]), np.array([0.0])) or math.inf)
    assert m.log_loss(np.array([0]), np.array([[0.0, 1.0]])) == pytest.approx(-math.log(1e-15))


def test_multiclass_metrics_equal_the_hand_computed_ones() -> None:
    rng = random.Random(3)
    n, classes = 300, 4
    truth = [rng.randrange(classes) for _ in range(n)]
    probs = []
    for y in truth:
        raw = [rng.random() + (1.5 if j == y else 0.0) for j in range(classes)]
        probs.append([r / sum(raw) for r in raw])
    predicted = [max(range(classes), key=lambda j, p=p: p[j]) for p in probs]  # type: ignore[misc]
    f1s = []
    for c in range(classes):
        tp = sum(1 for y, p in zip(truth, predicted, strict=True) if y == c and p == c)
        fp = sum(1 for y, p in zip(truth, predicted, strict=True) if y != c and p == c)
        fn = sum(1 for y, p in zip(truth, predicted, strict=True) if y == c and p != c)
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    loss = -sum(math.log(p[y]) for y, p in zip(truth, probs, strict=True)) / n

    got = evaluate(Contract("multiclass", ("a", "b", "c", "d"), 0.5, True), truth, [tuple(p) for p in probs])
    assert got["accuracy"] == pytest.approx(
        sum(1 for y, p in zip(truth, predicted, strict=True) if y == p) / n
    )
    assert got["macro_f1"] == pytest.approx(sum(f1s) / classes)
    assert got["log_loss"] == pytest.approx(loss)
    assert set(got) == {"accuracy", "macro_f1", "log_loss"}
    # labels only (no probabilities): the class index the model answered
    labels_only = evaluate(Contract("multiclass", ("a", "b", "c", "d"), 0.5, False), truth, predicted)
    assert labels_only == {"accuracy": got["accuracy"], "macro_f1": got["macro_f1"]}


def test_regression_single_and_multi_target() -> None:
    truth = [1.0, 2.0, 4.0, -1.0]
    value = [1.5, 2.0, 3.0, 0.0]
    errors = [abs(t - v) for t, v in zip(truth, value, strict=True)]
    got = evaluate(Contract("regression", None, 0.5, False), truth, value)
    assert got["mae"] == pytest.approx(sum(errors) / 4)
    assert got["rmse"] == pytest.approx(math.sqrt(sum(e * e for e in errors) / 4))
    # two targets: the mean over targets of each target's MAE / RMSE
    truth2 = [(1.0, 10.0), (2.0, 20.0), (3.0, 30.0)]
    value2 = [(1.0, 12.0), (2.5, 20.0), (3.0, 27.0)]
    per_target_mae = [sum(abs(t[k] - v[k]) for t, v in zip(truth2, value2, strict=True)) / 3 for k in (0, 1)]
    per_target_rmse = [
        math.sqrt(sum((t[k] - v[k]) ** 2 for t, v in zip(truth2, value2, strict=True)) / 3) for k in (0, 1)
    ]
    got2 = evaluate(Contract("regression", None, 0.5, False, targets=2), truth2, value2)
    assert got2["mae"] == pytest.approx(sum(per_target_mae) / 2)
    assert got2["rmse"] == pytest.approx(sum(per_target_rmse) / 2)


def test_binary_contract_uses_its_threshold_and_skips_missing_answers() -> None:
    contract = Contract("binary", ("ok", "fraud"), 0.8, True)
    truth = [1, 1, 0, 0, 1]
    score = [0.9, 0.7, 0.85, 0.1, None]  # the last: a challenger that did not answer
    got = evaluate(contract, truth, score)
    # at 0.8: flagged rows 0 and 2; row 0 is fraud
    assert got["precision"] == pytest.approx(1 / 2)
    assert got["recall"] == pytest.approx(1 / 2)
    assert got["accuracy"] == pytest.approx(2 / 4)
    assert got["auc"] == pytest.approx(hand_auc([True, True, False, False], [0.9, 0.7, 0.85, 0.1]))
    assert list(got) == ["auc", "log_loss", "precision", "recall", "ece", "accuracy"]
    assert evaluate(contract, [], []) == dict.fromkeys(got)  # no rows: every metric None


def test_labels_only_binary_and_outlier() -> None:
    binary = Contract("binary", (False, True), 0.5, False)
    got = evaluate(binary, [1, 0, 1, 0], [1, 1, 0, 0])
    assert got == {"accuracy": 0.5, "precision": 0.5, "recall": 0.5}
    outlier = Contract("outlier", None, 0.5, False)
    truth = [True, False, True, False]  # True: an outlier
    answers = [(-2.0, 1.0), (0.5, 0.0), (0.1, 0.0), (-0.3, 1.0)]
    got = evaluate(outlier, truth, answers)
    assert got["precision"] == 0.5 and got["recall"] == 0.5 and got["accuracy"] == 0.5
    assert got["auc"] == pytest.approx(hand_auc(truth, [2.0, -0.5, -0.1, 0.3]))  # lower = more anomalous
    assert evaluate(Contract("other", None, 0.5, False), ["x"], [None]) == {}


@pytest.mark.parametrize(
    ("classes", "raw", "index"),
    [
        ((0, 1), 1, 1),
        ((0, 1), "1", 1),
        ((0, 1), 1.0, 1),
        ((0, 1), "0.0", 0),
        ((0, 1), True, None),  # a bool is no number
        ((0, 1), 2, None),
        ((False, True), True, 1),
        ((False, True), "false", 0),
        ((False, True), 1, None),  # nor a number a bool
        (("ok", "fraud"), "fraud", 1),
        (("ok", "fraud"), "Fraud", None),
        (("0", "1"), 1, 1),  # a CSV reader's int for a text class
        ((0.5, 1.5), "1.5", 1),
    ],
)
def test_which_labels_name_a_class(classes: tuple, raw: object, index: int | None) -> None:
    truth, why = truth_of(Contract("binary", classes, 0.5, True), raw)
    assert truth == index
    assert (why == "") == (index is not None)


@pytest.mark.parametrize("seed", range(4))
def test_auc_and_macro_f1_equal_scikit_learn_s_with_ties(seed: int) -> None:
    """The serving image has no scikit-learn: the live metrics are computed with numpy, and must
    equal sklearn's on the same rows, ties in the scores and classes never predicted included."""
    from sklearn.metrics import f1_score, roc_auc_score

    rng = np.random.default_rng(seed)
    truth = rng.random(300) < 0.3
    score = np.round(rng.random(300) * 0.5 + truth * 0.3, 1)  # coarse: many tied scores
    assert m.auc(truth, score) == pytest.approx(roc_auc_score(truth, score), abs=1e-12)
    classes = np.array(["a", "b", "c", "d"])
    t, p = rng.choice(classes[:3], 200), rng.choice(classes[1:], 200)  # "a" never predicted, "d" never true
    want = f1_score(t, p, average="macro", zero_division=0.0)
    assert m.macro_f1(t, p) == pytest.approx(want, abs=1e-12)
