"""The chart's alerts (PrometheusRule) and Grafana dashboard (ConfigMap): the rule has the shape
Prometheus Operator's CRD accepts, every PromQL expression parses (promql-parser, the Rust
PromQL parser), reads only metrics the stack exports and only this release's series, and the
thresholds and durations are the values'; the dashboard is JSON Grafana's sidecar picks up, with
a datasource on every panel and queries of the same kind.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import promql_parser
import yaml
from helm_python import Chart

from builder.release import schema as crd_schema
from tests.helm.helpers import (
    ALL_SETS,
    CHART_DIR,
    COMPONENT,
    NAMESPACE,
    VALUE_SETS,
    Release,
    gateway_error_causes,
    on,
    render,
    subset,
    unknown_metrics,
)

BASE = {"modelRepository": {"pvc": {"claimName": "triton-models"}}}

# --- reading PromQL -----------------------------------------------------------------------------


def selectors(expr: promql_parser.Expr) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(expr, visit)
    return found


def comparisons(expr: promql_parser.Expr, op: str) -> list[float]:
    """The constants an expression compares against with `op` (`>`, `>=`)."""
    found: list[float] = []

    def visit(node: promql_parser.Expr) -> None:
        if (
            isinstance(node, promql_parser.BinaryExpr)
            and str(node.op) == op
            and isinstance(node.rhs, promql_parser.NumberLiteral)
        ):
            found.append(node.rhs.val)

    promql_parser.walk(expr, visit)
    return found


def ranges(expr: promql_parser.Expr) -> set[timedelta]:
    """The ranges of every range vector (rate(x[5m]) -> 5 minutes)."""
    found: set[timedelta] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.MatrixSelector):
            found.add(node.range)

    promql_parser.walk(expr, visit)
    return found


def matchers(selector: promql_parser.VectorSelector) -> dict[str, tuple[str, str]]:
    return {m.name: (str(m.op), m.value) for m in selector.matchers.matchers}


# --- the PrometheusRule -------------------------------------------------------------------------

# The structure of Prometheus Operator's monitoring.coreos.com/v1 PrometheusRule (its CRD's
# openAPIV3Schema, restated: groups of alerting/recording rules, durations in Prometheus' form);
# crd_schema.problems also reports any field the schema does not declare, which the API server
# would prune.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "query_offset": _DURATION,
                            "limit": {"type": "integer"},
                            "labels": _STRINGS,
                            "partial_response_strategy": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                                        "for": _DURATION,
                                        "keep_firing_for": {**_DURATION, "minLength": 1},
                                        "labels": _STRINGS,
                                        "annotations": _STRINGS,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}


@dataclass(frozen=True)
class AlertSpec:
    """An alert as its values configure it: its key under monitoring.prometheusRule.alerts, the
    comparisons its expr makes (operator -> the value keys, or constants, compared with), and the
    value key of its range (None: rateWindow)."""

    key: str
    compares: dict[str, list[str | float]]
    window: str | None = None


ALERTS = {
    "TritonStackModelDrift": AlertSpec("modelDrift", {">": ["psi"]}),
    "TritonStackModelDriftWarning": AlertSpec("modelDriftWarning", {">": ["psi"]}),
    "TritonStackGatewayLatencyHigh": AlertSpec("gatewayLatency", {">": ["p99Seconds"]}),
    "TritonStackGatewayErrorRateHigh": AlertSpec("gatewayErrors", {">": ["ratio"]}),
    "TritonStackTritonQueueTimeHigh": AlertSpec("tritonQueue", {">": ["seconds"]}),
    "TritonStackGatewayLabelsUnmatched": AlertSpec(
        "labelsUnmatched", {">": ["ratio"], ">=": ["minLabels"]}, window="window"
    ),
    "TritonStackGatewayQualityNearThreshold": AlertSpec(
        "qualityNearThreshold", {"<": ["warnMargin"], ">=": ["minLabeledRows"], "==": [1]}
    ),
    "TritonStackGatewayEvidenceLost": AlertSpec("evidenceLost", {">": [0]}, window="window"),
    "TritonStackGatewayFallbackActive": AlertSpec("fallbackActive", {"==": [1], ">": [], "<": []}),
}
ALERT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def alerting_rules(release: Release) -> dict[str, dict[str, Any]]:
    (rule,) = release.all("PrometheusRule")
    problems = crd_schema.problems(rule, PROMETHEUS_RULE_SCHEMA)
    assert problems == [], problems
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert len(set(names)) == len(names), names  # the CRD's list-map key
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert all(("alert" in r) != ("record" in r) for r in rules), rules
    found = {r["alert"]: r for r in rules if "alert" in r}
    assert sum(1 for r in rules if "alert" in r) == len(found)
    return found


def recording_rules(release: Release) -> dict[str, promql_parser.Expr]:
    """The drift recording rules (record name -> parsed expr): each reads only metrics the stack
    exports or rules recorded before it in its group, over the configured drift window."""
    (rule,) = release.all("PrometheusRule")
    window = promql_parser.parse_duration(release.values["monitoring"]["prometheusRule"]["drift"]["window"])
    recorded: dict[str, promql_parser.Expr] = {}
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            if "record" not in r:
                continue
            expr = promql_parser.parse(r["expr"])
            used = {sel.name for sel in selectors(expr) if sel.name}
            assert used and unknown_metrics(used - set(recorded)) == set(), (r["record"], used)
            assert ranges(expr) <= {window}, r["record"]
            assert r["record"] not in recorded
            recorded[r["record"]] = expr
    return recorded


def check_alerts(release: Release, values: dict[str, Any]) -> dict[str, promql_parser.Expr]:
    """Every alert the values enable, as configured; returns the parsed expressions."""
    config = values["monitoring"]["prometheusRule"]
    rules = alerting_rules(release)
    recorded = set(recording_rules(release))
    enabled = {name for name, spec in ALERTS.items() if config["alerts"][spec.key]["enabled"]}
    assert set(rules) == enabled
    parsed = {}
    for name, rule in rules.items():
        spec = ALERTS[name]
        alert = config["alerts"][spec.key]
        assert ALERT_NAME.match(name)
        expr = parsed[name] = promql_parser.parse(rule["expr"])  # ValueError on bad syntax
        used = {s.name for s in selectors(expr) if s.name}
        assert used and unknown_metrics(used - recorded) == set(), (name, used)
        for op, compared in spec.compares.items():
            expected = [alert[c] if isinstance(c, str) else c for c in compared]
            assert comparisons(expr, op) == expected, (name, op, rule["expr"])
        assert rule["for"] == alert["for"]
        assert rule["labels"] == {"severity": alert["severity"], **config["alertLabels"]}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        window = alert[spec.window] if spec.window else config["rateWindow"]
        assert ranges(expr) <= {promql_parser.parse_duration(window)}, name
    return parsed


@on(*ALL_SETS)
def test_the_rule_has_every_alert_with_parsing_promql_on_this_releases_series(release: Release) -> None:
    monitoring = release.values["monitoring"]
    if not monitoring["prometheusRule"]["enabled"]:
        assert release.all("PrometheusRule") == []
        return
    parsed = check_alerts(release, release.values)
    # The drift alerts give a verdict only where the replicas together counted enough rows.
    drift = monitoring["prometheusRule"]["drift"]
    assert comparisons(parsed["TritonStackModelDrift"], ">=") == [drift["minRows"]]
    # The recording rules that sum the replicas' drift counters select this release's series too.
    parsed = {**parsed, **recording_rules(release)}
    # Each selector names this release's namespace and a job a ServiceMonitor of the chart
    # produces: Prometheus Operator's job label is the scraped Service's name.
    scraped = {
        service["metadata"]["name"]: service["metadata"]["labels"][COMPONENT]
        for monitor in release.all("ServiceMonitor")
        for service in release.all("Service")
        if subset(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    }
    for name, expr in parsed.items():
        for selector in selectors(expr):
            labels = matchers(selector)
            assert labels["namespace"] == ("MatchOp.Equal", NAMESPACE), (name, str(selector))
            op, job = labels["job"]
            assert op == "MatchOp.Equal"
            component = "triton" if (selector.name or "").startswith("nv_") else "gateway"
            if monitoring["serviceMonitors"]["enabled"]:
                assert scraped.get(job) == component, (name, job, scraped)


def test_alert_values_change_the_rules(chart: Chart) -> None:
    overrides = {
        **BASE,
        "monitoring": {
            "prometheusRule": {
                "alertLabels": {"team": "ml-platform"},
                "runbookBaseUrl": "https://runbooks.example.com/triton-stack",
                "selectors": {"gateway": 'app="fraud-gateway"', "triton": 'cluster="eu-1", app="triton"'},
                "rateWindow": "2m",
                "drift": {"window": "2h", "minRows": 2000},
                "alerts": {
                    "modelDrift": {"psi": 0.35, "for": "2h", "severity": "critical"},
                    "modelDriftWarning": {"enabled": False},
                    "gatewayLatency": {"p99Seconds": 0.1},
                    "gatewayErrors": {"ratio": 0.05, "causes": ["triton_unavailable"]},
                    "tritonQueue": {"seconds": 0.002, "for": "15m"},
                    "labelsUnmatched": {
                        "ratio": 0.5,
                        "minLabels": 1000,
                        "window": "2h",
                        "severity": "warning",
                    },
                    "qualityNearThreshold": {"warnMargin": 0.05, "minLabeledRows": 1000, "for": "30m"},
                    "evidenceLost": {"enabled": False},
                    "fallbackActive": {"for": "2m", "severity": "page"},
                },
            }
        },
    }
    release = render(chart, "custom-alerts", overrides)
    parsed = check_alerts(release, release.values)
    assert "TritonStackModelDriftWarning" not in parsed
    assert comparisons(parsed["TritonStackModelDrift"], ">=") == [2000]
    recorded = recording_rules(release)
    assert "triton_stack:gateway_drift_psi:2h" in recorded
    assert set().union(*(ranges(e) for e in recorded.values())) == {timedelta(hours=2)}
    rules = alerting_rules(release)
    for name, expr in parsed.items():
        for selector in selectors(expr):
            labels = matchers(selector)
            assert "job" not in labels and "namespace" not in labels  # the user's matchers only
            if (selector.name or "").startswith("nv_"):
                assert labels["cluster"] == ("MatchOp.Equal", "eu-1") and labels["app"][1] == "triton"
            else:
                assert labels["app"] == ("MatchOp.Equal", "fraud-gateway")
        runbook = rules[name]["annotations"]["runbook_url"]
        assert runbook == f"https://runbooks.example.com/triton-stack#{name.lower()}"
    assert ranges(parsed["TritonStackTritonQueueTimeHigh"]) == {timedelta(minutes=2)}
    assert ranges(parsed["TritonStackGatewayLabelsUnmatched"]) == {timedelta(hours=2)}
    assert "TritonStackGatewayEvidenceLost" not in parsed
    assert rules["TritonStackGatewayFallbackActive"]["labels"]["severity"] == "page"
    error_rate = parsed["TritonStackGatewayErrorRateHigh"]
    errors = [s for s in selectors(error_rate) if s.name == "gateway_errors_total"]
    assert [matchers(s)["cause"] for s in errors] == [("MatchOp.Re", "triton_unavailable")]


def test_the_default_error_causes_are_ones_the_gateway_raises(chart: Chart) -> None:
    causes = chart.merge_values(VALUE_SETS["deployment-pvc"])["monitoring"]["prometheusRule"]["alerts"][
        "gatewayErrors"
    ]["causes"]
    assert set(causes) <= gateway_error_causes(), set(causes) - gateway_error_causes()
    # a caller's mistake is not the stack's error
    assert not {"bad_request", "invalid_input", "unauthenticated", "unknown_entity"} & set(causes)


# --- the dashboard ------------------------------------------------------------------------------

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# What the dashboard must show (issue 11): gateway latency, feature fetch, Triton call, errors,
# drift per feature, Triton queue vs compute time and batch size, GPU utilization.
DASHBOARD_READS = {
    "gateway_request_seconds_bucket",
    "gateway_feature_fetch_seconds_bucket",
    "gateway_triton_seconds_bucket",
    "gateway_errors_total",
    "gateway_drift_psi",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_count",
    "nv_inference_exec_count",
    "DCGM_FI_DEV_GPU_UTIL",
}
_GRAFANA_BUILTIN = re.compile(r"\$\{?__\w+\}?")  # $__rate_interval, $__interval, ${__range}
_GRAFANA_VARIABLE = re.compile(r"\$\{?(\w+)")


def check_dashboard(dashboard: dict[str, Any], recorded: set[str]) -> set[str]:
    """Assert what Grafana needs of each panel; returns the metric names the panels read, which
    are exported metrics or series the chart's own recording rules (`recorded`) write."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE
            promql_parser.parse(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", variable["query"]["query"]))
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    read: set[str] = set()
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["gridPos"]["x"] >= 0 and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            expr = target["expr"]
            used_variables = set(_GRAFANA_VARIABLE.findall(_GRAFANA_BUILTIN.sub("", expr)))
            assert used_variables <= set(variables), (panel["title"], used_variables)
            # Grafana substitutes its interval variables before Prometheus sees the query.
            parsed = promql_parser.parse(_GRAFANA_BUILTIN.sub("5m", expr))
            names = {s.name for s in selectors(parsed) if s.name}
            assert names and unknown_metrics(names - recorded) == set(), (panel["title"], names)
            read |= names
    return read


def dashboard_of(release: Release) -> dict[str, Any]:
    (config_map,) = release.all("ConfigMap", "monitoring")
    settings = release.values["monitoring"]["dashboard"]
    assert config_map["metadata"]["labels"][settings["labelKey"]] == settings["labelValue"]
    (text,) = config_map["data"].values()
    dashboard: dict[str, Any] = json.loads(text)
    return dashboard


@on(*ALL_SETS)
def test_the_dashboard_reaches_the_sidecar_with_valid_panels(release: Release) -> None:
    if not release.values["monitoring"]["dashboard"]["enabled"]:
        assert release.all("ConfigMap", "monitoring") == []
        return
    dashboard = dashboard_of(release)
    # without the PrometheusRule, the all-replica drift series are simply absent (panel B empty)
    rules_on = release.values["monitoring"]["prometheusRule"]["enabled"]
    recorded = set(recording_rules(release)) if rules_on else {"triton_stack:gateway_drift_psi:1h"}
    read = check_dashboard(dashboard, recorded)
    assert read >= DASHBOARD_READS, DASHBOARD_READS - read
    assert len(dashboard["uid"]) <= 40  # Grafana's limit


def test_each_release_gets_its_own_dashboard_where_the_sidecar_looks(chart: Chart) -> None:
    sidecar = {"namespace": "grafana", "labelKey": "dashboards", "labelValue": "ml"}
    moved = render(chart, "moved", {**BASE, "monitoring": {"dashboard": sidecar}})
    (config_map,) = moved.all("ConfigMap", "monitoring")
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["labels"]["dashboards"] == "ml"
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]
    # Another release: Grafana keys dashboards by uid, the sidecar writes each data key as a file.
    manifests = chart.render(BASE, name="second", namespace=NAMESPACE)
    second = yaml.safe_load(manifests["triton-stack/templates/dashboard-configmap.yaml"])
    (key,) = second["data"]
    assert key not in config_map["data"]
    assert json.loads(second["data"][key])["uid"] != dashboard_of(moved)["uid"]


def test_the_configmap_carries_the_dashboard_file_under_the_chart(chart: Chart) -> None:
    shipped = json.loads((CHART_DIR / "dashboards" / "triton-stack.json").read_text())
    rendered = dashboard_of(render(chart, "deployment-pvc", VALUE_SETS["deployment-pvc"]))
    # only the uid and the title are the release's own
    assert {k: v for k, v in rendered.items() if k not in ("uid", "title")} == {
        k: v for k, v in shipped.items() if k not in ("uid", "title")
    }
