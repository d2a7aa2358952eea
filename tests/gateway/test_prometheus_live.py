"""The chart's Grafana dashboard and drift recording rules against a real Prometheus scraping the
session's real gateway and Triton.

Prometheus (Debian package prometheus, `make prometheus`) scrapes both every second under the
labels Prometheus Operator would give them (a `namespace`, a `job` per component) and loads the
chart's PrometheusRule groups with selectors for those jobs. After traffic, every dashboard
panel's query runs through `/api/v1/query`, its template variables resolved the way Grafana does
(`label_values(...)` through the label-values API, `$__rate_interval` a range that covers the test).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import requests
import yaml
from helm_python import Chart

from support import servers
from tests.gateway.helpers import MODEL, Stack, like_training, send
from tests.helm.helpers import CHART_DIR, NAMESPACE, REPO_ROOT, render

pytestmark = pytest.mark.integration

GATEWAY_JOB, TRITON_JOB = "gateway", "triton"
# Grafana's $__rate_interval is at least four scrape intervals; the test's whole traffic lies
# within this range, so every rate() sees it.
RATE_INTERVAL = "30s"
# Panels (title -> why) whose queries may come back empty here, and only these. Everything else
# concerns traffic the test sends: predicts, one caller's error (the error panels), drift counts
# (the payload log's counters are exported at 0 from the start), Triton's per-model families.
MAY_BE_EMPTY = {
    "GPU utilization (DCGM)": "no GPU and no dcgm-exporter on this machine",
}


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        response = requests.get(
            f"{self.url}/api/v1/label/{label}/values", params={"match[]": match}, timeout=10
        )
        assert response.status_code == 200, response.text
        values: list[str] = response.json()["data"]
        return values

    def last_scrape(self, job: str) -> float:
        """When Prometheus last scraped `job` (its `up` sample's timestamp), 0 before any."""
        # timestamp() of a bare selector: the sample's own time (of an expression, the query's)
        found = self.query(f'timestamp(up{{job="{job}"}})')
        return float(found[0]["value"][1]) if found else 0.0

    def wait(self, what: str, ready: Any, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"Prometheus: {what} within {timeout} s\n{self.log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.2)


def chart_rules_and_dashboard(folder: Path) -> tuple[Path, dict[str, Any]]:
    """The chart's rule groups (a Prometheus rule file) with selectors for this test's jobs, and
    its dashboard, both as `helm install` would render them."""
    selectors = {
        c: f'namespace="{NAMESPACE}", job="{j}"'
        for c, j in (("gateway", GATEWAY_JOB), ("triton", TRITON_JOB))
    }
    values = {
        "modelRepository": {"pvc": {"claimName": "triton-models"}},
        "monitoring": {"prometheusRule": {"selectors": selectors}},
    }
    with Chart.load(CHART_DIR) as chart:
        release = render(chart, "live", values)
    (rule,) = release.all("PrometheusRule")
    rules = folder / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    (config_map,) = release.all("ConfigMap", "monitoring")
    (text,) = config_map["data"].values()
    return rules, json.loads(text)


@pytest.fixture(scope="module")
def prometheus(
    stack: Stack, gateway: servers.Gateway, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Prometheus, dict[str, Any]]]:
    binary = shutil.which("prometheus")
    if binary is None:
        subprocess.run(["make", "-s", "prometheus"], cwd=REPO_ROOT, check=False, timeout=600)
        binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is missing and `make prometheus` could not install it (not root?)")
    folder = tmp_path_factory.mktemp("prometheus")
    rules, dashboard = chart_rules_and_dashboard(folder)
    triton_metrics = urlparse(stack.triton.metrics_url)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": path,
                "static_configs": [
                    {"targets": [target], "labels": {"namespace": NAMESPACE, "pod": f"{job}-0"}}
                ],
            }
            for job, target, path in (
                (GATEWAY_JOB, gateway.http, "/metrics"),
                (TRITON_JOB, triton_metrics.netloc, triton_metrics.path),
            )
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = servers.free_port()
    log = folder / "prometheus.log"
    argv = [
        binary,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)

    def ready() -> bool:
        try:
            return requests.get(f"{prom.url}/-/ready", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        prom.wait("ready", ready)
        yield prom, dashboard
    finally:
        proc.send_signal(signal.SIGTERM)  # Prometheus closes its TSDB on SIGTERM
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]


