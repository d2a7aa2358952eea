"""The gate's outputs: the pass/fail table on the terminal and ``summary.json`` for pipelines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loadtests.evaluate import Check
from loadtests.stats import EndpointStats

SUMMARY_NAME = "summary.json"


def stats_table(stats: list[EndpointStats]) -> Table:
    """What was measured, per endpoint."""
    table = Table(title="measured", title_justify="left")
    for column in ("endpoint", "requests", "failures", "req/s", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(column, justify="left" if column == "endpoint" else "right")

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:g}"

    for e in stats:
        style = "bold" if e.is_aggregate else ""
        cells = [
            escape(e.label),
            str(e.requests),
            str(e.failures),
            f"{e.rps:.1f}",
            ms(e.p50),
            ms(e.p95),
            ms(e.p99),
        ]
        table.add_row(*cells, style=style)
    return table


def checks_table(checks: list[Check], verdict: bool) -> Table:
    """Every SLA check: endpoint, metric, limit, actual, and PASS or MISS with the margin."""
    title = "[bold green]SLA: PASS[/]" if verdict else "[bold red]SLA: FAIL[/]"
    table = Table(title=title, title_justify="left")
    for column in ("endpoint", "check", "result"):
        table.add_column(column)
    for c in checks:
        mark = "[dim]skip[/]" if c.skipped else "[green]pass[/]" if c.passed else "[bold red]MISS[/]"
        table.add_row(escape(c.endpoint), c.metric, f"{mark}  {escape(c.detail)}")
    return table


def print_report(console: Console, stats: list[EndpointStats], checks: list[Check], verdict: bool) -> None:
    console.print(stats_table(stats))
    console.print(checks_table(checks, verdict))
    misses = [c for c in checks if not c.passed]
    for c in misses:
        console.print(f"[bold red]missed:[/] {escape(c.endpoint)}: {escape(c.detail)}", soft_wrap=True)


def write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    """``summary.json``, written whole via a temp file (a reader never sees half a file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SUMMARY_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path
