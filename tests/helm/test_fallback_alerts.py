"""The automatic fallback's alerts, in three levels, evaluated by promtool over three gateway
replicas: info (labels that match no remembered prediction), warning (a champion near its
switch; evidence the shared store did not take), critical (a model served by its fallback).

The fallback gauges come from the shared store, so every replica exports the same value: one
alert per model, never one per replica, and never a sum of three copies. The counters are each
replica's own: summed. Series carry the target labels a ServiceMonitor gives each pod.
Then the rules as rendered: the levels, the way back from a switch in the critical alert's text,
and the metric names, types and labels against the gateway's own collectors.
"""

from __future__ import annotations

from pathlib import Path

import promql_parser
import pytest
from helm_python import Chart

from tests.helm.helpers import (
    BASE,
    FALLBACK_METRICS,
    NAMESPACE,
    REPO_ROOT,
    STEPS,
    counter,
    evaluates,
    firing,
    gateway_collectors,
    render,
    replica,
    run_promtool,
    series,
)

PODS = (0, 1, 2)
FRAUD, CHURN, SPAM, ADS = "fraud-detector", "churn", "spam", "ads"


def every_replica(gw: dict[str, str], name: str, labels: dict[str, str], values: str) -> list[dict[str, str]]:
    """A gauge every replica exports with the same values (it reads them from the shared store)."""
    return [series(name, {**replica(gw, pod), **labels}, values) for pod in PODS]


def steady(value: float) -> str:
    return f"{value!r}x{STEPS}"


def then(before: float, minutes: int, after: float) -> str:
    """`before` for the first `minutes` minutes, `after` from then on."""
    return f"{before!r}x{minutes - 1} {after!r}x{STEPS - minutes}"


def fallback_state(
    gw: dict[str, str], model: str, margin: str, rows: float, active: str = "0x180", metric: str = "auc"
) -> list[dict[str, str]]:
    """What each replica exports for one model's fallback rule."""
    return [
        *every_replica(gw, "gateway_fallback_margin", {"model": model, "metric": metric}, margin),
        *every_replica(gw, "gateway_fallback_labeled_rows", {"model": model}, steady(rows)),
        *every_replica(gw, "gateway_fallback_active", {"model": model, "fallback": f"{model}:1"}, active),
    ]


