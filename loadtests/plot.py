"""A PNG of latency percentiles and the error rate over time, with the SLA's limits drawn in.

Top panel: p50/p95/p99 of all requests (solid, one colour each) and, dashed in the same colour,
the limit the SLA's ``Aggregated`` line sets for that percentile; users on the right axis.
Bottom panel: the error rate per second and, dashed, the SLA's ``max_error_rate`` budget.
Drawn on a bare matplotlib ``Figure`` (no pyplot, no display, no global state: safe in CI and
in tests, which inspect the figure). The plot is a report, not a verdict: when matplotlib is
missing or the history is empty, the gate notes it and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from loadtests.sla import AGGREGATED, Sla
from loadtests.stats import HistoryPoint

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PERCENTILE_COLOURS = {"p50": "tab:blue", "p95": "tab:orange", "p99": "tab:red"}
ERROR_COLOUR = "tab:purple"


class PlotSkipped(Exception):
    """No plot was drawn; the message says why."""


@dataclass(frozen=True)
class PlotLimits:
    """The SLA limits the plot draws: per percentile (ms) and the error budget (a fraction)."""

    percentiles_ms: dict[str, float] = field(default_factory=dict)
    max_error_rate: float | None = None


def limits_from_sla(sla: Sla) -> PlotLimits:
    """The ``Aggregated`` line's limits (the plot shows all requests together)."""
    line = next((e for e in sla.endpoints if e.name == AGGREGATED and e.type is None), None)
    if line is None:
        return PlotLimits()
    given = line.thresholds()
    percentiles = {p: given[f"{p}_ms"] for p in PERCENTILE_COLOURS if f"{p}_ms" in given}
    return PlotLimits(percentiles, given.get("max_error_rate"))


def _measured(history: list[HistoryPoint]) -> list[HistoryPoint]:
    # rps 0 marks a second whose sliding window is still empty (the first one): Locust writes 0 ms
    # percentiles there, which would draw a false dip.
    return [p for p in history if p.name == AGGREGATED and not p.type and p.p50 is not None and p.rps > 0]


def latency_figure(history: list[HistoryPoint], title: str, limits: PlotLimits | None = None) -> Figure:
    """The figure, not saved: latency panel over error-rate panel, limits dashed."""
    points = _measured(history)
    if not points:
        raise PlotSkipped("the stats history holds no measured second")
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotSkipped(f"matplotlib is not installed ({exc})") from exc
    limits = limits or PlotLimits()

    t0 = points[0].timestamp
    seconds = [p.timestamp - t0 for p in points]
    fig = Figure(figsize=(9, 6), dpi=100)
    ax, errors = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    # The scale is the measurements', so 8-21 ms lines do not lie flat under a 1,000 ms limit; a
    # limit far above them (past 10x the highest) is named in the legend instead of drawn.
    measured = [v for p in points for n in PERCENTILE_COLOURS if (v := getattr(p, n)) is not None]
    highest = max(measured, default=1.0)
    top = highest * 1.3
    for name, colour in PERCENTILE_COLOURS.items():
        values = [getattr(p, name) for p in points]
        ax.plot(
            seconds, [v if v is not None else float("nan") for v in values], "-", color=colour, label=name
        )
        if name in limits.percentiles_ms:
            limit = limits.percentiles_ms[name]
            if limit <= 10 * highest:
                ax.axhline(
                    limit, color=colour, linestyle="--", linewidth=1, label=f"{name} limit {limit:g} ms"
                )
                top = max(top, limit * 1.1)
            else:
                ax.plot(
                    [],
                    [],
                    color=colour,
                    linestyle="--",
                    linewidth=1,
                    label=f"{name} limit {limit:g} ms (off scale)",
                )
    ax.set_ylabel("response time (ms, Locust's sliding window)")
    ax.set_ylim(bottom=0, top=top)
    ax.grid(True, alpha=0.3)
    users = ax.twinx()
    users.step(seconds, [p.users for p in points], where="post", color="grey", alpha=0.5, label="users")
    users.set_ylabel("users")
    users.set_ylim(bottom=0, top=max(p.users for p in points) * 1.6 or 1)  # below the limit lines
    lines, labels = ax.get_legend_handles_labels()
    more_lines, more_labels = users.get_legend_handles_labels()
    ax.legend(lines + more_lines, labels + more_labels, loc="upper left", fontsize="small")
    ax.set_title(title, fontsize="medium")

    rates = [p.failures_per_s / p.rps * 100 for p in points]
    errors.plot(seconds, rates, "-", color=ERROR_COLOUR, label="error rate")
    if limits.max_error_rate is not None:
        budget = limits.max_error_rate * 100
        errors.axhline(
            budget, color=ERROR_COLOUR, linestyle="--", linewidth=1, label=f"error budget {budget:g}%"
        )
    errors.set_ylim(bottom=0, top=max([*rates, (limits.max_error_rate or 0) * 100, 0.1]) * 1.15)
    errors.set_ylabel("errors (%)")
    errors.set_xlabel("seconds since start")
    errors.grid(True, alpha=0.3)
    errors.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    return fig


def plot_latency(
    history: list[HistoryPoint], path: Path, title: str, limits: PlotLimits | None = None
) -> Path:
    """Draw :func:`latency_figure` into a PNG at ``path``."""
    fig = latency_figure(history, title, limits)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
