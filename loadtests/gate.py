"""The gate, end to end: SLA file -> target check -> Locust run -> stats -> verdict -> reports.

Cheap checks come first, so a bad SLA file or a down target fails in seconds without any load;
only then does Locust run (in its own process). When the SLA file has a ``promotion:`` section,
its evidence (shadow, quality) is fetched before the load too -- an unreachable gateway fails
in seconds, and an hour's window does not move in a minute of load -- and judged after the
latency checks. The result carries everything the CLI prints and writes; this module prints
nothing itself.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtests.errors import (
    EXIT_EVIDENCE_MISSED,
    EXIT_PASS,
    EXIT_SLA_MISSED,
    LocustFailedError,
    SlaFileError,
    UsageError,
)
from loadtests.evaluate import Check, evaluate, passed
from loadtests.evidence import Evidence, EvidenceSource, Subject, collect_evidence
from loadtests.plot import PlotSkipped, limits_from_sla, plot_latency
from loadtests.probe import check_target, make_probe
from loadtests.promotion import EvidenceCheck, evidence_passed, judge, promotion_summary
from loadtests.runner import LocustRun, Workers, log_tail, run_locust
from loadtests.settings import LoadOptions
from loadtests.sla import Sla, load_sla
from loadtests.stats import EndpointStats, read_failures, read_history, read_stats
from loadtests.targets import USER_CLASSES, normalize_target

PLOT_NAME = "latency.png"
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")


def parse_duration(text: str) -> int:
    """``"30s"``, ``"2m"``, ``"1m30s"``, ``"90"`` -> seconds (at least 1)."""
    match = _DURATION.match(text.strip())
    if not match or not any(match.groups()):
        raise UsageError(f"bad duration {text!r}", hint="write e.g. 30s, 2m, 1m30s or 90")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total < 1:
        raise UsageError(f"duration {text!r} is shorter than one second")
    return total


def default_out_dir(user_class: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("loadtest-reports") / f"{stamp}-{user_class}"


@dataclass(frozen=True)
class GateRequest:
    """One gate run, as the CLI parsed it."""

    target: str
    sla_path: Path
    user_class: str = "gateway"
    users: int = 4
    spawn_rate: float = 4.0
    run_time_s: int = 20
    shape: str = "steady"
    out_dir: Path = field(default_factory=lambda: default_out_dir("gateway"))
    options: LoadOptions = field(default_factory=LoadOptions)
    wait_ready_s: float = 0.0
    hard_timeout_s: float | None = None
    evidence: EvidenceSource | None = None  # where the promotion section's evidence comes from
    challenger_version: str | None = None  # the evidence must be about this challenger
    workers: Workers | None = None  # Locust's distributed mode (loadtests/runner.py); None: one process


@dataclass
class GateResult:
    """What the gate found; ``summary`` is what goes to summary.json."""

    passed: bool
    exit_code: int
    stats: list[EndpointStats]
    checks: list[Check]
    summary: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    evidence_checks: list[EvidenceCheck] = field(default_factory=list)
    latency_passed: bool | None = None  # None: read ``passed`` (no promotion section)


def parse_workers(local: int, remote: int, master_bind: str) -> Workers | None:
    """``--workers``/``--remote-workers``/``--master-bind`` as a Workers (None: one process)."""
    if local and remote:
        raise UsageError(
            "--workers and --remote-workers both given",
            hint="the workers are started here or elsewhere, not both",
        )
    if not remote:
        return Workers(local) if local else None
    host, _, port = master_bind.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--master-bind {master_bind!r} is not HOST:PORT", hint="e.g. 0.0.0.0:5557")
    return Workers(remote, local=False, bind_host=host, bind_port=int(port))


def describe_request(request: GateRequest) -> dict[str, Any]:
    """The run's parameters, as recorded in summary.json."""
    return {
        "target": request.target,
        "sla": str(request.sla_path),
        "user_class": request.user_class,
        "users": request.users,
        "spawn_rate": request.spawn_rate,
        "run_time_s": request.run_time_s,
        "shape": request.shape,
        "model": request.options.model,
        "model_version": request.options.model_version,
        "rows_per_request": request.options.rows_per_request,
        "workers": _describe_workers(request.workers),
    }


def _describe_workers(workers: Workers | None) -> dict[str, Any] | None:
    if workers is None:
        return None
    return {"count": workers.count, "where": "local" if workers.local else "remote"}


def _gate_sla(request: GateRequest) -> Sla:
    sla = load_sla(request.sla_path)
    if not sla.endpoints:
        raise SlaFileError(
            f"SLA file {request.sla_path} has no 'endpoints': nothing for a load test to judge",
            hint="a file with only promotion criteria is for `loadtests evidence --criteria FILE`",
        )
    return sla


