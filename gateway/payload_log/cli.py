"""``gateway drift report``: the payload log since a time, as an HTML report.

Exit codes: 0 the report is written; 1 nothing to report (no log there, no rows in the window,
the file cannot be written); 2 a usage error (a bad ``--since``, no ``--log``, a log of several
models and no ``--model``, a ``--repo`` that is not a folder).
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated

import typer

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """``30m``/``1h``/``7d`` before ``now``, or an ISO date/time (UTC unless it says otherwise)."""
    span = _SPAN.match(text.strip())
    if span:
        return now - dt.timedelta(seconds=float(span.group(1)) * _UNIT[span.group(2)])
    try:
        at = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--since {text!r} is neither a span (30m, 1h, 7d) nor an ISO time") from None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


_HINT = "see `gateway drift report --help` (docs/drift.md: the payload log)"


def _fail(message: str, code: int, hint: str = _HINT) -> typer.Exit:
    from gateway.refusal import refuse

    return refuse(message, hint, code)


def report(
    log: Annotated[
        str | None,
        typer.Option(
            help="The payload log: a folder or URL (default: GATEWAY_PAYLOAD_LOG)",
            envvar="GATEWAY_PAYLOAD_LOG",
        ),
    ] = None,
    since: Annotated[str, typer.Option(help="Rows logged since: 30m, 1h, 7d or an ISO time")] = "1h",
    model: Annotated[str | None, typer.Option(help="The model (needed when the log has several)")] = None,
    repo: Annotated[
        Path | None, typer.Option(help="Model repository whose metadata.json holds each version's reference")
    ] = None,
    out: Annotated[Path, typer.Option(help="The HTML file to write")] = Path("drift-report.html"),
    min_rows: Annotated[int, typer.Option(help="Rows below which a feature gets no verdict")] = 500,
) -> None:
    """Turn the payload log into an HTML drift report: each version's logged rows against its reference."""
    from gateway.payload_log.html import render
    from gateway.payload_log.report import ReportError, build_report
    from gateway.stats.measures import Thresholds

    if not log:
        raise _fail(
            "no payload log given",
            2,
            "pass --log DIR|URL (the gateway's GATEWAY_PAYLOAD_LOG), or set GATEWAY_PAYLOAD_LOG",
        )
    now = dt.datetime.now(dt.UTC)
    try:
        start = parse_since(since, now)
    except ValueError as exc:
        raise _fail(str(exc), 2, "write --since as 30m, 1h, 7d or an ISO time") from None
    if repo is not None and not repo.is_dir():
        raise _fail(
            f"--repo {repo} is not a folder", 2, "pass --repo the model repository the gateway serves"
        )
    try:
        built = build_report(
            log, model, start, now + dt.timedelta(seconds=1), repo, Thresholds(min_rows=min_rows)
        )
    except ReportError as exc:
        raise _fail(
            str(exc),
            exc.code,
            "check --log (where the gateway's GATEWAY_PAYLOAD_LOG points), --model and --since",
        ) from None
    except OSError as exc:  # pyarrow's filesystem errors (a URL it cannot reach, no credentials)
        raise _fail(
            f"cannot read the payload log at {log}: {exc}", 1, "check --log and its credentials"
        ) from None
    try:
        out.write_text(render(built), encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc.strerror or exc}", 1, "pass --out a writable file") from None
    rows = sum(v.rows for v in built.versions)
    missing = [v.version for v in built.versions if v.reference is None]
    note = f"; no reference for version(s) {', '.join(missing)}" if missing else ""
    typer.echo(f"wrote {out}: {built.model}, {rows} rows, {len(built.versions)} version(s){note}")
