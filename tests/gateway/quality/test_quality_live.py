"""Live quality (gateway/quality/live.py): answers remembered by prediction id in the shared
store, labels paired with them once, per version and role; each test runs on both stores (a
SQLite file, and a real redis-server started here), which must answer alike.

Expected metrics are computed here by hand from the same rows (pairs of scores for AUC, counts
at the threshold), not by calling the functions the monitor uses.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.catalog import Column, ModelSpec, OutputRoles
from gateway.errors import BadRequest, InvalidInput, TooLarge
from gateway.evidence.redis_store import RedisEvidence
from gateway.evidence.sqlite_store import SqliteEvidence
from gateway.evidence.store import EvidenceStore
from gateway.evidence.writer import EvidenceWriter
from gateway.observe import Observation
from gateway.quality.feedback import FeedbackResult
from gateway.quality.live import FeedbackItem, QualityMonitor, parse_feedback
from gateway.quality.report import QualityReport
from gateway.request_ids import new_request_id
from gateway.responses import Prediction
from gateway.shadow.runner import ChallengerRows
from support import servers

pytestmark = pytest.mark.integration  # a real MLflow registry (SQLite) or real servers

MODEL = "fraud-detector"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Monitor:
    """A QualityMonitor on a real store, driven synchronously: what it is handed is written
    before the next call (the writer flushed), as the gateway's writer does within a round trip."""

    def __init__(self, store: EvidenceStore, clock: Clock) -> None:
        self.loop = asyncio.new_event_loop()
        self.store = store
        self.writer = EvidenceWriter(store)
        self.monitor = QualityMonitor(store, self.writer, clock=clock)

    def _run(self, call: Any) -> Any:
        return self.loop.run_until_complete(call)

    def observe(self, o: Observation) -> None:
        self.monitor.observe(o)
        self._run(self.writer.flush())

    def remember_challenger(self, rows: ChallengerRows) -> None:
        self.monitor.remember_challenger(rows)
        self._run(self.writer.flush())

    def feedback(self, s: ModelSpec, items: list[FeedbackItem]) -> FeedbackResult:
        result: FeedbackResult = self._run(self.monitor.feedback(s, items))
        return result

    def report(self, s: ModelSpec, window: str) -> QualityReport:
        report: QualityReport = self._run(self.monitor.report(s, window))
        return report

    def close(self) -> None:
        self._run(self.store.close())
        self.loop.close()


@pytest.fixture(scope="module")
def redis_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with servers.redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server.address