def _gather_evidence(request: GateRequest, sla: Sla, notes: list[str]) -> tuple[Subject, Evidence] | None:
    """The promotion evidence, before any load; None when the SLA file asks for none."""
    if sla.promotion is None:
        if request.evidence is not None:
            notes.append("evidence options ignored: the SLA file has no promotion section")
        return None
    if request.evidence is None:
        raise UsageError(
            f"SLA file {request.sla_path} has promotion criteria but no evidence source was given",
            hint="add --gateway URL (or --shadow/--quality FILE), or run `loadtests evidence` on its own",
        )
    subject = Subject(
        sla.promotion.model or request.options.model, sla.promotion.window, request.challenger_version
    )
    return subject, collect_evidence(request.evidence, sla.promotion, subject)


def run_gate(request: GateRequest) -> GateResult:
    """Run the whole gate; GateError subclasses for everything that prevents a verdict."""
    if request.user_class not in USER_CLASSES:
        raise UsageError(f"unknown user class {request.user_class!r}", hint="use " + ", ".join(USER_CLASSES))
    if request.users < 1 or request.spawn_rate <= 0:
        raise UsageError("--users must be at least 1 and --spawn-rate above 0")
    if request.workers is not None and request.users < request.workers.count:
        raise UsageError(
            f"--users {request.users} for {request.workers.count} Locust workers: a worker would get no user",
            hint="ask for at least as many users as workers",
        )
    user_class = USER_CLASSES[request.user_class]
    target = normalize_target(user_class, request.target)
    sla = _gate_sla(request)
    notes: list[str] = []
    gathered = _gather_evidence(request, sla, notes)
    check_target(
        make_probe(
            user_class, target, request.options.model, request.options.model_version, request.options.api_key
        ),
        wait_s=request.wait_ready_s,
    )

    run = LocustRun(
        locust_class=user_class.locust_class,
        host=target,
        users=request.users,
        spawn_rate=request.spawn_rate,
        run_time_s=request.run_time_s,
        shape=request.shape,
        out_dir=request.out_dir.absolute(),
        options=request.options,
        hard_timeout_s=request.hard_timeout_s,
        workers=request.workers,
    )
    started_at = datetime.now(UTC)
    start = time.monotonic()
    run_locust(run)
    stats = read_stats(run.csv_prefix)
    total = next((s for s in stats if s.is_aggregate), None)
    if total is None or total.requests == 0:
        raise LocustFailedError(
            "Locust sent no requests (every user failed before its first request?)\n"
            f"--- last lines of {run.log_path} ---\n{log_tail(run.log_path)}",
            hint=f"see {run.csv_prefix}_exceptions.csv and {run.log_path}",
        )
    checks = evaluate(sla, stats)
    latency_ok = passed(checks)
    evidence_checks: list[EvidenceCheck] = []
    promotion: dict[str, Any] | None = None
    if gathered is not None and sla.promotion is not None:
        subject, evidence = gathered
        evidence_checks = judge(sla.promotion, evidence)
        promotion = promotion_summary(subject, evidence, evidence_checks)
    evidence_ok = gathered is None or evidence_passed(evidence_checks)
    verdict = latency_ok and evidence_ok
    # a latency miss is reported first: the candidate is too slow whatever its evidence says
    exit_code = EXIT_PASS if verdict else EXIT_SLA_MISSED if not latency_ok else EXIT_EVIDENCE_MISSED

    plot_path: Path | None = run.out_dir / PLOT_NAME
    try:
        title = f"{request.user_class} on {target}: {request.shape}, {request.users} users"
        plot_latency(read_history(run.csv_prefix), run.out_dir / PLOT_NAME, title, limits_from_sla(sla))
    except PlotSkipped as exc:
        notes.append(f"no latency plot: {exc}")
        plot_path = None

    summary = {
        "ok": verdict,
        "verdict": "pass" if verdict else "fail",
        "exit_code": exit_code,
        "run": describe_request(request)
        | {
            "started_at": started_at.isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - start, 2),
        },
        "sla": {"path": str(request.sla_path), "description": sla.description},
        "endpoints": [s.to_json() for s in stats],
        "checks": [c.to_json() for c in checks],
        "latency_ok": latency_ok,
        "violations": [f"{c.endpoint}: {c.detail}" for c in checks if not c.passed]
        + [f"{c.name}: {c.status}: {c.detail}" for c in evidence_checks if not c.passed],
        "promotion": promotion,
        "failures": read_failures(run.csv_prefix),
        "reports": {
            "stats_csv": f"{run.csv_prefix}_stats.csv",
            "history_csv": f"{run.csv_prefix}_stats_history.csv",
            "failures_csv": f"{run.csv_prefix}_failures.csv",
            "html": str(run.html_path),
            "json": str(run.json_path),
            "plot": str(plot_path) if plot_path else None,
            "log": str(run.log_path),
        },
        "locust_command": run.command(),
        "notes": notes,
    }
    return GateResult(verdict, exit_code, stats, checks, summary, notes, evidence_checks, latency_ok)