def served_rows(stack: Stack, n: int, seed: int) -> list[dict[str, Any]]:
    """Rows like the training data whose entities the online store knows (the session's gateway
    refuses unknown ones)."""
    return [r for r in like_training(stack, n, seed) if r["user_id"] < 10**6]


def scraped_twice_since(prom: Prometheus, since: float) -> bool:
    # scrapes are 1 s apart: a last scrape 1 s after `since` has another one before it
    return all(prom.last_scrape(job) >= since + 1.05 for job in (GATEWAY_JOB, TRITON_JOB))


def resolve(expr: str, variables: dict[str, str]) -> str:
    expr = re.sub(r"\$\{?__rate_interval\}?", RATE_INTERVAL, expr)
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = re.sub(rf"\$\{{?{name}\}}?", value, expr)
    return expr


def test_every_dashboard_panel_queries_a_real_prometheus(
    prometheus: tuple[Prometheus, dict[str, Any]], stack: Stack, gateway: servers.Gateway
) -> None:
    prom, dashboard = prometheus
    up = 'up{job=~"gateway|triton"} == 1'
    prom.wait("both targets up", lambda: len(prom.query(up)) == 2)
    # two rounds of traffic with a scrape between: counters born in the first round (per model,
    # per bin) have a first sample, the second round a rate
    # (the drift counts are taken after the response: wait for Prometheus to hold them)
    send(gateway, served_rows(stack, 64, seed=21))
    born = f'gateway_drift_bin_total{{job="{GATEWAY_JOB}", model="{MODEL}", feature="amount"}}'
    prom.wait("the first traffic's drift counters scraped", lambda: prom.query(born))
    send(gateway, served_rows(stack, 64, seed=22))
    bad = requests.post(f"{gateway.url}/v1/models/{MODEL}/predict", json={"rows": "not rows"}, timeout=10)
    assert 400 <= bad.status_code < 500  # a caller's error, for the error panels
    second = time.time()
    prom.wait("two scrapes after the traffic", lambda: scraped_twice_since(prom, second))
    summed_rows = f'triton_stack:gateway_drift_rows:increase1h{{model="{MODEL}", feature="amount"}} > 0'
    prom.wait("the recording rules over the second traffic", lambda: prom.query(summed_rows))

    # template variables, in order, as Grafana resolves them (label_values(match, label))
    variables: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", variable["query"]["query"])
        assert match, variable
        values = prom.label_values(match[2], resolve(match[1], variables))
        assert values, (variable["name"], resolve(match[1], variables))
        variables[variable["name"]] = values[0] if len(values) == 1 else "|".join(values)
    assert variables["namespace"] == NAMESPACE and MODEL in variables["model"].split("|")

    empty: dict[str, list[str]] = {}
    answered: dict[str, int] = {}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        results = {}
        for target in panel["targets"]:
            expr = resolve(target["expr"], variables)
            assert "$" not in expr, expr
            results[target["expr"]] = prom.query(expr)  # asserts Prometheus accepted it
        title = panel["title"]
        answered[title] = sum(len(r) for r in results.values())
        missing = [e for e, r in results.items() if not r]
        if missing and title not in MAY_BE_EMPTY:
            empty[title] = missing
    assert empty == {}, f"panels with no data though their traffic exists: {empty}"
    assert set(MAY_BE_EMPTY) <= set(answered), "a panel named in MAY_BE_EMPTY is gone"
    assert all(answered[t] > 0 for t in answered if t not in MAY_BE_EMPTY), answered

    # the chart's drift recording rules, evaluated by this Prometheus over the real counters
    psi = prom.query('triton_stack:gateway_drift_psi:1h{namespace="serving", job="gateway"}')
    features = {s["metric"]["feature"]: float(s["value"][1]) for s in psi if s["metric"]["model"] == MODEL}
    assert "__prediction__" in features and "amount" in features, features
    assert all(v >= 0 for v in features.values() if not math.isnan(v)), features
    (rows,) = prom.query(summed_rows)
    assert float(rows["value"][1]) > 0, rows
