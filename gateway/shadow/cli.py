"""``gateway shadow``: each model's champion vs challenger on live traffic, as a table (or ``--json``).

It reads a running gateway's ``GET /v1/models/{model}/shadow`` (what that process compared).
Exit codes:

- 0: the report was read (its figures are for the release gate to judge: ``loadtests evidence``);
- 3: the challenger failed on some mirrored rows in the window (not loaded, other inputs,
  unreachable): the report's ``last_error`` says why;
- 1: the gateway is unreachable, or refused (unknown model 404, a missing key 401, a 5xx);
- 2: a usage error (a window the gateway refuses, a bad option).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gateway.drift.cli import (
    ApiKeyOpt,
    JsonOpt,
    ModelsOpt,
    Refused,
    UrlOpt,
    WindowOpt,
    default_models,
    fetch_report,
)
from gateway.refusal import refuse

EXIT_CHALLENGER_FAILED = 3


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def table(report: dict[str, Any]) -> Table:
    """One model's pair as a two-column table: what was compared, and how they differ."""
    champion, challenger = report["champion"], report["challenger"]
    title = (
        f"{report['model']}: version {champion['version']} (champion) vs {challenger['model']} version "
        f"{challenger['version'] or '?'} (challenger), {report['window']}, share {report['share']:.0%}"
    )
    out = Table(title=title, title_justify="left")
    out.add_column("figure")
    out.add_column("value", justify="right")
    difference = report["difference"] or {}
    latency = report["challenger_latency_ms"] or {}
    rows = [
        ("rows compared", str(report["rows"])),
        ("rows dropped (challenger busy)", str(report["dropped_rows"])),
        ("rows failed (challenger)", str(report["error_rows"])),
        ("label agreement", _share(report["agreement"])),
        ("score difference: mean", _num(difference.get("mean"))),
        ("score difference: p99", _num(difference.get("p99"))),
        ("score difference: max", _num(difference.get("max"))),
        (f"beyond tolerance {report['tolerance']}", _share(difference.get("beyond_tolerance"))),
        ("score PSI", _num(report["score_psi"])),
        (
            "challenger latency p50 / p99 (ms)",
            f"{_num(latency.get('p50'), 2)} / {_num(latency.get('p99'), 2)}",
        ),
    ]
    for name, value in rows:
        out.add_row(name, value)
    return out


def shadow(
    url: UrlOpt = "http://127.0.0.1:8080",
    model: ModelsOpt = None,
    window: WindowOpt = "1h",
    json_output: JsonOpt = False,
    api_key: ApiKeyOpt = None,
) -> None:
    """Champion vs challenger on live traffic: exit 0 read, 3 the challenger failed on some
    rows, 1 unreachable or refused, 2 usage."""
    models = model or default_models()
    try:
        reports = [fetch_report(url, m, window, api_key, route="shadow") for m in models]
    except Refused as exc:
        raise refuse(str(exc), exc.hint, exc.code) from None
    if json_output:
        sys.stdout.write(json.dumps({"reports": reports}, indent=2) + "\n")
    else:
        out = Console(highlight=False)
        for report in reports:
            if not report.get("enabled"):
                out.print(f"{report['model']}: no shadow traffic ({report.get('reason')})")
                continue
            out.print(table(report))
            if report["error_rows"]:
                out.print(
                    f"[bold red]the challenger failed on {report['error_rows']} rows[/]: "
                    f"{report['last_error']}"
                )
    failed = any(r.get("enabled") and r.get("error_rows") for r in reports)
    raise typer.Exit(EXIT_CHALLENGER_FAILED if failed else 0)
