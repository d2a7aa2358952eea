"""The gate end to end against the real embedded Triton: a loose SLA passes, an impossible one
fails naming the violation, and the reports are all there. Runs are short (5-6 s, 2 users): the
machine has 2 cores shared by Triton and Locust."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.errors import EXIT_EVIDENCE_MISSED, EXIT_PASS, EXIT_SLA_MISSED
from tests.loadtests.helpers import QUALITY, SHADOW, Served, changed, run_cli

pytestmark = pytest.mark.integration

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_loose_sla_passes_and_writes_every_report(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = run_cli(
        "gate",
        "--target",
        served.http_url,
        "--sla",
        "demo",
        "--user-class",
        "triton-http",
        "--model",
        served.model,
        "--model-repo",
        str(served.repo),
        "--users",
        "2",
        "--spawn-rate",
        "2",
        "--run-time",
        "6s",
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == EXIT_PASS, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["verdict"] == "pass" and summary["violations"] == []
    total = next(e for e in summary["endpoints"] if e["name"] == "Aggregated")
    assert total["requests"] > 50 and total["failures"] == 0
    assert {(e["type"], e["name"]) for e in summary["endpoints"]} == {("POST", "infer"), ("", "Aggregated")}
    assert "SLA: PASS" in proc.stderr  # with --json the tables go to stderr
    for name in (
        "summary.json",
        "locust_report.html",
        "locust_stats.csv",
        "locust_stats_history.csv",
        "locust_failures.csv",
        "locust_stats.json",
        "locust.log",
    ):
        assert (out / name).is_file(), name
    assert (out / "latency.png").read_bytes().startswith(PNG_MAGIC)
    assert json.loads((out / "summary.json").read_text())["verdict"] == "pass"


def test_impossible_sla_fails_naming_endpoint_and_margin(served: Served, tmp_path: Path) -> None:
    sla = tmp_path / "impossible.yaml"
    sla.write_text(
        "description: no server does this\n"
        "endpoints:\n"
        "  - name: Aggregated\n"
        "    min_rps: 1000000\n"
        "  - name: infer\n"
        "    type: grpc\n"
        "    p50_ms: 0.001\n"
    )
    out = tmp_path / "report"
    proc = run_cli(
        "gate",
        "--target",
        served.grpc_url,
        "--sla",
        str(sla),
        "--user-class",
        "triton-grpc",
        "--model",
        served.model,
        "--model-repo",
        str(served.repo),
        "--shape",
        "spike",
        "--users",
        "3",
        "--run-time",
        "5s",
        "--out",
        str(out),
    )
    assert proc.returncode == EXIT_SLA_MISSED, proc.stderr
    assert "SLA: FAIL" in proc.stdout
    assert "missed: Aggregated: rps" in proc.stdout and "< 1000000.0 req/s: missed by" in proc.stdout
    assert "missed: infer [grpc]: p50" in proc.stdout and "> 0.001 ms: missed by" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_code"] == EXIT_SLA_MISSED and summary["run"]["shape"] == "spike"
    misses = {(c["endpoint"], c["metric"]) for c in summary["checks"] if not c["passed"]}
    assert misses == {("Aggregated", "min_rps"), ("infer [grpc]", "p50_ms")}
    assert all(c["miss_by"] > 0 for c in summary["checks"] if not c["passed"])


def test_fast_candidate_with_worse_quality_fails_on_evidence_not_latency(
    served: Served, tmp_path: Path
) -> None:
    """The gate's one run with promotion criteria: latency passes, the challenger's AUC is too
    far below the champion's, so the gate exits 6 and both verdicts are in every report."""
    sla = tmp_path / "sla.yaml"
    sla.write_text(
        "endpoints:\n  - name: Aggregated\n    p99_ms: 5000\n    max_error_rate: 0.05\n"
        "promotion:\n  model: fraud-detector\n  shadow: {min_agreement: 0.98}\n"
        "  quality: {min_labels: 200, max_worse: {auc: 0.01}}\n"
    )
    (tmp_path / "shadow.json").write_text(json.dumps(SHADOW))
    (tmp_path / "quality.json").write_text(json.dumps(changed(QUALITY, "versions.1.metrics.auc", 0.8)))
    out = tmp_path / "report"
    proc = run_cli(
        "gate",
        "--target",
        served.http_url,
        "--sla",
        str(sla),
        "--user-class",
        "triton-http",
        "--model",
        served.model,
        "--model-repo",
        str(served.repo),
        "--users",
        "2",
        "--run-time",
        "5s",
        "--shadow",
        str(tmp_path / "shadow.json"),
        "--quality",
        str(tmp_path / "quality.json"),
        "--out",
        str(out),
        "--json",
    )
    assert proc.returncode == EXIT_EVIDENCE_MISSED, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["latency_ok"] and not summary["ok"] and summary["exit_code"] == EXIT_EVIDENCE_MISSED
    statuses = {c["name"]: c["status"] for c in summary["promotion"]["checks"]}
    assert statuses == {
        "shadow.min_agreement": "held",
        "quality.min_labels": "held",
        "quality.max_worse.auc": "failed",
    }
    assert summary["violations"] == [
        "quality.max_worse.auc: failed: 0.8 vs champion 0.91: worse by 0.11 > 0.01 allowed"
    ]
    assert "SLA: PASS" in proc.stderr and "evidence: FAIL" in proc.stderr
    report = (out / "report.md").read_text()
    assert "## Latency" in report and "## Evidence: FAIL" in report
    assert (out / "latency.png").read_bytes().startswith(PNG_MAGIC)
