"""The gate's outputs: the pass/fail tables on the terminal, ``summary.json`` for pipelines and
``report.md`` for people (a CI job summary, a pull-request comment).

Latency checks and promotion-evidence checks (shadow, quality) are shown side by side; an
evidence criterion reads ``held``, ``FAILED`` or ``NOT JUDGED`` (missing evidence, which fails).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loadtests.evaluate import Check
from loadtests.promotion import FAILED, HELD, EvidenceCheck
from loadtests.stats import EndpointStats

SUMMARY_NAME = "summary.json"
MARKDOWN_NAME = "report.md"


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


def _status_mark(status: str) -> str:
    if status == HELD:
        return "[green]held[/]"
    return "[bold red]FAILED[/]" if status == FAILED else "[bold yellow]NOT JUDGED[/]"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def evidence_table(checks: list[EvidenceCheck], verdict: bool) -> Table:
    """Every promotion criterion: name, threshold, observed, held / FAILED / NOT JUDGED."""
    title = "[bold green]evidence: PASS[/]" if verdict else "[bold red]evidence: FAIL[/]"
    table = Table(title=title, title_justify="left")
    for column in ("criterion", "threshold", "observed", "result"):
        table.add_column(column, justify="right" if column in ("threshold", "observed") else "left")
    for c in checks:
        table.add_row(
            escape(c.name),
            _number(c.threshold),
            _number(c.observed),
            f"{_status_mark(c.status)}  {escape(c.detail)}",
        )
    return table


def print_evidence(console: Console, checks: list[EvidenceCheck], verdict: bool) -> None:
    console.print(evidence_table(checks, verdict))
    for c in checks:
        if not c.passed:
            word = "missed" if c.status == FAILED else "not judged"
            console.print(f"[bold red]{word}:[/] {escape(c.name)}: {escape(c.detail)}", soft_wrap=True)


def print_report(
    console: Console,
    stats: list[EndpointStats],
    checks: list[Check],
    verdict: bool,
    evidence: list[EvidenceCheck] | None = None,
) -> None:
    """The measured table, the SLA table and (when the SLA file has promotion criteria) the
    evidence table; ``verdict`` is the latency verdict, the evidence table judges itself."""
    console.print(stats_table(stats))
    console.print(checks_table(checks, verdict))
    misses = [c for c in checks if not c.passed]
    for c in misses:
        console.print(f"[bold red]missed:[/] {escape(c.endpoint)}: {escape(c.detail)}", soft_wrap=True)
    if evidence:
        print_evidence(console, evidence, all(c.passed for c in evidence))


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(summary: dict[str, Any]) -> str:
    """``report.md``: the verdict, the latency checks and the evidence checks, from a summary."""
    lines = [f"# Release gate: {str(summary.get('verdict', 'error')).upper()}", ""]
    run = summary.get("run") or {}
    if run.get("target"):
        lines += [
            f"Target `{run['target']}`, SLA `{run.get('sla')}`, exit code {summary.get('exit_code')}.",
            "",
        ]
    if summary.get("error"):
        lines += [f"**error:** {_md(summary['error'])}", ""]
    if summary.get("checks"):
        lines += ["## Latency", "", "| endpoint | check | result |", "|---|---|---|"]
        for c in summary["checks"]:
            mark = "skip" if c.get("skipped") else "pass" if c["passed"] else "**MISS**"
            lines.append(f"| {_md(c['endpoint'])} | {c['metric']} | {mark} {_md(c['detail'])} |")
        lines.append("")
    promotion = summary.get("promotion")
    if promotion:
        lines += [
            f"## Evidence: {promotion['verdict'].upper()}",
            "",
            f"Model `{promotion['model']}`, window {promotion['window']}"
            + "".join(f", {k} from `{v}`" for k, v in promotion.get("sources", {}).items())
            + ".",
            "",
            "| criterion | threshold | observed | result |",
            "|---|---:|---:|---|",
        ]
        for c in promotion["checks"]:
            status = c["status"] if c["status"] == HELD else f"**{c['status'].upper()}**"
            result = f"{status}: {_md(c['detail'])}"
            cells = [c["name"], _number(c["threshold"]), _number(c["observed"]), result]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_markdown(out_dir: Path, summary: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MARKDOWN_NAME
    path.write_text(render_markdown(summary))
    return path


def write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    """``summary.json``, written whole via a temp file (a reader never sees half a file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SUMMARY_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path