@pytest.fixture(params=["sqlite", "redis"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: list[Monitor] = []

    def build(clock: Clock | None = None, cap: int = 50_000, ttl_s: int = 3600) -> Monitor:
        if request.param == "sqlite":
            store: EvidenceStore = SqliteEvidence(tmp_path / f"evidence-{len(made)}.sqlite", ttl_s, cap)
        else:
            address = request.getfixturevalue("redis_address")
            store = RedisEvidence(f"redis://{address}/0", ttl_s, cap, prefix=f"t{time.time_ns()}:")
        made.append(Monitor(store, clock or Clock()))
        return made[-1]

    yield build
    for monitor in made:
        monitor.close()


def spec(
    kind: str = "binary",
    classes: tuple[Any, ...] | None = (0, 1),
    version: str = "1",
    name: str = MODEL,
    **extra: Any,
) -> ModelSpec:
    roles = extra.pop("roles", OutputRoles(label="label", probabilities="probabilities"))
    return ModelSpec(
        name=name, triton_model=name, version=version, layout="columns", input_name="",
        columns=(Column("amount", "float32"),), feature_service="fs",
        entity_keys=(Column("user_id", "int64"),), request_fields=("amount",),
        kind=kind, classes=classes, roles=roles, outputs=(), **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def observation(s: ModelSpec, predictions: list[Prediction], ids: list[str], at: float = T0) -> Observation:
    n = len(predictions)
    return Observation(
        spec=s,
        version=s.version,
        inputs={"amount": np.ones((n, 1), dtype=np.float32)},
        predictions=predictions,
        entity_rows=[{"user_id": i} for i in range(n)],
        at=at,
        prediction_ids=ids,
    )


def scored(scores: list[float], threshold: float = 0.5) -> list[Prediction]:
    return [Prediction(False, score=p, label=int(p >= threshold), probabilities=(1 - p, p)) for p in scores]


def hand_auc(truth: list[bool], score: list[float]) -> float:
    pos = [s for y, s in zip(truth, score, strict=True) if y]
    neg = [s for y, s in zip(truth, score, strict=True) if not y]
    return sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg) / (len(pos) * len(neg))


def test_labels_pair_with_the_champion_and_the_challenger(make: Any) -> None:
    clock = Clock()
    monitor = make(clock)
    champion, challenger = spec(version="1"), spec(version="2")
    rng = random.Random(1)
    n = 120
    truth = [rng.random() < 0.4 for _ in range(n)]
    score1 = [min(max(rng.gauss(0.7 if y else 0.3, 0.2), 0.0), 1.0) for y in truth]
    score2 = [min(max(rng.gauss(0.6 if y else 0.4, 0.25), 0.0), 1.0) for y in truth]
    ids = [f"p{i}" for i in range(n)]
    monitor.observe(observation(champion, scored(score1), ids))
    monitor.remember_challenger(
        ChallengerRows(MODEL, MODEL, "2", challenger, ids[:100], scored(score2[:100]), T0)
    )

    result = monitor.feedback(champion, [FeedbackItem(i, int(y)) for i, y in zip(ids, truth, strict=True)])
    assert result.to_dict() == {
        "accepted": n, "duplicate": 0, "conflicting": 0, "unknown": 0, "invalid": 0, "expired": 0,
        "errors": []
    }  # fmt: skip

    report = monitor.report(champion, "1h").to_dict()
    assert list(report) == ["model", "kind", "window", "window_seconds", "versions", "feedback"]
    assert (report["model"], report["kind"], report["window"], report["window_seconds"]) == (
        MODEL, "binary", "1h", 3600
    )  # fmt: skip
    assert report["feedback"] == {
        "accepted": n, "duplicate": 0, "conflicting": 0, "unknown": 0, "invalid": 0, "expired": 0
    }  # fmt: skip
    first, second = report["versions"]
    assert {k: first[k] for k in ("model", "version", "role", "rows")} == {
        "model": MODEL, "version": "1", "role": "champion", "rows": n
    }  # fmt: skip
    assert {k: second[k] for k in ("model", "version", "role", "rows")} == {
        "model": MODEL, "version": "2", "role": "challenger", "rows": 100
    }  # fmt: skip
    assert list(first["metrics"]) == ["auc", "log_loss", "precision", "recall", "ece", "accuracy"]
    assert first["metrics"]["auc"] == pytest.approx(hand_auc(truth, score1))
    assert second["metrics"]["auc"] == pytest.approx(hand_auc(truth[:100], score2[:100]))
    tp = sum(1 for y, p in zip(truth, score1, strict=True) if y and p >= 0.5)
    flagged = sum(1 for p in score1 if p >= 0.5)
    assert first["metrics"]["precision"] == pytest.approx(tp / flagged)
    assert first["metrics"]["recall"] == pytest.approx(tp / sum(truth))
    eps = 1e-15
    loss = [-math.log(min(max(p if y else 1 - p, eps), 1 - eps)) for y, p in zip(truth, score1, strict=True)]
    assert first["metrics"]["log_loss"] == pytest.approx(sum(loss) / n)


def test_each_outcome_once_and_never_counted_twice(make: Any) -> None:
    monitor = make()
    s = spec()
    monitor.observe(observation(s, scored([0.9, 0.2, 0.6]), ["a", "b", "c"]))
    items = [
        FeedbackItem("a", 1),
        FeedbackItem("a", 1),  # the same again: duplicate
        FeedbackItem("a", 0),  # another label: conflicting, the first kept
        FeedbackItem("zzz", 1),  # never served
        FeedbackItem("b", "yes"),  # not a class
        FeedbackItem("b", None),
        FeedbackItem("b", {"x": 1}),  # type: ignore[arg-type]  # a bad item never raises
        FeedbackItem("c", "0"),  # text form of class 0: accepted
    ]
    result = monitor.feedback(s, items)
    assert result.counts == {
        "accepted": 2, "duplicate": 1, "conflicting": 1, "unknown": 1, "invalid": 3, "expired": 0
    }  # fmt: skip
    assert [(e["index"], e["id"], e["outcome"]) for e in result.errors] == [
        (1, "a", "duplicate"), (2, "a", "conflicting"), (3, "zzz", "unknown"),
        (4, "b", "invalid"), (5, "b", "invalid"), (6, "b", "invalid"),
    ]  # fmt: skip
    assert "one of the model's classes" in result.errors[3]["reason"]
    assert "gateway quality report" in result.errors[2]["reason"]
    # retrying the whole batch changes nothing
    again = monitor.feedback(s, items)
    assert again.counts == {
        "accepted": 0, "duplicate": 3, "conflicting": 1, "unknown": 1, "invalid": 3, "expired": 0
    }  # fmt: skip
    report = monitor.report(s, "1h")
    assert report.versions[0].rows == 2
    assert report.feedback == {
        "accepted": 2, "duplicate": 4, "conflicting": 2, "unknown": 2, "invalid": 6, "expired": 0
    }  # fmt: skip


def test_labels_for_expired_predictions_say_expired_not_unknown(make: Any) -> None:
    monitor = make(ttl_s=1)
    s = spec()
    ids = [f"{new_request_id()}-0", f"{new_request_id()}-0"]
    monitor.observe(observation(s, scored([0.5, 0.7]), ids))
    assert monitor.feedback(s, [FeedbackItem(ids[0], 1)]).counts["accepted"] == 1
    time.sleep(2.2)  # past the TTL: the store forgot the second prediction
    result = monitor.feedback(s, [FeedbackItem(ids[1], 1), FeedbackItem(f"{'0' * 32}-0", 1)])
    assert (result.counts["expired"], result.counts["unknown"]) == (1, 1)
    assert "older than the" in result.errors[0]["reason"]
    assert "GATEWAY_STATE_TTL_S" in result.errors[0]["reason"]


def test_labeled_pairs_are_bounded_per_version(make: Any) -> None:
    monitor = make(cap=10)
    s = spec()
    ids = [f"p{i}" for i in range(30)]
    monitor.observe(observation(s, scored([0.1 * (i % 10) for i in range(30)]), ids))
    monitor.feedback(s, [FeedbackItem(i, 1) for i in ids])
    assert monitor.report(s, "1h").versions[0].rows == 10


def test_windows_are_by_label_arrival(make: Any) -> None:
    clock = Clock()
    monitor = make(clock)
    s = spec()
    monitor.observe(observation(s, scored([0.9, 0.8, 0.2]), ["a", "b", "c"]))
    monitor.feedback(s, [FeedbackItem("a", 1)])
    clock.now += 2 * 3600
    monitor.feedback(s, [FeedbackItem("b", 0), FeedbackItem("c", 0)])
    assert monitor.report(s, "1h").versions[0].rows == 2
    assert monitor.report(s, "1h").feedback["accepted"] == 2
    assert monitor.report(s, "24h").versions[0].rows == 3
    with pytest.raises(BadRequest):
        monitor.report(s, "forever")


def test_multiclass_string_classes(make: Any) -> None:
    monitor = make()
    s = spec("multiclass", ("cat", "dog", "eel"))
    probs = [(0.7, 0.2, 0.1), (0.1, 0.8, 0.1), (0.3, 0.3, 0.4), (0.5, 0.4, 0.1)]
    answers = [
        Prediction(False, label=("cat", "dog", "eel")[int(np.argmax(p))], probabilities=p) for p in probs
    ]
    monitor.observe(observation(s, answers, ["a", "b", "c", "d"]))
    result = monitor.feedback(
        s, [FeedbackItem("a", "cat"), FeedbackItem("b", "dog"), FeedbackItem("c", "cat"),
            FeedbackItem("d", "dog"), FeedbackItem("a", 1)]
    )  # fmt: skip
    assert result.counts["accepted"] == 4 and result.counts["invalid"] == 1
    metrics = monitor.report(s, "1h").versions[0].metrics
    assert metrics["accuracy"] == pytest.approx(2 / 4)
    want = -(math.log(0.7) + math.log(0.8) + math.log(0.3) + math.log(0.4)) / 4
    assert metrics["log_loss"] == pytest.approx(want)


def test_bool_classes_without_probabilities(make: Any) -> None:
    monitor = make()
    s = spec("binary", (False, True), roles=OutputRoles(label="label"))
    answers = [Prediction(False, label=v, scores=(0.0,)) for v in (True, False, True, False)]
    monitor.observe(observation(s, answers, ["a", "b", "c", "d"]))
    result = monitor.feedback(
        s, [FeedbackItem("a", True), FeedbackItem("b", "false"), FeedbackItem("c", False),
            FeedbackItem("d", 1)]
    )  # fmt: skip
    assert (result.counts["accepted"], result.counts["invalid"], sum(result.counts.values())) == (3, 1, 4)
    assert monitor.report(s, "1h").versions[0].metrics == {"accuracy": 2 / 3, "precision": 0.5, "recall": 1.0}


def test_regression_labels_are_finite_numbers(make: Any) -> None:
    monitor = make()
    s = spec("regression", None, roles=OutputRoles(value="value"))
    monitor.observe(observation(s, [Prediction(False, value=v) for v in (1.0, 2.0, 3.0)], ["a", "b", "c"]))
    result = monitor.feedback(
        s, [FeedbackItem("a", 2), FeedbackItem("b", "1.5"), FeedbackItem("c", math.inf),
            FeedbackItem("c", "abc"), FeedbackItem("c", True), FeedbackItem("c", math.nan),
            FeedbackItem("c", 10**999), FeedbackItem("c", -(10**999))]  # past float's range: invalid
    )  # fmt: skip
    assert result.counts["accepted"] == 2 and result.counts["invalid"] == 6
    # a classifier's label past float's range is no class: invalid, the batch's others accepted
    binary = spec(name="huge-labels")
    monitor.observe(observation(binary, scored([0.9, 0.1]), ["h1", "h2"]))
    huge = monitor.feedback(binary, [FeedbackItem("h1", 10**999), FeedbackItem("h2", 0)])
    assert (huge.counts["invalid"], huge.counts["accepted"]) == (1, 1)
    assert monitor.report(s, "1h").versions[0].metrics == {"mae": pytest.approx(0.75), "rmse": pytest.approx(
        math.sqrt((1 + 0.25) / 2))}  # fmt: skip

    multi = spec("regression", None, name="m2", roles=OutputRoles(value="value"), targets=2)
    monitor.observe(observation(multi, [Prediction(False, values=(1.0, 10.0))], ["x"]))
    bad = monitor.feedback(multi, [FeedbackItem("x", 1.0), FeedbackItem("x", [1.0, "n"])])
    assert bad.counts["invalid"] == 2
    assert monitor.feedback(multi, [FeedbackItem("x", [2.0, 10.0])]).counts["accepted"] == 1
    assert monitor.report(multi, "1h").versions[0].metrics["mae"] == pytest.approx(0.5)  # (1 + 0) / 2


def test_a_challenger_of_another_model_and_late_answers(make: Any) -> None:
    monitor = make()
    s = spec()
    other = spec(name="fraud-gbm", version="7")
    monitor.observe(observation(s, scored([0.9, 0.1]), ["a", "b"]))
    monitor.feedback(s, [FeedbackItem("a", 1), FeedbackItem("b", 0)])
    # the shadow answers after the labels came back: still paired
    monitor.remember_challenger(
        ChallengerRows(MODEL, "fraud-gbm", "7", other, ["a", "b"], scored([0.2, 0.3]), T0)
    )
    versions = {(v.model, v.version, v.role): v for v in monitor.report(s, "1h").versions}
    assert versions[(MODEL, "1", "champion")].metrics["accuracy"] == 1.0
    assert versions[("fraud-gbm", "7", "challenger")].rows == 2
    assert versions[("fraud-gbm", "7", "challenger")].metrics["accuracy"] == 0.5
    # the id belongs to fraud-detector: labels sent to another model's route are unknown
    assert monitor.feedback(other, [FeedbackItem("a", 1)]).counts["unknown"] == 1


def test_batches_without_ids_are_not_remembered(make: Any) -> None:
    monitor = make()
    monitor.observe(observation(spec(), scored([0.5]), []))
    assert monitor.report(spec(), "1h").versions[0].rows == 0
    assert monitor.loop.run_until_complete(monitor.store.pairs(MODEL)) == {}  # not even the version


def test_parse_feedback_refuses_malformed_bodies() -> None:
    items = parse_feedback({"labels": [{"id": "a", "label": 1}, {"id": "b", "label": [1.0, 2.0]}]})
    assert items == [FeedbackItem("a", 1), FeedbackItem("b", [1.0, 2.0])]
    assert parse_feedback({"labels": []}) == []
    with pytest.raises(BadRequest):
        parse_feedback([{"id": "a", "label": 1}])
    cases: list[tuple[Any, str]] = [
        ({}, "labels"),
        ({"labels": "x"}, "labels"),
        ({"labels": [], "extra": 1}, "extra"),
        ({"labels": [{"id": "a", "label": 1}, 5]}, "labels[1]"),
        ({"labels": [{"label": 1}]}, "labels[0].id"),
        ({"labels": [{"id": 3, "label": 1}]}, "labels[0].id"),
        ({"labels": [{"id": "a"}]}, "labels[0].label"),
        ({"labels": [{"id": "a", "label": {"v": 1}}]}, "labels[0].label"),
        ({"labels": [{"id": "a", "lable": 1}]}, "labels[0].lable"),
    ]
    for body, where in cases:
        with pytest.raises(InvalidInput) as caught:
            parse_feedback(body)
        assert caught.value.field == where, body
    with pytest.raises(TooLarge):
        parse_feedback({"labels": [{"id": str(i), "label": 1} for i in range(10_001)]})


def test_prometheus_counts_labels_by_outcome(make: Any) -> None:
    from prometheus_client import REGISTRY

    name = f"prom-model-{time.time_ns()}"
    monitor = make()
    s = spec(name=name)
    monitor.observe(observation(s, scored([0.9, 0.1, 0.8, 0.3]), ["a", "b", "c", "d"]))
    monitor.feedback(s, [FeedbackItem(i, y) for i, y in (("a", 1), ("b", 0), ("c", 0), ("d", 1), ("q", 1))])
    for outcome, want in (("accepted", 4.0), ("unknown", 1.0)):
        got = REGISTRY.get_sample_value("gateway_feedback_labels_total", {"model": name, "outcome": outcome})
        assert got == want
    assert REGISTRY.get_sample_value("gateway_quality_labeled_predictions_total", {"model": name}) == 4.0


def test_the_shadow_runners_challenger_rows_are_taken_as_one_argument(make: Any) -> None:
    monitor = make()
    s, challenger = spec(), spec(version="2")
    monitor.observe(observation(s, scored([0.9, 0.2]), ["a", "b"]))
    rows = ChallengerRows(MODEL, MODEL, "2", challenger, ["a", "b"], scored([0.3, 0.1]), T0)
    monitor.remember_challenger(rows)
    monitor.remember_challenger(rows)  # told twice: remembered once
    monitor.feedback(s, [FeedbackItem("a", 1), FeedbackItem("b", 0)])
    versions = {(v.version, v.role): v for v in monitor.report(s, "1h").versions}
    assert versions[("2", "challenger")].rows == 2
    assert versions[("2", "challenger")].metrics["recall"] == 0.0  # 0.3 < 0.5: the fraud missed
    assert versions[("1", "champion")].metrics["recall"] == 1.0


def test_many_batches_in_one_round_trip_are_kept_as_each_alone(make: Any) -> None:
    """Served batches handed over between two round trips go to the store one group per
    (model, version, champion or challenger), rows in order: labels then pair with every one of
    them, champion and challenger alike, as when each batch had its own round trip."""
    from gateway.evidence import writer as evidence_writer

    monitor = make()
    champion, challenger = spec(version="1"), spec(version="2")
    sent: list[list[Any]] = []
    store_remember = monitor.store.remember

    async def remember(batches: Any) -> None:
        sent.append(list(batches))
        await store_remember(batches)

    monitor.store.remember = remember  # type: ignore[method-assign]
    scores = [0.1 * i for i in range(10)]
    for i in range(10):  # ten one-row batches, alternating with their challenger's answers
        monitor.monitor.observe(observation(champion, scored([scores[i]]), [f"q{i}"]))
        monitor.monitor.remember_challenger(
            ChallengerRows(MODEL, MODEL, "2", challenger, [f"q{i}"], scored([1 - scores[i]]), T0)
        )
    monitor._run(monitor.writer.flush())
    ((first, second),) = sent  # one round trip, two groups
    assert (first.champion, list(first.ids)) == (True, [f"q{i}" for i in range(10)])
    assert (second.champion, list(second.ids)) == (False, [f"q{i}" for i in range(10)])
    assert evidence_writer._merged([first]) == [first]
    result = monitor.feedback(champion, [FeedbackItem(f"q{i}", int(i >= 5)) for i in range(10)])
    assert result.to_dict()["accepted"] == 10
    report = monitor.report(champion, "1h").to_dict()
    assert [(v["version"], v["rows"]) for v in report["versions"]] == [("1", 10), ("2", 10)]
    assert report["versions"][0]["metrics"]["auc"] == pytest.approx(1.0)
    assert report["versions"][1]["metrics"]["auc"] == pytest.approx(0.0)
