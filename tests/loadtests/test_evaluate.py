"""Judging stats against an SLA: which endpoint missed, on what, and by how much.

The stats files here are written in Locust 2.47's CSV format (the same header Locust writes; the
integration tests read files a real Locust run wrote).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from loadtests.errors import LocustFailedError
from loadtests.evaluate import evaluate, passed
from loadtests.plot import PlotLimits, latency_figure, limits_from_sla, plot_latency
from loadtests.sla import Sla
from loadtests.stats import HistoryPoint, read_failures, read_history, read_stats

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

HEADER = (
    "Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
    "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
    "99.99%,100%"
)


def stats_csv(tmp_path: Path, *rows: str) -> Path:
    prefix = tmp_path / "run"
    Path(f"{prefix}_stats.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    return prefix


def row(type_: str, name: str, requests: int, failures: int, rps: float, p50: str, p95: str, p99: str) -> str:
    return (
        f"{type_},{name},{requests},{failures},{p50},2.1,0.9,40,228,{rps},0.0,"
        f"{p50},{p50},{p50},{p50},{p95},{p95},{p99},{p99},{p99},{p99},{p99}"
    )


@pytest.fixture
def two_endpoints(tmp_path: Path) -> Path:
    return stats_csv(
        tmp_path,
        row("POST", "infer", 1000, 5, 400.0, "2", "12", "30"),
        row("grpc", "infer", 1000, 0, 500.0, "1", "3", "4"),
        row("", "Aggregated", 2000, 5, 900.0, "2", "8", "20"),
    )


def sla(*lines: dict[str, object]) -> Sla:
    return Sla.model_validate({"endpoints": list(lines)})


def test_reads_locust_stats_rows(two_endpoints: Path) -> None:
    stats = read_stats(two_endpoints)
    assert [s.label for s in stats] == ["infer [POST]", "infer [grpc]", "Aggregated"]
    total = stats[-1]
    assert total.is_aggregate and total.requests == 2000 and total.error_rate == pytest.approx(0.0025)
    assert (total.p50, total.p95, total.p99, total.rps) == (2, 8, 20, 900.0)


def test_a_loose_sla_passes(two_endpoints: Path) -> None:
    checks = evaluate(
        sla({"name": "Aggregated", "p99_ms": 100, "max_error_rate": 0.01, "min_rps": 10}),
        read_stats(two_endpoints),
    )
    assert passed(checks) and len(checks) == 3


def test_a_miss_names_endpoint_metric_and_margin(two_endpoints: Path) -> None:
    checks = evaluate(sla({"name": "infer", "type": "POST", "p95_ms": 5}), read_stats(two_endpoints))
    assert not passed(checks)
    (miss,) = checks
    assert (miss.endpoint, miss.metric, miss.actual, miss.limit, miss.miss_by) == (
        "infer [POST]",
        "p95_ms",
        12,
        5,
        7,
    )
    assert miss.detail == "p95 12 ms > 5 ms: missed by 7 ms, +140%"


def test_throughput_and_error_rate_misses(two_endpoints: Path) -> None:
    checks = evaluate(
        sla({"name": "Aggregated", "min_rps": 1000, "max_error_rate": 0.001}), read_stats(two_endpoints)
    )
    by_metric = {c.metric: c for c in checks}
    assert by_metric["min_rps"].miss_by == pytest.approx(100)
    assert by_metric["min_rps"].detail == "rps 900.0 req/s < 1000.0 req/s: missed by 100.0 req/s, -10%"
    assert "error_rate 0.25% > 0.10%: missed by 0.15 points" in by_metric["max_error_rate"].detail


def test_a_line_without_type_checks_every_endpoint_of_that_name(two_endpoints: Path) -> None:
    checks = evaluate(sla({"name": "infer", "p99_ms": 10}), read_stats(two_endpoints))
    assert [(c.endpoint, c.passed) for c in checks] == [("infer [POST]", False), ("infer [grpc]", True)]


def test_star_checks_each_endpoint_alone_not_the_aggregate(two_endpoints: Path) -> None:
    checks = evaluate(sla({"name": "*", "p50_ms": 100}), read_stats(two_endpoints))
    assert [c.endpoint for c in checks] == ["infer [POST]", "infer [grpc]"]


def test_a_required_endpoint_without_requests_is_a_miss_an_optional_one_is_skipped(
    two_endpoints: Path,
) -> None:
    stats = read_stats(two_endpoints)
    (required,) = evaluate(sla({"name": "predict", "p95_ms": 50}), stats)
    assert (
        not required.passed
        and "no requests recorded" in required.detail
        and "infer [POST]" in required.detail
    )
    (optional,) = evaluate(sla({"name": "predict", "p95_ms": 50, "optional": True}), stats)
    assert optional.passed and optional.skipped


def test_no_requests_at_all_means_no_measurement_and_a_miss(tmp_path: Path) -> None:
    prefix = stats_csv(tmp_path, row("", "Aggregated", 0, 0, 0.0, "N/A", "N/A", "N/A"))
    stats = read_stats(prefix)
    assert stats[0].p95 is None and stats[0].error_rate is None
    assert not passed(evaluate(sla({"name": "Aggregated", "p95_ms": 5}), stats))


def test_missing_stats_file_is_a_locust_failure(tmp_path: Path) -> None:
    with pytest.raises(LocustFailedError, match="no stats file"):
        read_stats(tmp_path / "absent")


def test_history_and_failures_are_read(tmp_path: Path) -> None:
    prefix = tmp_path / "run"
    Path(f"{prefix}_stats_history.csv").write_text(
        "Timestamp,User Count,Type,Name,Requests/s,Failures/s,"
        "50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%,"
        "Total Request Count,Total Failure Count,Total Median Response Time,Total Average Response Time,"
        "Total Min Response Time,Total Max Response Time,Total Average Content Size\n"
        "100,0,,Aggregated,0.000000,0.000000,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,0,0,0,0.0,0,0,0\n"
        "101,2,,Aggregated,950.0,0.0,2,2,2,2,2,3,3,4,6,6,6,944,0,2,1.9,1.1,5.7,228\n"
    )
    Path(f"{prefix}_failures.csv").write_text(
        "Method,Name,Error,Occurrences,First Seen,Last Seen\nPOST,infer,HTTP 503: busy,7,,\n"
    )
    history = read_history(prefix)
    assert [(p.timestamp, p.users, p.p50, p.p99) for p in history] == [(100, 0, None, None), (101, 2, 2, 4)]
    assert read_failures(prefix) == [
        {"type": "POST", "name": "infer", "error": "HTTP 503: busy", "occurrences": 7}
    ]


def test_history_reads_failures_per_second(tmp_path: Path) -> None:
    prefix = tmp_path / "run"
    Path(f"{prefix}_stats_history.csv").write_text(
        "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,95%,99%\n"
        "101,2,,Aggregated,100.0,2.5,2,3,4\n"
    )
    (point,) = read_history(prefix)
    assert point.failures_per_s == 2.5 and point.rps == 100.0


def history(rows: list[tuple[int, float, float, float, float, float]]) -> list[HistoryPoint]:
    """Aggregated seconds: (timestamp, rps, failures/s, p50, p95, p99)."""
    return [
        HistoryPoint(t, 2, "", "Aggregated", rps, p50, p95, p99, fps) for t, rps, fps, p50, p95, p99 in rows
    ]


def values(data: Any) -> list[float]:
    """A line's x or y data as plain floats (matplotlib types it as any array-like)."""
    return [float(v) for v in data]


