"""A PNG of latency percentiles over time, from Locust's stats history.

Uses matplotlib's Agg backend (no display needed, safe in CI). The plot is a report, not a
verdict: when matplotlib is missing or the history is empty, the gate notes it and goes on.
"""

from __future__ import annotations

from pathlib import Path

from loadtests.sla import AGGREGATED
from loadtests.stats import HistoryPoint


class PlotSkipped(Exception):
    """No plot was drawn; the message says why."""


def plot_latency(history: list[HistoryPoint], path: Path, title: str) -> Path:
    """Draw p50/p95/p99 of all requests (ms, left axis) and users (right axis) against seconds."""
    # rps 0 marks a second whose sliding window is still empty (the first one): Locust writes 0 ms
    # percentiles there, which would draw a false dip.
    points = [p for p in history if p.name == AGGREGATED and not p.type and p.p50 is not None and p.rps > 0]
    if not points:
        raise PlotSkipped("the stats history holds no measured second")
    try:
        import matplotlib

        matplotlib.use("Agg")  # before pyplot: never look for a display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotSkipped(f"matplotlib is not installed ({exc})") from exc

    t0 = points[0].timestamp
    seconds = [p.timestamp - t0 for p in points]
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    try:
        for label, values, style in (
            ("p50", [p.p50 for p in points], "-"),
            ("p95", [p.p95 for p in points], "--"),
            ("p99", [p.p99 for p in points], ":"),
        ):
            ax.plot(seconds, [v if v is not None else float("nan") for v in values], style, label=label)
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("response time (ms, Locust's sliding window)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        users = ax.twinx()
        users.step(seconds, [p.users for p in points], where="post", color="grey", alpha=0.5, label="users")
        users.set_ylabel("users")
        users.set_ylim(bottom=0)
        lines, labels = ax.get_legend_handles_labels()
        more_lines, more_labels = users.get_legend_handles_labels()
        ax.legend(lines + more_lines, labels + more_labels, loc="upper left", fontsize="small")
        ax.set_title(title, fontsize="medium")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
