"""The chart's PrometheusRule evaluated by Prometheus itself: `promtool check rules` on the rules
the chart renders, and `promtool test rules` unit tests (synthetic series, the labels Prometheus
Operator's ServiceMonitors give) showing each alert fire when it should and stay quiet when it
should not, and the drift recording rules giving one verdict over every gateway replica.

promtool compares alert annotations verbatim; the unit tests run on a copy of the rules without
them (their templates are checked by `promtool check rules` on the full file).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import yaml

from gateway.stats.measures import psi as gateway_psi
from tests.helm.helpers import (
    counter,
    evaluates,
    firing,
    gauge,
    replica,
    replica_common,
    rounded,
    run_promtool,
)

MODEL, VERSION = "fraud-detector", "2"
RECORDED_PSI = "triton_stack:gateway_drift_psi:1h"
# What the chart's drift alert read before the recording rules: the worst replica's own gauge.
PER_REPLICA_VERDICT = (
    "max by (model, version, feature) ("
    'gateway_drift_psi{window="1h"} > 0.2 and gateway_drift_status{window="1h"} >= 0)'
)


# --- checks -------------------------------------------------------------------------------------


def test_promtool_accepts_every_rule_the_chart_ships(promtool: str, rule_files: dict[str, Path]) -> None:
    done = subprocess.run(
        [promtool, "check", "rules", str(rule_files["full"])], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    groups = yaml.safe_load(rule_files["full"].read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout, done.stdout
    alerts = {r["alert"] for r in rules if "alert" in r}
    # each of them has a unit test below, or in test_fallback_alerts.py
    assert alerts == {
        "TritonStackModelDrift",
        "TritonStackModelDriftWarning",
        "TritonStackGatewayLatencyHigh",
        "TritonStackGatewayErrorRateHigh",
        "TritonStackTritonQueueTimeHigh",
        # test_fallback_alerts.py
        "TritonStackGatewayLabelsUnmatched",
        "TritonStackGatewayQualityNearThreshold",
        "TritonStackGatewayEvidenceLost",
        "TritonStackGatewayFallbackActive",
    }
    assert {r["record"] for r in rules if "record" in r} == {
        "triton_stack:gateway_drift_bin:increase1h",
        "triton_stack:gateway_drift_rows:increase1h",
        "triton_stack:gateway_drift_share:1h",
        RECORDED_PSI,
    }


# --- serving alerts -----------------------------------------------------------------------------

BUCKETS = ("0.005", "0.01", "0.025", "0.05", "0.1", "+Inf")


def latency(
    target: dict[str, str], route: str, in_bucket: str, per_minute: float, pod: int
) -> list[dict[str, str]]:
    """gateway_request_seconds for `per_minute` requests a minute, all in the bucket ending at
    `in_bucket` (cumulative buckets)."""
    labels = {**replica(target, pod), "model": MODEL, "route": route, "status": "200"}
    out = []
    for le in BUCKETS:
        cumulative = per_minute if BUCKETS.index(le) >= BUCKETS.index(in_bucket) else 0
        out.append(counter({**labels, "le": le}, "gateway_request_seconds_bucket", cumulative))
    out.append(counter(labels, "gateway_request_seconds_count", per_minute))
    return out


def test_gateway_latency_fires_on_slow_predicts_only(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    gw = targets["gateway"]
    tests = [
        {
            "name": "predict p99 at ~50 ms on two replicas, HTTP and gRPC: fires after 10 m",
            "interval": "1m",
            "input_series": [
                *latency(gw, "predict", "0.05", 60, pod=0),
                *latency(gw, "grpc_predict", "0.05", 60, pod=1),
            ],
            "alert_rule_test": [
                firing("TritonStackGatewayLatencyHigh", "8m"),  # pending: not 10 m yet
                firing("TritonStackGatewayLatencyHigh", "30m", {"model": MODEL, "severity": "warning"}),
            ],
            "promql_expr_test": [
                evaluates(
                    "round(histogram_quantile(0.99, sum by (le, model) "
                    "(rate(gateway_request_seconds_bucket[5m]))), 0.0001)",
                    "30m",
                    ({"model": MODEL}, 0.0498),
                )
            ],
        },
        {
            "name": "fast predicts, and slow routes that are not predict (metrics, health): quiet",
            "interval": "1m",
            "input_series": [
                *latency(gw, "predict", "0.01", 600, pod=0),
                *latency(gw, "metrics", "+Inf", 60, pod=0),
            ],
            "alert_rule_test": [firing("TritonStackGatewayLatencyHigh", "60m")],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


def test_gateway_error_rate_fires_on_the_stacks_errors_not_the_callers(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    gw = targets["gateway"]

    def requests(pod: int, per_minute: float) -> dict[str, str]:
        labels = {**replica(gw, pod), "model": MODEL, "route": "predict", "status": "200"}
        return counter(labels, "gateway_request_seconds_count", per_minute)

    def errors(pod: int, cause: str, per_minute: float) -> dict[str, str]:
        return counter({**replica(gw, pod), "cause": cause}, "gateway_errors_total", per_minute)

    tests = [
        {
            "name": "Triton unavailable on one replica of two: 3% of all predicts, fires after 10 m",
            "interval": "1m",
            "input_series": [requests(0, 100), requests(1, 100), errors(1, "triton_unavailable", 6)],
            "alert_rule_test": [
                firing("TritonStackGatewayErrorRateHigh", "9m"),
                firing("TritonStackGatewayErrorRateHigh", "30m", {"severity": "critical"}),
            ],
        },
        {
            "name": "callers' mistakes (20%) and a trickle of internal errors (0.5%): quiet",
            "interval": "1m",
            "input_series": [
                requests(0, 200),
                errors(0, "bad_request", 40),
                errors(0, "unknown_entity", 40),
                errors(0, "internal", 1),
            ],
            "alert_rule_test": [firing("TritonStackGatewayErrorRateHigh", "60m")],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


def test_triton_queue_time_fires_per_model_version(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    triton = targets["triton"]

    def model(version: str, queue_us_per_request: float, pod: int) -> list[dict[str, str]]:
        labels = {**replica(triton, pod, 8002), "model": MODEL, "version": version}
        return [
            counter(labels, "nv_inference_request_success", 60),
            counter(labels, "nv_inference_queue_duration_us", 60 * queue_us_per_request),
        ]

    tests = [
        {
            "name": "version 2 queues 20 ms a request on both pods, version 1 2 ms: version 2 fires",
            "interval": "1m",
            "input_series": [*model("2", 20_000, 0), *model("2", 20_000, 1), *model("1", 2_000, 0)],
            "alert_rule_test": [
                firing("TritonStackTritonQueueTimeHigh", "9m"),
                firing(
                    "TritonStackTritonQueueTimeHigh",
                    "30m",
                    {"model": MODEL, "version": "2", "severity": "warning"},
                ),
            ],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


# --- drift across replicas ----------------------------------------------------------------------


def drift_series(
    gw: dict[str, str],
    reference: dict[str, list[int]],
    per_replica: dict[str, list[list[int]]],
) -> tuple[list[dict[str, str]], dict[str, list[float]]]:
    """Every replica's counters (rows per minute per bin, the null bin last) and the reference
    gauges, plus the gauges each replica's own gateway would export for its last hour (PSI by
    the gateway's own function, status -1 under the 500-row minimum); returns them with each
    replica's own PSI per feature."""
    out: list[dict[str, str]] = []
    own_psi: dict[str, list[float]] = {}
    for feature, replicas in per_replica.items():
        ref = np.array(reference[feature], dtype=np.float64)
        for pod, minute in enumerate(replicas):
            target = {**replica(gw, pod), "model": MODEL, "version": VERSION, "feature": feature}
            *present, nulls = minute
            for i, count in enumerate(present):
                out.append(counter({**target, "bin": str(i)}, "gateway_drift_bin_total", count))
                out.append(
                    gauge({**target, "bin": str(i)}, "gateway_drift_reference_share", ref[i] / ref.sum())
                )
            out.append(counter({**target, "bin": "null"}, "gateway_drift_bin_total", nulls))
            hour = np.array(present, dtype=np.float64) * 60
            value = gateway_psi(ref, hour)
            own_psi.setdefault(feature, []).append(value)
            rows = sum(minute) * 60
            status = -1 if rows < 500 else 2 if value >= 0.2 else 1 if value >= 0.1 else 0
            out.append(gauge({**target, "window": "1h"}, "gateway_drift_psi", value))
            out.append(gauge({**target, "window": "1h"}, "gateway_drift_status", status))
    return out, own_psi


