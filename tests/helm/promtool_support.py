"""Running the chart's PrometheusRule under promtool: the rule files the chart renders, and the
synthetic series (the target labels Prometheus Operator's ServiceMonitors give each scraped pod)
and expectations of `promtool test rules` unit tests. The fixtures built on these are in
conftest.py; the tests in test_prometheus_rules.py (drift, serving) and test_fallback_alerts.py.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from tests.helm.chart_support import REPO_ROOT, Release

BASE = {"modelRepository": {"pvc": {"claimName": "triton-models"}}}
HOURS = 3  # every series runs 3 h at a 1 m interval: the 1 h windows fill, the `for`s pass
STEPS = HOURS * 60


def find_promtool() -> str:
    """promtool (Debian package prometheus), installed by `make prometheus` (a `make test` step)."""
    found = shutil.which("promtool")
    if found is None:
        subprocess.run(["make", "-s", "prometheus"], cwd=REPO_ROOT, check=False, timeout=600)
        found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing and `make prometheus` could not install it (not root?)")
    return found


def write_rule_files(release: Release, folder: Path) -> dict[str, Path]:
    """The PrometheusRule's groups as Prometheus rule files: as shipped ("full"), and without
    annotations ("bare": promtool compares alert annotations verbatim, so the unit tests run on
    this copy; `promtool check rules` checks the annotation templates on the full one)."""
    (rule,) = release.all("PrometheusRule")
    groups = rule["spec"]["groups"]
    full, bare = folder / "rules.yaml", folder / "rules-bare.yaml"
    full.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    stripped = [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in groups
    ]
    bare.write_text(yaml.safe_dump({"groups": stripped}, sort_keys=False))
    return {"full": full, "bare": bare}


def selector_labels(expr: str, metric: str) -> dict[str, str]:
    """The label matchers of the first selector of `metric` in `expr`."""
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name == metric:
            found.append(node)

    promql_parser.walk(promql_parser.parse(expr), visit)
    assert found, (metric, expr)
    return {m.name: m.value for m in found[0].matchers.matchers if m.name != "__name__"}


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
