"""``loadtests gate``: load-test a target with Locust and judge it against an SLA file;
``loadtests evidence``: judge only the promotion criteria (shadow, quality) on the gateway's
live evidence, with no load (a pipeline's shadow-gate step).

Errors follow the builder's contract: one ``error:`` line and a ``hint:`` line on stderr and a
distinct exit code; with ``--json``, a JSON object on stdout too (and the tables go to stderr,
so stdout stays parseable).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from loadtests.criteria import window_seconds
from loadtests.entities import default_feature_repo
from loadtests.errors import EXIT_CODES, EXIT_EVIDENCE_MISSED, EXIT_PASS, GateError, SlaFileError, UsageError
from loadtests.evidence import FETCH_TIMEOUT_S, EvidenceSource, Subject, collect_evidence
from loadtests.gate import (
    GateRequest,
    default_out_dir,
    describe_request,
    parse_duration,
    parse_workers,
    run_gate,
)
from loadtests.promotion import evidence_passed, judge, promotion_summary
from loadtests.report import print_evidence, print_report, write_markdown, write_summary
from loadtests.runner import STARTUP_ALLOWANCE_S, STOP_TIMEOUT_S
from loadtests.settings import API_KEY_ENV, LoadOptions
from loadtests.sla import load_sla, resolve_sla_path


class UserClassName(StrEnum):
    gateway = "gateway"
    triton_http = "triton-http"
    triton_grpc = "triton-grpc"


class ShapeName(StrEnum):
    steady = "steady"
    step = "step"
    spike = "spike"


EXIT_CODE_HELP = "Exit codes: " + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items()) + "."
# `loadtests evidence` sends no load: only the codes it can end with
EVIDENCE_EXIT_CODE_HELP = (
    "Exit codes: 0 every promotion criterion held; 2 bad command-line option (or no evidence "
    "source); 3 the criteria file cannot be read or is invalid; "
    + "; ".join(f"{code} {EXIT_CODES[code]}" for code in (6, 7))
    + "."
)

app = typer.Typer(
    name="loadtests",
    help="Locust load tests and the SLA release gate of the serving stack.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # Click's plain help: option names are never cut at 80 columns
)


@app.callback()
def _root() -> None:
    """Locust load tests and the SLA release gate of the serving stack."""
    # A callback keeps `gate` a named subcommand (Typer would otherwise make the only command
    # the root), so more commands can join without breaking `loadtests gate ...` scripts.


def _report_error(
    exc: GateError,
    json_output: bool,
    out_dir: Path | None,
    request: GateRequest | None,
    out_given: bool = True,
) -> None:
    err = Console(stderr=True, highlight=False)
    err.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
    problems = exc.problems if isinstance(exc, SlaFileError) else []
    for problem in problems[1:] if len(problems) > 1 else []:
        err.print(f"  - {escape(problem)}", soft_wrap=True)
    if exc.hint:
        err.print(f"[dim]hint:[/] {escape(exc.hint)}", soft_wrap=True)
    summary = {
        "ok": False,
        "verdict": "error",
        "exit_code": exc.exit_code,
        "kind": exc.kind,
        "error": exc.message,
        "hint": exc.hint,
        "problems": problems,
        "run": describe_request(request) if request else None,
    }
    # a default folder the run never got to create is not made just for the error (only --out is)
    if out_dir is not None and (out_given or out_dir.exists()):
        with contextlib.suppress(OSError):  # an unwritable --out must not hide the real error
            summary["summary_path"] = str(write_summary(out_dir, summary))
    if json_output:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")


# The evidence options `gate` and `evidence` share.
ShadowFileOpt = Annotated[Path | None, typer.Option(help="Shadow evidence file (`gateway shadow --json`)")]
QualityFileOpt = Annotated[
    Path | None, typer.Option(help="Quality evidence file (`gateway quality report --json`)")
]
ChallengerOpt = Annotated[
    str | None, typer.Option(help="Fail unless the evidence is about this challenger version")
]


@app.command("gate", epilog=EXIT_CODE_HELP)
def gate(
    target: Annotated[
        str,
        typer.Option(help="Base URL (http://host:8080) or, for triton-grpc, host:port / grpcs://host:443"),
    ],
    sla: Annotated[str, typer.Option(help="SLA YAML file, or a bundled name: demo, strict")],
    user_class: Annotated[UserClassName, typer.Option(help="What to load")] = UserClassName.gateway,
    users: Annotated[int, typer.Option(min=1, help="Concurrent simulated users (peak, for step/spike)")] = 4,
    spawn_rate: Annotated[float, typer.Option(min=0.01, help="Users started per second")] = 4.0,
    run_time: Annotated[str, typer.Option(help="How long to load: 30s, 2m, 1m30s")] = "20s",
    shape: Annotated[ShapeName, typer.Option(help="Load shape over the run")] = ShapeName.steady,
    model: Annotated[str, typer.Option(help="Model name")] = "fraud-detector",
    model_version: Annotated[str, typer.Option(help="Model version; empty = the server's choice")] = "",
    model_repo: Annotated[
        Path,
        typer.Option(
            help="Model repository with the input example (Triton users); else the server's metadata"
        ),
    ] = Path("model_repo"),
    rows_per_request: Annotated[int, typer.Option(min=1, help="Rows (batch size) per request")] = 1,
    channels: Annotated[
        str,
        typer.Option(
            help="Values of the gateway rows' request-time field channel, comma-separated; empty: none"
        ),
    ] = "web,app,pos",
    request_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds per request before it fails")
    ] = 10.0,
    wait_ready: Annotated[
        float, typer.Option(min=0, help="Seconds to keep retrying the readiness check (0: one attempt)")
    ] = 0.0,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=1,
            help=f"Hard limit on Locust, s (default: run time + {STOP_TIMEOUT_S + STARTUP_ALLOWANCE_S})",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Report folder (default: loadtest-reports/<UTC time>-<user class>)", show_default=False
        ),
    ] = None,
    gateway: Annotated[
        str | None,
        typer.Option(help="Gateway URL for the SLA file's promotion evidence (shadow, quality)"),
    ] = None,
    shadow: ShadowFileOpt = None,
    quality: QualityFileOpt = None,
    challenger_version: ChallengerOpt = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the gateway's API key (for --gateway)")
    ] = API_KEY_ENV,
    evidence_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds per evidence request to the gateway")
    ] = FETCH_TIMEOUT_S,
    workers: Annotated[
        int,
        typer.Option(
            min=0,
            help="Locust worker processes started here (its distributed mode, about one per core; "
            "this process is the master); 0: one Locust process",
        ),
    ] = 0,
    remote_workers: Annotated[
        int,
        typer.Option(
            min=0,
            help="Locust workers started elsewhere (worker pods) that connect to --master-bind; "
            "the load waits for all of them",
        ),
    ] = 0,
    master_bind: Annotated[
        str, typer.Option(help="HOST:PORT the master listens on for --remote-workers")
    ] = "0.0.0.0:5557",
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout")] = False,
) -> None:
    """Check the target answers, run Locust headless against it, and judge every SLA line.

    When the SLA file has a promotion: section, its evidence (--gateway, or --shadow/--quality
    files) is read before the load and judged after the latency checks.
    Writes summary.json, report.md, Locust's CSV and HTML reports, its log, and latency.png
    into --out. API keys come from $LOADTESTS_API_KEY (never a flag).
    """
    # absolute: Locust runs in the report folder, and summary.json names files a reader can open
    out_dir = (out or default_out_dir(user_class.value)).expanduser().absolute()
    request: GateRequest | None = None
    console = Console(stderr=json_output, highlight=False)
    try:
        request = GateRequest(
            target=target,
            sla_path=resolve_sla_path(sla),
            user_class=user_class.value,
            users=users,
            spawn_rate=spawn_rate,
            run_time_s=parse_duration(run_time),
            shape=shape.value,
            out_dir=out_dir,
            options=LoadOptions(
                model=model,
                model_version=model_version,
                model_repo=str(model_repo.expanduser().absolute()),
                feature_repo=default_feature_repo(LoadOptions.feature_repo),
                rows_per_request=rows_per_request,
                channels=channels,
                request_timeout=request_timeout,
                api_key=os.environ.get(API_KEY_ENV, ""),
            ),
            wait_ready_s=wait_ready,
            hard_timeout_s=timeout,
            evidence=_evidence_source(gateway, shadow, quality, api_key_env, evidence_timeout),
            challenger_version=challenger_version,
            workers=parse_workers(workers, remote_workers, master_bind),
        )
        console.print(
            escape(
                f"gate: {request.user_class} on {target}, {users} users, {request.shape}, "
                f"{request.run_time_s} s, SLA {request.sla_path}"
                + (f", {request.workers.count} Locust workers" if request.workers else "")
            ),
            soft_wrap=True,
        )
        result = run_gate(request)
    except GateError as exc:
        _report_error(exc, json_output, out_dir, request, out_given=out is not None)
        raise typer.Exit(exc.exit_code) from None

    latency_ok = result.passed if result.latency_passed is None else result.latency_passed
    print_report(console, result.stats, result.checks, latency_ok, result.evidence_checks)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    summary_path = write_summary(out_dir, result.summary)
    write_markdown(out_dir, result.summary)
    console.print(
        escape(
            f"reports: {out_dir}/ (summary.json, report.md, locust_report.html, locust_*.csv, latency.png, "
            "locust.log)"
        )
    )
    if json_output:
        sys.stdout.write(json.dumps(result.summary | {"summary_path": str(summary_path)}, indent=2) + "\n")
    raise typer.Exit(result.exit_code)


def _evidence_source(
    gateway: str | None, shadow: Path | None, quality: Path | None, api_key_env: str, timeout: float
) -> EvidenceSource | None:
    if not gateway and shadow is None and quality is None:
        return None
    return EvidenceSource(
        gateway=gateway,
        shadow_file=shadow.expanduser() if shadow else None,
        quality_file=quality.expanduser() if quality else None,
        api_key=os.environ.get(api_key_env, "") if gateway else "",
        timeout_s=timeout,
    )


@app.command("evidence", epilog=EVIDENCE_EXIT_CODE_HELP)
def evidence(
    criteria: Annotated[
        str,
        typer.Option(
            help="YAML file with a promotion: section (a criteria file or an SLA file), or a bundled "
            "name: promotion"
        ),
    ],
    gateway: Annotated[
        str | None, typer.Option(help="Gateway URL: fetch /v1/models/{model}/shadow and /quality")
    ] = None,
    shadow: ShadowFileOpt = None,
    quality: QualityFileOpt = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Model name [default: the criteria's model:, else fraud-detector]", show_default=False
        ),
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(
            help="Evidence window, e.g. 30m, 1h, 1d [default: the criteria's window:]", show_default=False
        ),
    ] = None,
    challenger_version: ChallengerOpt = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the gateway's API key (sent as x-api-key)")
    ] = API_KEY_ENV,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds per request to the gateway")
    ] = FETCH_TIMEOUT_S,
    out: Annotated[
        Path | None, typer.Option(help="Also write summary.json and report.md here", show_default=False)
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout")] = False,
) -> None:
    """Judge the promotion criteria (shadow, quality) on the gateway's evidence; no load is sent.

    Every criterion the file sets is held, failed, or not judged (the evidence cannot answer it:
    null, too few rows or labels, shadow disabled); not judged fails like a miss. The API key
    comes from $LOADTESTS_API_KEY (or the variable --api-key-env names), never a flag.
    """
    console = Console(stderr=json_output, highlight=False)
    out_dir = out.expanduser().absolute() if out else None
    try:
        criteria_path = resolve_sla_path(criteria)
        promotion = load_sla(criteria_path).promotion
        if promotion is None:
            raise SlaFileError(
                f"{criteria_path} has no 'promotion' section: no evidence criteria to judge",
                hint="see loadtests/sla/promotion.yaml",
            )
        if window is not None:
            try:
                window_seconds(window)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        subject = Subject(
            model or promotion.model or "fraud-detector", window or promotion.window, challenger_version
        )
        source = _evidence_source(gateway, shadow, quality, api_key_env, timeout) or EvidenceSource()
        console.print(
            escape(f"evidence: {subject.model}, window {subject.window}, criteria {criteria_path}"),
            soft_wrap=True,
        )
        found = collect_evidence(source, promotion, subject)
    except GateError as exc:
        _report_error(exc, json_output, out_dir, None)
        raise typer.Exit(exc.exit_code) from None

    checks = judge(promotion, found)
    ok = evidence_passed(checks)
    code = EXIT_PASS if ok else EXIT_EVIDENCE_MISSED
    summary = {
        "ok": ok,
        "verdict": "pass" if ok else "fail",
        "exit_code": code,
        "criteria": str(criteria_path),
        "promotion": promotion_summary(subject, found, checks),
    }
    print_evidence(console, checks, ok)
    if out_dir is not None:
        summary["summary_path"] = str(write_summary(out_dir, summary))
        write_markdown(out_dir, summary)
    if json_output:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    raise typer.Exit(code)


def main() -> None:
    """Console-script entry point (``loadtests = "loadtests.cli:main"``)."""
    from typer._click import exceptions as click  # Typer 0.29 vendors Click

    try:
        code = app(prog_name="loadtests", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        exc.show()
        code = exc.exit_code
    except click.ClickException as exc:  # Click's usage errors take the contract's shape too
        command = getattr(getattr(exc, "ctx", None), "command_path", None) or "loadtests"
        _report_error(UsageError(exc.format_message(), hint=f"see `{command} --help`"), False, None, None)
        code = UsageError.exit_code
    sys.exit(code if isinstance(code, int) else 0)
