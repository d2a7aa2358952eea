"""The chart's PrometheusRule evaluated by Prometheus itself: `promtool check rules` on the rules
the chart renders, and `promtool test rules` unit tests (synthetic series, the labels Prometheus
Operator's ServiceMonitors give) showing each alert fire when it should and stay quiet when it
should not, and the drift recording rules giving one verdict over every gateway replica.

promtool compares alert annotations verbatim; the unit tests run on a copy of the rules without
them (their templates are checked by `promtool check rules` on the full file).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import promql_parser
import pytest
import yaml
from helm_python import Chart

from gateway.drift.stats import psi as gateway_psi
from tests.helm.chart_support import REPO_ROOT, Release, render

BASE = {"modelRepository": {"pvc": {"claimName": "triton-models"}}}
MODEL, VERSION = "fraud-detector", "2"
HOURS = 3  # every series runs 3 h at a 1 m interval: the 1 h windows fill, the `for`s pass
STEPS = HOURS * 60
RECORDED_PSI = "triton_stack:gateway_drift_psi:1h"
# What the chart's drift alert read before the recording rules: the worst replica's own gauge.
PER_REPLICA_VERDICT = (
    "max by (model, version, feature) ("
    'gateway_drift_psi{window="1h"} > 0.2 and gateway_drift_status{window="1h"} >= 0)'
)


# --- promtool -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    """promtool (Debian package prometheus), installed by `make prometheus` (a `make test` step)."""
    found = shutil.which("promtool")
    if found is None:
        subprocess.run(["make", "-s", "prometheus"], cwd=REPO_ROOT, check=False, timeout=600)
        found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing and `make prometheus` could not install it (not root?)")
    return found


@pytest.fixture(scope="module")
def rendered(chart: Chart) -> Release:
    return render(chart, "default-rules", BASE)


@pytest.fixture(scope="module")
def rule_files(rendered: Release, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The PrometheusRule's groups as Prometheus rule files: as shipped, and without annotations."""
    (rule,) = rendered.all("PrometheusRule")
    groups = rule["spec"]["groups"]
    folder = tmp_path_factory.mktemp("rules")
    full, bare = folder / "rules.yaml", folder / "rules-bare.yaml"
    full.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    stripped = [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in groups
    ]
    bare.write_text(yaml.safe_dump({"groups": stripped}, sort_keys=False))
    return {"full": full, "bare": bare}


def _selector_labels(expr: str, metric: str) -> dict[str, str]:
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name == metric:
            found.append(node)

    promql_parser.walk(promql_parser.parse(expr), visit)
    assert found, (metric, expr)
    return {m.name: m.value for m in found[0].matchers.matchers if m.name != "__name__"}


@pytest.fixture(scope="module")
def targets(rendered: Release) -> dict[str, dict[str, str]]:
    """The label matchers the rendered rules select the gateway's and Triton's series with
    (namespace and job, by default), read from the rules themselves."""
    (rule,) = rendered.all("PrometheusRule")
    exprs = {r.get("alert") or r["record"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    return {
        "gateway": _selector_labels(
            exprs["triton_stack:gateway_drift_bin:increase1h"], "gateway_drift_bin_total"
        ),
        "triton": _selector_labels(exprs["TritonStackTritonQueueTimeHigh"], "nv_inference_queue_duration_us"),
    }


def run_promtool(promtool: str, rules: Path, tests: list[dict[str, Any]], tmp_path: Path) -> None:
    spec = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# --- series -------------------------------------------------------------------------------------


def labels_text(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    return {"series": name + labels_text(labels), "values": values}


def counter(labels: dict[str, str], name: str, per_minute: float) -> dict[str, str]:
    return series(name, labels, f"0+{float(per_minute)!r}x{STEPS}")


def gauge(labels: dict[str, str], name: str, value: float) -> dict[str, str]:
    return series(name, labels, f"{float(value)!r}+0x{STEPS}")


def replica(target: dict[str, str], index: int, port: int = 8080) -> dict[str, str]:
    """A scraped pod's target labels, as a ServiceMonitor gives them."""
    return {
        **target,
        "pod": f"{target.get('job', 'gateway')}-{index}",
        "instance": f"10.0.0.{index + 10}:{port}",
        "service": target.get("job", "gateway"),
        "endpoint": "http",
        "container": "main",
    }


def replica_common(gw: dict[str, str]) -> dict[str, str]:
    """The target labels every replica shares, which survive `sum without (pod, instance)`."""
    shared = replica(gw, 0)
    return {k: v for k, v in shared.items() if k not in ("pod", "instance")}


def rounded(value: float) -> float:
    """PromQL's round(v, 0.001)."""
    return math.floor(value * 1000 + 0.5) / 1000


def firing(alert: str, at: str, *labelsets: dict[str, str]) -> dict[str, Any]:
    """An alert_rule_test: exactly these alerts firing at `at` (none: quiet, or only pending)."""
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": ls} for ls in labelsets]}


def evaluates(expr: str, at: str, *samples: tuple[dict[str, str], float]) -> dict[str, Any]:
    """A promql_expr_test: `expr` at `at` gives exactly these (labels, value) samples."""
    exp = [{"labels": labels_text(labels), "value": value} for labels, value in samples]
    return {"expr": expr, "eval_time": at, "exp_samples": exp}


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
    # each of them has a unit test below
    assert alerts == {
        "TritonStackModelDrift",
        "TritonStackModelDriftWarning",
        "TritonStackGatewayLatencyHigh",
        "TritonStackGatewayErrorRateHigh",
        "TritonStackTritonQueueTimeHigh",
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
