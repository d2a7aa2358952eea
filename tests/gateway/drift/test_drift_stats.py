"""Drift counting and statistics (gateway/drift/) on small synthetic data, no servers.

Expected values are computed here independently: PSI by its formula, χ² with
``scipy.stats.chisquare``, the KS bound from the raw samples' CDFs at the edges, bins by counting
edges at or below each value.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from scipy import special
from scipy import stats as sps

from gateway.catalog import Column, ModelSpec, OutputRoles
from gateway.drift.metrics import DriftCollector
from gateway.drift.monitor import DriftMonitor
from gateway.errors import BadRequest
from gateway.observe import Observation
from gateway.responses import Prediction
from gateway.stats import measures as stats
from gateway.stats.counts import Slots, window_seconds
from gateway.stats.measures import Thresholds
from gateway.stats.reference import ReferenceError, parse_reference

COLUMNS = (
    Column("amount", "float32"),
    Column("hour", "int64"),
    Column("channel", "string"),
    Column("vip", "bool"),
)
CHANNELS = ["web", "app", "pos", "phone"]
T0 = 60.0 * 28_333_333  # on a minute boundary (Nov 2023)


def spec(reference: str | None, kind: str = "binary", classes: tuple[Any, ...] = (0, 1)) -> ModelSpec:
    return ModelSpec(
        name="m",
        triton_model="m",
        version="1",
        layout="columns",
        input_name="",
        columns=COLUMNS,
        feature_service="fs",
        entity_keys=(Column("user_id", "int64"),),
        request_fields=("amount", "hour", "channel"),
        kind=kind,  # type: ignore[arg-type]
        classes=classes,
        roles=OutputRoles(probabilities="probabilities"),
        outputs=("probabilities",),
        drift_reference=reference,
    )


def training(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    amount = rng.lognormal(3.0, 1.0, n)
    amount[rng.random(n) < 0.02] = np.nan
    return {
        "amount": amount,
        "hour": rng.integers(0, 24, n),
        "channel": rng.choice(CHANNELS, n, p=[0.5, 0.3, 0.15, 0.05]).astype(object),
        "vip": rng.random(n) < 0.2,
        "score": rng.beta(2, 5, n),
    }


def numeric_ref(name: str, x: np.ndarray) -> dict[str, Any]:
    """docs/drift.md §1, written out: decile edges of the non-null values, bins by edges <= x."""
    finite = x[~np.isnan(x)]
    edges = np.unique(np.quantile(finite, np.arange(1, 10) / 10))
    counts = Counter(int((edges <= v).sum()) for v in finite)
    return {
        "name": name,
        "kind": "numeric",
        "edges": edges.tolist(),
        "counts": [counts.get(i, 0) for i in range(len(edges) + 1)],
        "nulls": int(np.isnan(x).sum()),
    }


def categorical_ref(name: str, values: list[Any], categories: list[Any]) -> dict[str, Any]:
    seen = Counter(values)
    return {
        "name": name,
        "kind": "categorical",
        "categories": categories,
        "counts": [seen[c] for c in categories] + [sum(v for k, v in seen.items() if k not in categories)],
        "nulls": 0,
    }


def reference_json(data: dict[str, np.ndarray]) -> str:
    channels = list(data["channel"])
    return json.dumps(
        {
            "format": 1,
            "rows": len(data["amount"]),
            "source": "test",
            "features": [
                numeric_ref("amount", data["amount"]),
                numeric_ref("hour", data["hour"].astype(np.float64)),
                categorical_ref("channel", channels, ["web", "app", "pos"]),  # "phone" is "other"
                categorical_ref("vip", [bool(v) for v in data["vip"]], [False, True]),
            ],
            "prediction": {**numeric_ref("score", data["score"]), "name": "score"},
        }
    )


def observation(s: ModelSpec, data: dict[str, np.ndarray], at: float = T0) -> Observation:
    n = len(data["amount"])
    inputs = {
        "amount": data["amount"].astype(np.float32).reshape(n, 1),
        "hour": data["hour"].astype(np.int64).reshape(n, 1),
        "channel": data["channel"].reshape(n, 1),
        "vip": data["vip"].astype(np.bool_).reshape(n, 1),
    }
    predictions = [Prediction(False, score=float(v)) for v in data["score"]]
    return Observation(s, "1", inputs, predictions, [{"user_id": 1}] * n, at=at)


def feature(report: Any, name: str) -> Any:
    (version,) = report.versions
    return next(f for f in (*version.features, version.prediction) if f.name == name)


# --- statistics on known distributions -------------------------------------------------------


def test_psi_equals_its_formula():
    p, q = np.array([250, 250, 500]), np.array([100, 50, 50])
    assert stats.psi(p, q) == pytest.approx(0.5 * math.log(2))  # (.25 ln 2) + 0 + (-.25 ln .5)
    # an empty window bin is raised to 1e-4 before the log
    p2, q2 = np.array([50, 50]), np.array([100, 0])
    expected = (1 - 0.5) * math.log(1 / 0.5) + (1e-4 - 0.5) * math.log(1e-4 / 0.5)
    assert stats.psi(p2, q2) == pytest.approx(expected)
    assert stats.psi(p, p * 3) == pytest.approx(0.0, abs=1e-12)


def test_chi_square_equals_scipy_and_the_hand_formula():
    reference = np.array([600, 300, 100])
    window = np.array([50, 30, 20])
    expected = reference / reference.sum() * window.sum()
    want = sps.chisquare(window, expected)
    by_hand = float(((window - expected) ** 2 / expected).sum())
    statistic, p = stats.chi_square(reference, window)
    assert statistic == pytest.approx(want.statistic) == pytest.approx(by_hand)
    assert p == pytest.approx(want.pvalue) == pytest.approx(sps.chi2.sf(by_hand, df=2))


def test_ks_bound_is_the_cdf_gap_at_the_edges_and_below_the_exact_statistic():
    rng = np.random.default_rng(1)
    ref, win = rng.normal(0, 1, 5000), rng.normal(0.3, 1, 800)
    edges = np.unique(np.quantile(ref, np.arange(1, 10) / 10))
    by_edges = max(abs((win < e).mean() - (ref < e).mean()) for e in edges)
    ref_counts = np.bincount([int((edges <= v).sum()) for v in ref], minlength=10)
    win_counts = np.bincount([int((edges <= v).sum()) for v in win], minlength=10)
    d, critical = stats.ks_bound(ref_counts, win_counts)
    assert d == pytest.approx(by_edges)
    assert d <= sps.ks_2samp(ref, win).statistic + 1e-12
    assert critical == pytest.approx(special.kolmogi(0.05) * math.sqrt((5000 + 800) / (5000 * 800)), rel=1e-3)


# --- binning and verdicts through the observer ---------------------------------------------------


def test_binning_equals_an_independent_count():
    data = training(3000, seed=0)
    s = spec(reference_json(data))
    served = training(700, seed=5)
    served["channel"][:7] = ""  # nulls of a string column
    served["channel"][7:20] = "telex"  # unseen: "other"
    monitor = DriftMonitor(clock=lambda: T0)
    monitor.observe(observation(s, served))
    (counts,) = monitor.versions()
    window, rows = counts.slots.window(T0, 60)  # type: ignore[union-attr]
    assert rows == 700
    edges = np.array(json.loads(s.drift_reference or "")["features"][0]["edges"])
    amount = served["amount"].astype(np.float32).astype(np.float64)
    finite = amount[~np.isnan(amount)]
    want_amount = [*np.bincount([int((edges <= v).sum()) for v in finite], minlength=len(edges) + 1)]
    want_amount.append(int(np.isnan(amount).sum()))
    channel = Counter(served["channel"])
    want_channel = [channel["web"], channel["app"], channel["pos"], channel["phone"] + channel["telex"], 7]
    vip = Counter(bool(v) for v in served["vip"])
    offsets = counts.binner.offsets  # type: ignore[union-attr]
    assert window[offsets[0] : offsets[0] + len(want_amount)].tolist() == want_amount
    assert window[offsets[2] : offsets[2] + 5].tolist() == want_channel
    assert window[offsets[3] : offsets[3] + 4].tolist() == [vip[False], vip[True], 0, 0]


def test_traffic_like_the_reference_is_ok_and_a_shifted_feature_alerts_alone():
    data = training(10000, seed=0)
    s = spec(reference_json(data))
    monitor = DriftMonitor(clock=lambda: T0 + 30)
    monitor.observe(observation(s, training(2000, seed=1), at=T0))
    report = monitor.report(s, "5m")
    assert report.verdict == "ok"
    assert all(f.verdict == "ok" and f.psi is not None and f.psi < 0.05 for f in report.versions[0].features)

    shifted = DriftMonitor(clock=lambda: T0 + 30)
    burst = training(2000, seed=2)
    burst["amount"] = burst["amount"] * 3
    shifted.observe(observation(s, burst, at=T0))
    report = shifted.report(s, "5m")
    verdicts = {f.name: f.verdict for f in report.versions[0].features}
    assert verdicts == {"amount": "alert", "hour": "ok", "channel": "ok", "vip": "ok"}
    assert report.verdict == "alert"
    amount = feature(report, "amount")
    assert amount.ks > amount.ks_critical  # the KS bound sees it too
    channel = feature(report, "channel")
    assert channel.chi2_p is not None and channel.chi2_p > 0.001 and channel.ks is None


def test_a_feature_going_missing_online_alerts_and_fewer_nulls_do_not():
    data = training(10000, seed=0)  # amount: 2 % null in training
    s = spec(reference_json(data))

    def report_with(null_share: float) -> Any:
        served = training(2000, seed=4)
        rng = np.random.default_rng(5)
        present = rng.lognormal(3.0, 1.0, 2000)  # the training distribution, no nulls of its own
        served["amount"] = np.where(rng.random(2000) < null_share, np.nan, present)
        monitor = DriftMonitor(clock=lambda: T0 + 30)
        monitor.observe(observation(s, served, at=T0))
        return feature(monitor.report(s, "5m"), "amount")

    gone = report_with(0.30)  # +28 points of nulls: the feature is going missing
    assert gone.verdict == "alert" and gone.psi < 0.1  # the present values are as in training
    assert gone.null_rate_change == pytest.approx(gone.null_rate - 0.02, abs=0.005)
    assert report_with(0.15).verdict == "warn"
    fewer = report_with(0.0)  # none missing online: reported, no alarm
    assert fewer.verdict == "ok" and fewer.null_rate == 0.0 and fewer.null_rate_change < 0


def test_below_min_rows_there_is_no_verdict():
    data = training(5000)
    s = spec(reference_json(data))
    monitor = DriftMonitor(thresholds=Thresholds(min_rows=500), clock=lambda: T0)
    burst = training(499, seed=3)
    burst["amount"] *= 3
    monitor.observe(observation(s, burst))
    report = monitor.report(s, "1h")
    assert report.verdict == "insufficient"
    assert feature(report, "amount").psi > 0.2  # computed, but not a verdict on 499 rows


def test_windows_are_sums_of_minute_slots_and_roll_over():
    data = training(3000)
    s = spec(reference_json(data))
    now = [T0]
    monitor = DriftMonitor(thresholds=Thresholds(min_rows=1), clock=lambda: now[0])
    monitor.observe(observation(s, training(100, seed=1), at=T0))  # minute 0
    monitor.observe(observation(s, training(50, seed=2), at=T0 + 4 * 60 + 59))  # minute 4
    now[0] = T0 + 4 * 60 + 59
    assert monitor.report(s, "5m").versions[0].rows == 150
    assert monitor.report(s, "1m").versions[0].rows == 50
    now[0] = T0 + 5 * 60  # minute 5: minute 0 left the 5m window
    assert monitor.report(s, "5m").versions[0].rows == 50
    assert monitor.report(s, "1h").versions[0].rows == 150
    now[0] = T0 + 24 * 3600 + 3 * 60  # minute 1443: the day back to minute 4, not minute 0
    assert monitor.report(s, "24h").versions[0].rows == 50
    now[0] += 60  # minute 1444 reuses minute 4's ring entry
    monitor.observe(observation(s, training(10, seed=3), at=now[0]))
    assert monitor.report(s, "24h").versions[0].rows == 10
    (counts,) = monitor.versions()
    assert monitor.totals(counts)[1] == 160  # the counters never forget


def test_slots_ignore_a_batch_older_than_the_ring_in_windows():
    slots = Slots(2, slot_s=60, keep=3)
    slots.add(600.0, np.array([1, 0]), 1)
    slots.add(600.0 - 3 * 60, np.array([0, 1]), 1)  # same ring entry, three slots older
    assert slots.window(600.0, 180)[1] == 1 and slots.total_rows == 2


def test_sampling_counts_about_the_share():
    data = training(3000)
    s = spec(reference_json(data))
    monitor = DriftMonitor(sample=0.3, clock=lambda: T0, seed=7)
    for i in range(10):
        monitor.observe(observation(s, training(1000, seed=10 + i)))
    rows = monitor.report(s, "1h").versions[0].rows
    assert abs(rows - 3000) < 4 * math.sqrt(10000 * 0.3 * 0.7)  # binomial, 4 sigma


def test_a_malformed_reference_turns_drift_off_with_one_warning(caplog: pytest.LogCaptureFixture):
    raw = json.loads(reference_json(training(500)))
    raw["features"][0]["counts"] = raw["features"][0]["counts"][:-1]
    s = spec(json.dumps(raw))
    monitor = DriftMonitor(clock=lambda: T0)
    with caplog.at_level(logging.WARNING, logger="gateway"):
        for _ in range(3):
            monitor.observe(observation(s, training(20)))
    warnings = [r for r in caplog.records if "drift is off" in r.getMessage()]
    assert len(warnings) == 1 and "'amount'" in warnings[0].getMessage()
    report = monitor.report(s, "1h")
    assert report.verdict == "off" and "unusable" in report.versions[0].reason
    assert (
        DriftMonitor().report(spec(None), "1h").versions[0].reason.startswith("the version's export has no")
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda r: r.update(format=2), "format"),
        (lambda r: r["features"].pop(), "model's columns"),
        (lambda r: r["features"][2].update(kind="numeric"), "kind"),
        (lambda r: r["features"][0]["edges"].reverse(), "ascending"),
        (lambda r: r.update(prediction=None), "prediction"),
    ],
)
def test_reference_checks_say_why(change: Any, why: str):
    raw = json.loads(reference_json(training(500)))
    change(raw)
    with pytest.raises(ReferenceError, match=why):
        parse_reference(json.dumps(raw), spec(None))
    with pytest.raises(ReferenceError, match="JSON"):
        parse_reference("{", spec(None))


def test_multiclass_prediction_is_counted_by_label():
    data = training(1000)
    raw = json.loads(reference_json(data))
    raw["prediction"] = {"name": "label", "kind": "categorical", "categories": ["a", "b", "c"],
                         "counts": [500, 300, 200, 0], "nulls": 0}  # fmt: skip
    s = spec(json.dumps(raw), kind="multiclass", classes=("a", "b", "c"))
    served = observation(s, training(600, seed=1))
    labels = ["a"] * 100 + ["b"] * 200 + ["c"] * 300
    served = Observation(s, "1", served.inputs, [Prediction(False, label=v) for v in labels], [], at=T0)
    monitor = DriftMonitor(clock=lambda: T0)
    monitor.observe(served)
    label = feature(monitor.report(s, "1h"), "label")
    want = sps.chisquare([100, 200, 300], np.array([0.5, 0.3, 0.2]) * 600)
    assert label.chi2 == pytest.approx(want.statistic) and label.verdict == "alert"


@pytest.mark.parametrize("text", ["", "1", "0m", "30s", "25h", "2d", "1 h", "-1h", "1.5h"])
def test_bad_windows_are_a_400(text: str):
    with pytest.raises(BadRequest, match="window"):
        window_seconds(text)


def test_windows_parse():
    assert [window_seconds(w) for w in ("1m", "5m", "1h", "24h", "1d")] == [60, 300, 3600, 86400, 86400]


def test_metrics_are_named_as_docs_drift_md_says():
    data = training(3000)
    s = spec(reference_json(data))
    monitor = DriftMonitor(thresholds=Thresholds(min_rows=100), clock=lambda: T0)
    burst = training(400, seed=4)
    burst["amount"] *= 3
    monitor.observe(observation(s, burst))
    registry = CollectorRegistry()
    registry.register(DriftCollector(monitor))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert {"gateway_drift_rows", "gateway_drift_bin", "gateway_drift_psi", "gateway_drift_status"} <= set(
        families
    )
    (rows,) = families["gateway_drift_rows"].samples
    assert rows.name == "gateway_drift_rows_total" and rows.value == 400
    assert rows.labels == {"model": "m", "version": "1"}
    bins = [b for b in families["gateway_drift_bin"].samples if b.labels["feature"] == "channel"]
    assert sum(b.value for b in bins) == 400
    assert {b.labels["bin"] for b in bins} == {"0", "1", "2", "other", "null"}
    status = {x.labels["feature"]: x.value for x in families["gateway_drift_status"].samples}
    assert status["amount"] == 2 and status["channel"] == 0 and "__prediction__" in status
    assert {x.labels["window"] for x in families["gateway_drift_psi"].samples} == {"1h"}
    # the reference's shares per non-null bin, what the chart's recording rules compute PSI against
    shares = [
        x for x in families["gateway_drift_reference_share"].samples if x.labels["feature"] == "channel"
    ]
    assert {x.labels["bin"] for x in shares} == {"0", "1", "2", "other"}
    assert sum(x.value for x in shares) == pytest.approx(1.0)
    with pytest.raises(ValueError):  # a second collector of the same names is refused
        registry.register(DriftCollector(monitor))


def test_the_matrix_layout_counts_as_the_columns_layout():
    from dataclasses import replace

    data = training(2000)
    raw = json.loads(reference_json(data))
    raw["features"] = [f for f in raw["features"] if f["kind"] == "numeric"]  # matrix: float32 only
    numeric = (Column("amount", "float32"), Column("hour", "float32"))
    columns = replace(spec(json.dumps(raw)), columns=numeric, request_fields=("amount", "hour"))
    matrix = replace(columns, layout="matrix", input_name="x")
    served = training(300, seed=9)
    x = np.stack([served["amount"], served["hour"]], axis=1).astype(np.float32)
    scores = [Prediction(False, score=float(v)) for v in served["score"]]
    counted = []
    for s, inputs in ((columns, {"amount": x[:, :1], "hour": x[:, 1:]}), (matrix, {"x": x})):
        monitor = DriftMonitor(clock=lambda: T0)
        monitor.observe(Observation(s, "1", inputs, scores, [], at=T0))
        (counts,) = monitor.versions()
        counted.append(counts.slots.window(T0, 60)[0].tolist())  # type: ignore[union-attr]
    assert counted[0] == counted[1] and sum(counted[0]) == 3 * 300


@pytest.mark.parametrize("dof", [1, 2, 3, 7, 30, 199, 1000])
def test_the_chi_square_p_value_equals_scipy_s_without_scipy(dof: int) -> None:
    """The serving image has no scipy: measures.chi2_sf stands in for scipy.special.chdtrc, on
    both sides of its switch between the series and the continued fraction (x/2 = dof/2 + 1)."""
    from gateway.stats.measures import chi2_sf

    xs = [0.0, 1e-6, 0.5, dof / 2, dof, dof + 2, dof + 2.0001, 2 * dof + 5, 5 * dof + 40, math.inf]
    got = [chi2_sf(dof, x) for x in xs]
    np.testing.assert_allclose(got, sps.chi2.sf(xs, dof), rtol=1e-10, atol=1e-300)


def _one_row_batches(data: dict[str, np.ndarray], size: int) -> list[dict[str, np.ndarray]]:
    n = len(data["amount"])
    return [{k: v[i : i + size] for k, v in data.items()} for i in range(0, n, size)]


def test_batches_counted_later_together_count_as_each_did_at_once():
    """On a running loop the monitor keeps served batches and counts them together (after
    FLUSH_S, or FLUSH_ROWS rows); a report, the totals and a scrape count what waits first, so
    every reader sees the same counts as when each batch was counted as it came."""
    import asyncio

    from gateway.drift import monitor as drift_monitor

    data = training(3000, seed=0)
    s = spec(reference_json(data))
    served = training(300, seed=9)
    at_once = DriftMonitor(clock=lambda: T0 + 90)
    for i, part in enumerate(_one_row_batches(served, 1)):
        at_once.observe(observation(s, part, at=T0 + (30 if i < 200 else 70)))  # two minutes

    async def later() -> tuple[Any, Any, int, Any]:
        monitor = DriftMonitor(clock=lambda: T0 + 90)
        for i, part in enumerate(_one_row_batches(served, 1)):
            monitor.observe(observation(s, part, at=T0 + (30 if i < 200 else 70)))
        waiting = monitor._waiting_rows  # under FLUSH_ROWS: nothing counted yet
        report = monitor.report(s, "1m")  # ... until a reader asks
        (counts,) = monitor.versions()
        return report, monitor.totals(counts), waiting, counts

    report, (total, rows), waiting, counts = asyncio.run(later())
    assert 0 < waiting < drift_monitor.FLUSH_ROWS
    (want_counts,) = at_once.versions()
    want_total, want_rows = at_once.totals(want_counts)
    assert rows == want_rows == 300 and total.tolist() == want_total.tolist()
    assert report.to_dict() == at_once.report(s, "1m").to_dict()  # the last minute: 100 rows
    assert report.versions[0].rows == 100
    for minute in (T0, T0 + 60):  # each batch in the minute it was served
        got = counts.slots.window(minute + 59, 60)
        want = want_counts.slots.window(minute + 59, 60)
        assert got[1] == want[1] and got[0].tolist() == want[0].tolist()


def test_a_scrape_counts_the_waiting_batches_and_many_rows_are_counted_at_once():
    import asyncio

    from gateway.drift import monitor as drift_monitor

    data = training(3000, seed=0)
    s = spec(reference_json(data))

    async def main() -> tuple[int, str]:
        monitor = DriftMonitor(clock=lambda: T0)
        monitor.observe(observation(s, training(drift_monitor.FLUSH_ROWS, seed=3)))
        counted_at_once = monitor._waiting_rows  # FLUSH_ROWS rows: counted without waiting
        monitor.observe(observation(s, training(5, seed=4)))
        registry = CollectorRegistry()
        registry.register(DriftCollector(monitor))
        return counted_at_once, generate_latest(registry).decode()

    counted_at_once, text = asyncio.run(main())
    assert counted_at_once == 0
    rows = next(f for f in text_string_to_metric_families(text) if f.name == "gateway_drift_rows")
    assert rows.samples[0].value == drift_monitor.FLUSH_ROWS + 5