def summed_psi(reference: list[int], replicas: list[list[int]]) -> float:
    total = np.sum([r[:-1] for r in replicas], axis=0)
    return gateway_psi(np.array(reference, dtype=np.float64), total.astype(np.float64))


def feature_labels(feature: str, **extra: str) -> dict[str, str]:
    return {"model": MODEL, "version": VERSION, "feature": feature, **extra}


def test_drift_summed_over_replicas_alerts_where_no_replica_has_enough_rows(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    """Three replicas, 8 rows a minute each: 480 rows an hour, under the 500-row minimum, so each
    replica's own verdict is "insufficient" forever (ten replicas at the same total would be worse),
    while all of them together have 1,440 rows and a clear shift."""
    gw = targets["gateway"]
    reference = {"amount": [1, 1, 1, 1], "hour": [1, 1, 1, 1], "channel": [1, 1, 1, 1]}
    per_replica = {  # rows a minute per bin, the null bin last
        "amount": [[5, 1, 1, 1, 0], [4, 2, 1, 1, 0], [5, 1, 1, 1, 0]],  # summed PSI ~0.49: alert
        "hour": [[4, 2, 1, 1, 0], [3, 2, 2, 1, 0], [3, 2, 2, 1, 0]],  # summed PSI ~0.18: warn
        "channel": [[2, 2, 2, 1, 1], [2, 2, 2, 2, 0], [2, 2, 2, 2, 0]],  # ~0: quiet
    }
    inputs, _ = drift_series(gw, reference, per_replica)
    expected = {f: summed_psi(reference[f], per_replica[f]) for f in per_replica}
    assert expected["amount"] >= 0.2 and 0.1 <= expected["hour"] < 0.2 and expected["channel"] < 0.01
    summed = replica_common(gw)
    tests = [
        {
            "name": "three replicas under the minimum each, drifted together",
            "interval": "1m",
            "input_series": inputs,
            "promql_expr_test": [
                # the recording rule's PSI is the gateway's PSI of the summed counts
                evaluates(
                    f"round({RECORDED_PSI}, 0.001)",
                    "2h",
                    *[({**summed, **feature_labels(f)}, rounded(v)) for f, v in sorted(expected.items())],
                ),
                evaluates(
                    'triton_stack:gateway_drift_rows:increase1h{feature="amount"} + 0',
                    "2h",
                    ({**summed, **feature_labels("amount")}, 1440),
                ),
                # each replica alone: 480 rows an hour, no verdict; the old per-replica rule is silent
                evaluates(
                    "sum by (model, version, feature, pod) "
                    '(increase(gateway_drift_bin_total{feature="amount"}[1h]))',
                    "2h",
                    *[
                        ({**feature_labels("amount"), "pod": replica(gw, pod)["pod"]}, 480)
                        for pod in range(3)
                    ],
                ),
                evaluates(PER_REPLICA_VERDICT, "2h"),
            ],
            "alert_rule_test": [
                firing("TritonStackModelDrift", "20m"),  # pending
                firing("TritonStackModelDrift", "2h", {**feature_labels("amount"), "severity": "warning"}),
                firing(
                    "TritonStackModelDriftWarning",
                    "2h30m",
                    {**feature_labels("amount"), "severity": "info"},
                    {**feature_labels("hour"), "severity": "info"},
                ),
            ],
        },
        {
            "name": "the same shift at a third of the traffic: 480 rows in all, no verdict",
            "interval": "1m",
            "input_series": drift_series(
                gw, reference, {"amount": [[2, 0, 0, 1, 0], [1, 1, 0, 0, 0], [2, 0, 0, 1, 0]]}
            )[0],
            "alert_rule_test": [
                firing("TritonStackModelDrift", "2h30m"),
                firing("TritonStackModelDriftWarning", "2h30m"),
            ],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


def test_drift_summed_over_replicas_stays_quiet_where_each_replica_is_skewed(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    """Sticky routing (a load balancer hashing on the client) gives each replica a skewed slice,
    600 rows an hour each: every replica alone sees PSI ~0.29 with enough rows for a verdict, and
    the old per-replica rule alerts, though the traffic as a whole is exactly the reference's."""
    gw = targets["gateway"]
    reference = {"amount": [1, 1, 1]}
    per_replica = {"amount": [[6, 2, 2, 0], [2, 6, 2, 0], [2, 2, 6, 0]]}
    inputs, own = drift_series(gw, reference, per_replica)
    assert all(v >= 0.2 for v in own["amount"]), own
    assert summed_psi(reference["amount"], per_replica["amount"]) < 1e-9
    tests = [
        {
            "name": "three skewed replicas, unshifted together",
            "interval": "1m",
            "input_series": inputs,
            "promql_expr_test": [
                evaluates(
                    f"round({RECORDED_PSI}, 0.001)",
                    "2h",
                    ({**replica_common(gw), **feature_labels("amount")}, 0),
                ),
                # what the worst replica alone said
                evaluates(
                    f"round({PER_REPLICA_VERDICT}, 0.001)",
                    "2h",
                    (feature_labels("amount"), rounded(max(own["amount"]))),
                ),
            ],
            "alert_rule_test": [
                firing("TritonStackModelDrift", "2h30m"),
                firing("TritonStackModelDriftWarning", "2h30m"),
            ],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)