def test_a_model_served_by_its_fallback_pages_once_not_once_per_replica(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    gw = targets["gateway"]
    switched = f"0x29 1x{STEPS - 30}"  # the switch at minute 30, seen by every replica
    tests = [
        {
            "name": "three replicas report the switch: one critical alert, with the fallback named",
            "interval": "1m",
            "input_series": [
                *every_replica(
                    gw, "gateway_fallback_active", {"model": FRAUD, "fallback": f"{FRAUD}:1"}, switched
                ),
                *every_replica(
                    gw, "gateway_fallback_active", {"model": CHURN, "fallback": "churn-v0:3"}, "0x180"
                ),
            ],
            "alert_rule_test": [
                firing("TritonStackGatewayFallbackActive", "29m"),
                firing(
                    "TritonStackGatewayFallbackActive",
                    "31m",
                    {"model": FRAUD, "fallback": f"{FRAUD}:1", "severity": "critical"},
                ),
                firing(
                    "TritonStackGatewayFallbackActive",
                    "2h",
                    {"model": FRAUD, "fallback": f"{FRAUD}:1", "severity": "critical"},
                ),
            ],
            "promql_expr_test": [
                # what a sum over the replicas would have read
                evaluates(f'sum(gateway_fallback_active{{model="{FRAUD}"}})', "31m", ({}, 3)),
            ],
        },
        {
            "name": "switched, then reset (`gateway fallback reset`): the alert resolves",
            "interval": "1m",
            "input_series": every_replica(
                gw,
                "gateway_fallback_active",
                {"model": FRAUD, "fallback": "other-model:3"},
                "0x29 1x30 0x120",
            ),
            "alert_rule_test": [
                firing(
                    "TritonStackGatewayFallbackActive",
                    "45m",
                    {"model": FRAUD, "fallback": "other-model:3", "severity": "critical"},
                ),
                firing("TritonStackGatewayFallbackActive", "61m"),
            ],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


def test_quality_near_the_threshold_warns_on_enough_labels_before_the_switch(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    """Default warn margin 0.02, on at least 200 labeled rows, for 10 minutes."""
    gw = targets["gateway"]
    # just above 0.02: swinging, then an hour at 0.0201
    hovering = " ".join("0.0205" if i % 2 else "0.025" for i in range(60)) + f" 0.0201x{STEPS - 60}"
    dip = f"0.05x29 0.01x4 0.05x{STEPS - 34}"  # 5 minutes under the margin, then back
    tests = [
        {
            "name": "fraud closes in on its threshold; churn hovers just above the margin; spam has "
            "too few labels; a dip shorter than `for`; ads already switched",
            "interval": "1m",
            "input_series": [
                *fallback_state(gw, FRAUD, then(0.05, 30, 0.015), rows=500),
                *fallback_state(gw, CHURN, hovering, rows=5000, metric="log_loss"),
                *fallback_state(gw, SPAM, steady(0.005), rows=150),
                *fallback_state(gw, ADS, steady(-0.03), rows=1000, active=f"1x{STEPS}"),
                *fallback_state(gw, "dip", dip, rows=800),
            ],
            "alert_rule_test": [
                firing("TritonStackGatewayQualityNearThreshold", "35m"),  # pending: not 10 m yet
                firing(
                    "TritonStackGatewayQualityNearThreshold",
                    "45m",
                    {"model": FRAUD, "metric": "auc", "severity": "warning"},
                ),
                firing(
                    "TritonStackGatewayQualityNearThreshold",
                    "1h30m",
                    {"model": FRAUD, "metric": "auc", "severity": "warning"},
                ),
                firing(
                    "TritonStackGatewayQualityNearThreshold",
                    "2h30m",
                    {"model": FRAUD, "metric": "auc", "severity": "warning"},
                ),
                # the model served by its fallback pages at the critical level instead
                firing(
                    "TritonStackGatewayFallbackActive",
                    "2h30m",
                    {"model": ADS, "fallback": f"{ADS}:1", "severity": "critical"},
                ),
            ],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


def test_evidence_the_shared_store_did_not_take_warns_per_model_and_kind(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    """Redis is unreachable from minute 21 to 25: two replicas lose predictions, one a
    challenger's answers. One warning per (model, what), whichever replicas lost them; quiet
    once writes go through."""
    gw = targets["gateway"]
    outage = f"0x20 5+5x4 25x{STEPS - 25}"  # 5 lost writes a minute for 5 minutes, then none

    def lost(pod: int, what: str, values: str, model: str = FRAUD) -> dict[str, str]:
        labels = {**replica(gw, pod), "model": model, "what": what}
        return series("gateway_evidence_lost_total", labels, values)

    tests = [
        {
            "name": "a five-minute outage",
            "interval": "1m",
            "input_series": [
                lost(0, "prediction", f"0x{STEPS}"),
                lost(1, "prediction", outage),
                lost(2, "prediction", outage),
                lost(0, "challenger", outage),
                lost(1, "challenger", f"0x{STEPS}"),
                lost(0, "shadow", f"0x{STEPS}"),
                lost(0, "prediction", f"0x{STEPS}", model=CHURN),
            ],
            "alert_rule_test": [
                firing("TritonStackGatewayEvidenceLost", "20m"),
                firing(
                    "TritonStackGatewayEvidenceLost",
                    "24m",
                    {"model": FRAUD, "what": "challenger", "severity": "warning"},
                    {"model": FRAUD, "what": "prediction", "severity": "warning"},
                ),
                firing("TritonStackGatewayEvidenceLost", "1h"),
            ],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


def test_labels_that_match_no_remembered_prediction_inform(
    promtool: str, rule_files: dict[str, Path], targets: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    """Labels are posted to whichever replica the load balancer picks; each counts its own.
    Default: over 30 m, (unknown + expired) / all > 0.2 on at least 100 labels, for 15 m."""
    gw = targets["gateway"]

    def labels(model: str, pod: int, outcome: str, per_minute: float) -> dict[str, str]:
        target = {**replica(gw, pod), "model": model, "outcome": outcome}
        return counter(target, "gateway_feedback_labels_total", per_minute)

    tests = [
        {
            "name": "fraud: a feed with stale and unknown ids; churn: a few; spam: a trickle, all unknown",
            "interval": "1m",
            "input_series": [
                *[labels(FRAUD, pod, "accepted", 10) for pod in PODS],
                *[labels(FRAUD, pod, "unknown", 2) for pod in PODS],
                *[labels(FRAUD, pod, "expired", 2) for pod in PODS],
                *[labels(FRAUD, pod, "duplicate", 1) for pod in PODS],
                *[labels(CHURN, pod, "accepted", 9) for pod in PODS],
                labels(CHURN, 1, "unknown", 1),
                labels(SPAM, 2, "unknown", 0.05),
            ],
            "promql_expr_test": [
                # the share summed over the replicas: 12 of 45 labels a minute
                evaluates(
                    'round(sum by (model) (increase(gateway_feedback_labels_total{outcome=~"unknown|expired"}'
                    "[30m])) / sum by (model) (increase(gateway_feedback_labels_total[30m])), 0.001)",
                    "1h",
                    ({"model": CHURN}, 0.036),
                    ({"model": FRAUD}, 0.267),
                    ({"model": SPAM}, 1),
                ),
            ],
            "alert_rule_test": [
                firing("TritonStackGatewayLabelsUnmatched", "10m"),  # pending
                firing("TritonStackGatewayLabelsUnmatched", "1h", {"model": FRAUD, "severity": "info"}),
            ],
        },
    ]
    run_promtool(promtool, rule_files["bare"], tests, tmp_path)


# --- the rules as rendered ----------------------------------------------------------------------


def aggregations(expr: promql_parser.Expr) -> list[str]:
    """The aggregation operators an expression uses (sum, max, ...)."""
    found: list[str] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.AggregateExpr):
            found.append(str(node.op))

    promql_parser.walk(expr, visit)
    return found


def test_the_fallback_alerts_come_in_three_levels_and_say_how_to_reverse_the_switch(chart: Chart) -> None:
    release = render(chart, "fallback-alerts", BASE)
    (rule,) = release.all("PrometheusRule")
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    levels = {
        "TritonStackGatewayLabelsUnmatched": "info",
        "TritonStackGatewayQualityNearThreshold": "warning",
        "TritonStackGatewayEvidenceLost": "warning",
        "TritonStackGatewayFallbackActive": "critical",
    }
    assert {name: rules[name]["labels"]["severity"] for name in levels} == levels
    service = release.one("Service", "gateway")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    url = f"http://{service['metadata']['name']}.{NAMESPACE}.svc:{port}"
    active = " ".join(rules["TritonStackGatewayFallbackActive"]["annotations"]["description"].split())
    assert f"`gateway fallback reset {{{{ $labels.model }}}} --url {url}`" in active
    assert "/v1/models/{{ $labels.model }}/fallback" in active
    assert "/v1/models/{{ $labels.model }}/quality" in active
    # the gauges come from the shared store, the same on every replica: max, never sum
    for name in ("TritonStackGatewayQualityNearThreshold", "TritonStackGatewayFallbackActive"):
        used = aggregations(promql_parser.parse(rules[name]["expr"]))
        assert used and set(used) == {"max"}, (name, used)


def test_the_fallback_alerts_read_metrics_the_gateway_exports() -> None:
    """FALLBACK_METRICS against gateway/: every name spelled there, with its type and labels where
    a module-level collector defines it (skipped until the gateway spells any of them)."""
    source = "\n".join(p.read_text() for p in (REPO_ROOT / "gateway").rglob("*.py"))
    families = {name: name.removesuffix("_total") for name in FALLBACK_METRICS}
    spelled = {name for name, family in families.items() if f'"{family}"' in source}
    if not spelled:
        pytest.skip("gateway/ exports none of the fallback metrics yet")
    assert spelled == set(FALLBACK_METRICS)
    collectors = gateway_collectors()
    for name, (kind, labels) in FALLBACK_METRICS.items():
        if families[name] in collectors:
            assert collectors[families[name]][0] == kind, name
            assert set(collectors[families[name]][1]) == labels, name
    # the labels alert reads the gateway's feedback counter by model and outcome
    assert collectors["gateway_feedback_labels"] == ("counter", ("model", "outcome"))