def axis(fig: Figure, ylabel: str) -> Axes:
    return next(a for a in fig.axes if a.get_ylabel().startswith(ylabel))


def test_the_plot_draws_each_sla_limit_dashed_in_its_percentiles_colour(tmp_path: Path) -> None:
    """What a reader of latency.png sees: each percentile beside its limit, the error rate
    beside its budget; inspected on the figure before it is saved."""
    limits = limits_from_sla(
        sla(
            {"name": "Aggregated", "p50_ms": 50, "p99_ms": 200, "max_error_rate": 0.02},
            {"name": "*", "p95_ms": 1},
        )
    )
    assert limits == PlotLimits({"p50": 50.0, "p99": 200.0}, 0.02)  # the "*" line is not the plot's
    points = history([(100, 0, 0, 0, 0, 0), (101, 50, 0, 10, 20, 30), (102, 50, 2, 12, 25, 40)])
    fig = latency_figure(points, "t", limits)
    latency, errors = axis(fig, "response time"), axis(fig, "errors")
    lines = {line.get_label(): line for line in latency.get_lines()}
    assert set(lines) == {"p50", "p95", "p99", "p50 limit 50 ms", "p99 limit 200 ms"}
    for name, limit in (("p50", 50.0), ("p99", 200.0)):
        drawn = lines[f"{name} limit {limit:g} ms"]
        assert drawn.get_linestyle() == "--" and lines[name].get_linestyle() == "-"
        assert drawn.get_color() == lines[name].get_color()
        assert values(drawn.get_ydata()) == [limit, limit]
    assert latency.get_ylim()[1] >= 200  # the limit is in view, though latency stays far below it
    # the first second (rps 0) is left out; the error rate is failures/s over rps, in %
    assert values(lines["p50"].get_xdata()) == [0, 1]
    err_lines = {line.get_label(): line for line in errors.get_lines()}
    assert values(err_lines["error rate"].get_ydata()) == [0.0, 4.0]
    budget = err_lines["error budget 2%"]
    assert budget.get_linestyle() == "--" and values(budget.get_ydata()) == [2.0, 2.0]
    assert budget.get_color() == err_lines["error rate"].get_color()
    path = plot_latency(points, tmp_path / "latency.png", "t", limits)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_a_limit_far_above_the_measurements_keeps_them_readable() -> None:
    """8-21 ms against a 1,000 ms limit: the scale is the measurements' (they no longer lie flat
    on the axis) and the limit is named in the legend, off scale, not drawn."""
    points = history([(100, 0, 0, 0, 0, 0), (101, 50, 0, 8, 15, 21), (102, 50, 0, 9, 14, 20)])
    fig = latency_figure(points, "t", PlotLimits({"p99": 1000.0}, None))
    latency = axis(fig, "response time")
    assert latency.get_ylim()[1] < 40  # 21 ms uses most of the height
    labels = [line.get_label() for line in latency.get_lines()]
    assert "p99 limit 1000 ms (off scale)" in labels
    (limit_line,) = [line for line in latency.get_lines() if "limit" in str(line.get_label())]
    assert len(limit_line.get_ydata()) == 0  # named, not drawn


def test_the_plot_without_limits_draws_only_the_measurements() -> None:
    fig = latency_figure(history([(101, 50, 0, 10, 20, 30)]), "t")
    assert [line.get_label() for line in axis(fig, "response time").get_lines()] == ["p50", "p95", "p99"]
    assert [line.get_label() for line in axis(fig, "errors").get_lines()] == ["error rate"]
