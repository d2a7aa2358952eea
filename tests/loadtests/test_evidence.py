"""The promotion gate on live evidence: shadow agreement and labelled quality, judged against
the criteria of ``loadtests/sla/promotion.yaml`` (or an SLA file's ``promotion:`` section).

The evidence documents here are constructed in the shapes the gateway serves
(``GET /v1/models/{model}/shadow`` and ``/quality``, also printed by ``gateway shadow --json``
and ``gateway quality report --json``). Each criterion is made to fail on its own, at its
boundary, with a null figure, a missing section, a disabled shadow. No load is sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.runtime.ports import free_port
from loadtests.criteria import PromotionCriteria
from loadtests.errors import (
    EXIT_BAD_SLA,
    EXIT_EVIDENCE_MISSED,
    EXIT_EVIDENCE_UNAVAILABLE,
    EXIT_PASS,
    EXIT_USAGE,
)
from loadtests.evidence import Evidence, QualityReport, ShadowReport
from loadtests.promotion import FAILED, HELD, NOT_JUDGED, evidence_passed, judge, promotion_summary
from loadtests.report import render_markdown
from loadtests.sla import load_sla, resolve_sla_path
from tests.loadtests.helpers import QUALITY, REPO_ROOT, SHADOW, changed, run_cli

FAST_S = 10
# the bundled criteria: min_rows 1000, min_agreement 0.98, max_error_rate 0.01,
# max_score_psi 0.1, max_p99_difference 0.05; min_labels 200, max_worse auc 0.01, log_loss 0.02
CRITERIA = load_sla(resolve_sla_path("promotion")).promotion
assert CRITERIA is not None


def statuses(shadow: dict[str, Any] | None, quality: dict[str, Any] | None) -> dict[str, str]:
    """Judge the bundled criteria on the documents: criterion name -> status."""
    assert CRITERIA is not None
    evidence = Evidence(
        ShadowReport.model_validate(shadow) if shadow else None,
        QualityReport.model_validate(quality) if quality else None,
    )
    return {c.name: c.status for c in judge(CRITERIA, evidence)}


def write_docs(tmp_path: Path, shadow: dict[str, Any], quality: dict[str, Any]) -> list[str]:
    (tmp_path / "shadow.json").write_text(json.dumps(shadow))
    (tmp_path / "quality.json").write_text(json.dumps(quality))
    return ["--shadow", str(tmp_path / "shadow.json"), "--quality", str(tmp_path / "quality.json")]


def error_line(stderr: str) -> str:
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    return line


# --- judging ---------------------------------------------------------------------------------


def test_the_gateways_example_documents_hold_every_bundled_criterion() -> None:
    found = statuses(SHADOW, QUALITY)
    assert found == {
        "shadow.min_rows": HELD,
        "shadow.min_agreement": HELD,
        "shadow.max_error_rate": HELD,
        "shadow.max_score_psi": HELD,
        "shadow.max_p99_difference": HELD,
        "quality.min_labels": HELD,
        "quality.max_worse.auc": HELD,
        "quality.max_worse.log_loss": HELD,
    }


@pytest.mark.parametrize(
    ("path", "boundary", "past"),
    [
        ("rows", 1000, 999),
        ("agreement", 0.98, 0.9799),
        ("error_rate", 0.01, 0.0101),
        ("score_psi", 0.1, 0.1001),
        ("difference.p99", 0.05, 0.0501),
    ],
)
def test_each_shadow_criterion_holds_at_its_boundary_and_fails_just_past_it(
    path: str, boundary: float, past: float
) -> None:
    criterion = {
        "rows": "min_rows",
        "agreement": "min_agreement",
        "error_rate": "max_error_rate",
        "score_psi": "max_score_psi",
        "difference.p99": "max_p99_difference",
    }[path]
    assert set(statuses(changed(SHADOW, path, boundary), QUALITY).values()) == {HELD}
    found = statuses(changed(SHADOW, path, past), QUALITY)
    assert found[f"shadow.{criterion}"] == FAILED
    others = {k: v for k, v in found.items() if k != f"shadow.{criterion}"}
    if criterion == "min_rows":  # too few rows: the other shadow figures are not judged
        assert {v for k, v in others.items() if k.startswith("shadow.")} == {NOT_JUDGED}
        assert {v for k, v in others.items() if k.startswith("quality.")} == {HELD}
    else:
        assert set(others.values()) == {HELD}


@pytest.mark.parametrize(
    ("metric", "champion", "boundary", "past"),
    [
        ("auc", 0.91, 0.90, 0.8999),  # higher is better: 0.01 worse is allowed
        ("log_loss", 0.2, 0.22, 0.2201),  # lower is better: 0.02 worse is allowed
    ],
)
def test_quality_margins_follow_each_metrics_direction(
    metric: str, champion: float, boundary: float, past: float
) -> None:
    at = changed(
        changed(QUALITY, f"versions.0.metrics.{metric}", champion), f"versions.1.metrics.{metric}", boundary
    )
    assert statuses(SHADOW, at)[f"quality.max_worse.{metric}"] == HELD
    worse = changed(at, f"versions.1.metrics.{metric}", past)
    found = statuses(SHADOW, worse)
    assert found[f"quality.max_worse.{metric}"] == FAILED
    assert [k for k, v in found.items() if v != HELD] == [f"quality.max_worse.{metric}"]
    # better than the champion by any amount holds
    better = champion + 0.1 if metric == "auc" else champion - 0.1
    assert (
        statuses(SHADOW, changed(at, f"versions.1.metrics.{metric}", better))[f"quality.max_worse.{metric}"]
        == HELD
    )


def test_a_worse_challenger_is_reported_with_the_margin() -> None:
    assert CRITERIA is not None
    quality = changed(QUALITY, "versions.1.metrics.auc", 0.85)
    evidence = Evidence(ShadowReport.model_validate(SHADOW), QualityReport.model_validate(quality))
    checks = judge(CRITERIA, evidence)
    (auc,) = [c for c in checks if c.criterion == "max_worse.auc"]
    assert auc.status == FAILED and auc.observed == pytest.approx(0.06) and auc.threshold == 0.01
    assert "0.85 vs champion 0.91: worse by 0.06 > 0.01 allowed" in auc.detail
    assert not evidence_passed(checks)


@pytest.mark.parametrize(
    ("shadow", "quality", "not_judged"),
    [
        # a model kind without labels: agreement is null
        (changed(SHADOW, "agreement", None), QUALITY, {"shadow.min_agreement"}),
        (changed(SHADOW, "score_psi", None), QUALITY, {"shadow.max_score_psi"}),
        # a metric null on either side
        (SHADOW, changed(QUALITY, "versions.1.metrics.auc", None), {"quality.max_worse.auc"}),
        (SHADOW, changed(QUALITY, "versions.0.metrics.log_loss", None), {"quality.max_worse.log_loss"}),
        # a section missing from the document
        ({k: v for k, v in SHADOW.items() if k != "difference"}, QUALITY, {"shadow.max_p99_difference"}),
        (
            SHADOW,
            changed(QUALITY, "versions.0.metrics", {"auc": 0.91}),
            {"quality.max_worse.log_loss"},
        ),
        # no challenger in the quality report: nothing of it can be judged
        (
            SHADOW,
            changed(QUALITY, "versions", QUALITY["versions"][:1]),
            {"quality.min_labels", "quality.max_worse.auc", "quality.max_worse.log_loss"},
        ),
        # too few labels: the margins are not judged (and min_labels fails)
        (
            SHADOW,
            changed(QUALITY, "versions.1.rows", 150),
            {"quality.max_worse.auc", "quality.max_worse.log_loss"},
        ),
    ],
)
def test_missing_evidence_is_not_judged_and_fails(
    shadow: dict[str, Any], quality: dict[str, Any], not_judged: set[str]
) -> None:
    found = statuses(shadow, quality)
    assert {k for k, v in found.items() if v == NOT_JUDGED} == not_judged
    assert CRITERIA is not None
    assert not evidence_passed(judge(CRITERIA, _evidence(shadow, quality)))


def _evidence(shadow: dict[str, Any], quality: dict[str, Any]) -> Evidence:
    return Evidence(ShadowReport.model_validate(shadow), QualityReport.model_validate(quality))


def test_a_disabled_shadow_leaves_every_shadow_criterion_not_judged() -> None:
    disabled = {"model": "fraud-detector", "enabled": False, "reason": "no shadow configured"}
    found = statuses(disabled, QUALITY)
    assert {v for k, v in found.items() if k.startswith("shadow.")} == {NOT_JUDGED}
    assert {v for k, v in found.items() if k.startswith("quality.")} == {HELD}


def test_criteria_a_file_does_not_set_are_not_checked() -> None:
    only_quality = PromotionCriteria.model_validate({"quality": {"max_worse": {"auc": 0.01}}})
    checks = judge(only_quality, Evidence(None, QualityReport.model_validate(QUALITY)))
    assert [c.name for c in checks] == ["quality.max_worse.auc"] and evidence_passed(checks)


def test_the_report_shows_evidence_beside_latency() -> None:
    assert CRITERIA is not None
    from loadtests.evidence import Subject

    quality = changed(QUALITY, "versions.1.metrics.auc", None)
    evidence = _evidence(SHADOW, quality)
    checks = judge(CRITERIA, evidence)
    summary = {
        "verdict": "fail",
        "exit_code": EXIT_EVIDENCE_MISSED,
        "checks": [
            {
                "endpoint": "Aggregated",
                "metric": "p95_ms",
                "passed": True,
                "skipped": False,
                "detail": "p95 5 ms ≤ 10 ms",
            }
        ],
        "promotion": promotion_summary(Subject("fraud-detector", "1h"), evidence, checks),
    }
    text = render_markdown(summary)
    assert "## Latency" in text and "| Aggregated | p95_ms | pass p95 5 ms ≤ 10 ms |" in text
    assert "## Evidence: FAIL" in text
    assert "| shadow.min_agreement | 0.98 | 0.991 | held: 0.991 ≥ 0.98 |" in text
    assert (
        "| quality.max_worse.auc | 0.01 | n/a | **NOT JUDGED**: auc is null for the challenger (v2)" in text
    )


# --- the command, on files -------------------------------------------------------------------


def test_evidence_command_passes_on_good_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli(
        "evidence",
        "--criteria",
        "promotion",
        *write_docs(tmp_path, SHADOW, QUALITY),
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == EXIT_PASS, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["promotion"]["challenger_version"] is None
    assert [c["status"] for c in summary["promotion"]["checks"]] == [HELD] * 8
    assert "evidence: PASS" in proc.stderr and "shadow.min_agreement" in proc.stderr
    assert json.loads((out / "summary.json").read_text())["verdict"] == "pass"
    assert "## Evidence: PASS" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    ("shadow", "quality", "line"),
    [
        (changed(SHADOW, "agreement", 0.9), QUALITY, "missed: shadow.min_agreement: 0.9 < 0.98"),
        (
            {"model": "fraud-detector", "enabled": False, "reason": "no shadow configured"},
            QUALITY,
            "not judged: shadow.min_rows: shadow not enabled: no shadow configured",
        ),
        (SHADOW, changed(QUALITY, "versions.1.metrics.auc", None), "not judged: quality.max_worse.auc"),
    ],
)
def test_evidence_command_fails_with_exit_6_naming_the_criterion(
    tmp_path: Path, shadow: dict[str, Any], quality: dict[str, Any], line: str
) -> None:
    proc = run_cli("evidence", "--criteria", "promotion", *write_docs(tmp_path, shadow, quality))
    assert proc.returncode == EXIT_EVIDENCE_MISSED, proc.stderr
    assert "evidence: FAIL" in proc.stdout
    assert line in proc.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--shadow", "{dir}/nope.json", "--quality", "{dir}/quality.json"],
            EXIT_EVIDENCE_UNAVAILABLE,
            "cannot read shadow evidence file",
        ),
        (
            ["--shadow", "{dir}/quality.json", "--quality", "{dir}/quality.json"],
            EXIT_EVIDENCE_UNAVAILABLE,
            "is not a gateway ShadowReport: enabled: Field required",
        ),
        (
            ["--shadow", "{dir}/shadow.json", "--quality", "{dir}/quality.json", "--model", "other"],
            EXIT_EVIDENCE_UNAVAILABLE,
            "is about model 'fraud-detector', not 'other'",
        ),
        (
            ["--shadow", "{dir}/shadow.json", "--quality", "{dir}/quality.json", "--window", "30m"],
            EXIT_EVIDENCE_UNAVAILABLE,
            "covers 3600 s, the criteria ask for 30m",
        ),
        (
            ["--shadow", "{dir}/shadow.json", "--quality", "{dir}/quality.json", "--challenger-version", "3"],
            EXIT_EVIDENCE_UNAVAILABLE,
            "challenger version 2, not the candidate 3",
        ),
        (["--shadow", "{dir}/shadow.json"], EXIT_USAGE, "no --quality FILE was given"),
        ([], EXIT_USAGE, "no evidence source"),
        (["--gateway", "http://x:1", "--shadow", "{dir}/shadow.json"], EXIT_USAGE, "not both"),
        (["--gateway", "x:1"], EXIT_USAGE, "bad gateway URL"),
        (
            ["--shadow", "{dir}/shadow.json", "--quality", "{dir}/quality.json", "--window", "soon"],
            EXIT_USAGE,
            "not a duration",
        ),
    ],
)
def test_evidence_that_cannot_be_had_is_one_clear_line(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    write_docs(tmp_path, SHADOW, QUALITY)
    proc = run_cli("evidence", "--criteria", "promotion", *(a.format(dir=tmp_path) for a in args))
    assert proc.returncode == code, proc.stderr
    assert message in error_line(proc.stderr)
    assert "Traceback" not in proc.stderr


def test_a_criteria_file_is_checked_like_an_sla_file(tmp_path: Path) -> None:
    bad = tmp_path / "criteria.yaml"
    bad.write_text("promotion:\n  quality:\n    max_worse: {f1: 0.01}\n")
    proc = run_cli("evidence", "--criteria", str(bad), *write_docs(tmp_path, SHADOW, QUALITY))
    assert proc.returncode == EXIT_BAD_SLA
    assert "promotion.quality.max_worse: unknown metric 'f1'" in error_line(proc.stderr)
    proc = run_cli("evidence", "--criteria", "demo", *write_docs(tmp_path, SHADOW, QUALITY))
    assert proc.returncode == EXIT_BAD_SLA and "has no 'promotion' section" in proc.stderr


# --- the command, on a live gateway's endpoints ----------------------------------------------


class EvidenceEndpoints:
    """Stands in for the gateway's two read endpoints (``GET /v1/models/{model}/shadow`` and
    ``/quality``; their own tests are with the gateway's): serves the constructed documents on
    127.0.0.1:<free port>, wants ``x-api-key`` when ``key`` is set, and records what was asked."""

    def __init__(self, documents: dict[str, dict[str, Any]], key: str = "") -> None:
        self.requests: list[str] = []
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                endpoints.requests.append(self.path)
                path, _, query = self.path.partition("?")
                kind = path.rsplit("/", 1)[-1]
                if key and self.headers.get("x-api-key") != key:
                    code, body = 401, {"error": "missing or wrong API key"}
                elif (
                    path.startswith("/v1/models/fraud-detector/")
                    and kind in documents
                    and query == "window=1h"
                ):
                    code, body = 200, documents[kind]
                else:
                    code, body = 404, {"error": f"no route {path}"}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> EvidenceEndpoints:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def gateway() -> Iterator[EvidenceEndpoints]:
    with EvidenceEndpoints({"shadow": SHADOW, "quality": QUALITY}, key="k3y") as server:
        yield server


def test_evidence_is_fetched_from_the_gateway_with_the_api_key(gateway: EvidenceEndpoints) -> None:
    proc = run_cli(
        "evidence",
        "--criteria",
        "promotion",
        "--gateway",
        gateway.url,
        "--challenger-version",
        "2",
        "--json",
        env={"LOADTESTS_API_KEY": "k3y"},
    )
    assert proc.returncode == EXIT_PASS, proc.stderr
    assert gateway.requests == [
        "/v1/models/fraud-detector/shadow?window=1h",
        "/v1/models/fraud-detector/quality?window=1h",
    ]
    summary = json.loads(proc.stdout)
    assert summary["promotion"]["sources"] == {"shadow": gateway.url, "quality": gateway.url}
    assert summary["promotion"]["shadow"]["agreement"] == 0.991


def test_a_refused_key_and_an_unknown_model_are_unavailable_evidence(gateway: EvidenceEndpoints) -> None:
    proc = run_cli(
        "evidence", "--criteria", "promotion", "--gateway", gateway.url, env={"LOADTESTS_API_KEY": "bad"}
    )
    assert proc.returncode == EXIT_EVIDENCE_UNAVAILABLE
    assert "gateway refused the shadow evidence request (HTTP 401)" in error_line(proc.stderr)
    assert "LOADTESTS_API_KEY" in proc.stderr  # the hint
    proc = run_cli(
        "evidence",
        "--criteria",
        "promotion",
        "--gateway",
        gateway.url,
        "--model",
        "nope",
        env={"LOADTESTS_API_KEY": "k3y"},
    )
    assert proc.returncode == EXIT_EVIDENCE_UNAVAILABLE
    assert "gateway has no shadow evidence for model 'nope' (HTTP 404)" in error_line(proc.stderr)


def test_an_unreachable_gateway_fails_fast_with_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    proc = run_cli("evidence", "--criteria", "promotion", "--gateway", url, "--json")
    assert time.monotonic() - start < FAST_S
    assert proc.returncode == EXIT_EVIDENCE_UNAVAILABLE
    assert error_line(proc.stderr).startswith(
        f"error: gateway not reachable for shadow evidence: {url}/v1/models/"
    )
    assert json.loads(proc.stdout)["kind"] == "evidence-unavailable"


def test_the_release_workflow_runs_the_shadow_gate_between_load_gate_and_canary() -> None:
    """The pipeline a team copies: export, validate, load gate, shadow gate, canary, promote;
    every flag its evidence step passes is one `loadtests evidence` accepts."""
    workflow = yaml.safe_load((REPO_ROOT / ".github/workflows/release.yml").read_text())
    steps = workflow["jobs"]["release"]["steps"]
    runs = [" ".join(str(s.get("run", "")).split()) for s in steps]

    def first(command: str) -> int:
        return next(i for i, run in enumerate(runs) if command in run)

    order = ["builder export", "builder validate", "loadtests gate", "loadtests evidence"]
    order += ["builder release apply", "builder release promote"]
    assert [first(c) for c in order] == sorted(first(c) for c in order)
    evidence_run = runs[first("loadtests evidence")]
    flags = {word for word in evidence_run.split() if word.startswith("--")}
    help_text = run_cli("evidence", "--help").stdout
    assert flags and all(flag in help_text for flag in flags), flags
    assert "--challenger-version" in flags and "--gateway" in flags


def test_the_files_gateway_shadow_json_writes_are_read_as_written(tmp_path: Path) -> None:
    """``gateway shadow --json`` (what the docs say to write) wraps its reports as
    ``{"reports": [...]}``, one per model: the model's report is picked from it."""
    other = {**SHADOW, "model": "another-model"}
    args = write_docs(tmp_path, {"reports": [other, SHADOW]}, QUALITY)
    proc = run_cli("evidence", "--criteria", "promotion", *args, "--json")
    assert proc.returncode == EXIT_PASS, proc.stderr
    missing = write_docs(tmp_path, {"reports": [other]}, QUALITY)
    proc = run_cli("evidence", "--criteria", "promotion", *missing)
    assert proc.returncode == EXIT_EVIDENCE_UNAVAILABLE
    assert "none of model 'fraud-detector'" in error_line(proc.stderr)


def test_evidence_help_lists_its_own_exit_codes() -> None:
    proc = run_cli("evidence", "--help")
    help_text = " ".join(proc.stdout.split())
    assert (
        "0 every promotion criterion held" in help_text and "7 the evidence could not be fetched" in help_text
    )
    assert "Locust" not in help_text and "SLA line" not in help_text
