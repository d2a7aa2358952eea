"""Fixtures: the chart loaded once, one render per value set (module scope, so each set is
rendered once however many tests read it), and the chart's default rules as promtool reads them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helm_python import Chart

from tests.helm.helpers import (
    BASE,
    CHART_DIR,
    VALUE_SETS,
    Release,
    find_promtool,
    render,
    selector_labels,
    write_rule_files,
)


@pytest.fixture(scope="session")
def chart() -> Iterator[Chart]:
    with Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def release(request: pytest.FixtureRequest, chart: Chart) -> Release:
    """The chart rendered with VALUE_SETS[request.param]; tests pick sets with indirect params."""
    name: str = request.param
    return render(chart, name, VALUE_SETS[name])


# --- promtool -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def promtool() -> str:
    return find_promtool()


@pytest.fixture(scope="session")
def default_rules(chart: Chart) -> Release:
    """The chart on its default values, the rules a user gets."""
    return render(chart, "default-rules", BASE)


@pytest.fixture(scope="session")
def rule_files(default_rules: Release, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The default rules as Prometheus rule files: "full" as shipped, "bare" without annotations."""
    return write_rule_files(default_rules, tmp_path_factory.mktemp("rules"))


@pytest.fixture(scope="session")
def targets(default_rules: Release) -> dict[str, dict[str, str]]:
    """The label matchers the rendered rules select the gateway's and Triton's series with
    (namespace and job, by default), read from the rules themselves."""
    (rule,) = default_rules.all("PrometheusRule")
    exprs = {r.get("alert") or r["record"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    return {
        "gateway": selector_labels(
            exprs["triton_stack:gateway_drift_bin:increase1h"], "gateway_drift_bin_total"
        ),
        "triton": selector_labels(exprs["TritonStackTritonQueueTimeHigh"], "nv_inference_queue_duration_us"),
    }
