"""Fixtures: the chart loaded once, and one render per value set (module scope, so each set is
rendered once however many tests read it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helm_python import Chart

from tests.helm.chart_support import CHART_DIR, VALUE_SETS, Release, render


@pytest.fixture(scope="session")
def chart() -> Iterator[Chart]:
    with Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def release(request: pytest.FixtureRequest, chart: Chart) -> Release:
    """The chart rendered with VALUE_SETS[request.param]; tests pick sets with indirect params."""
    name: str = request.param
    return render(chart, name, VALUE_SETS[name])
