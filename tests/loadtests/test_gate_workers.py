"""The gate on Locust's distributed mode: a master and worker processes against the real
embedded Triton, the workers' load aggregated into the reports the gate judges as it judges one
process's; and the refusals of the new options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from loadtests.errors import EXIT_PASS, EXIT_USAGE
from tests.loadtests.helpers import Served, run_cli

pytestmark = pytest.mark.integration

USERS = 4


def _successes(served: Served) -> int:
    """Inferences Triton answered for the model (its statistics extension)."""
    stats = requests.get(f"{served.http_url}/v2/models/{served.model}/stats", timeout=5).json()
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats["model_stats"])


def _gate(served: Served, out: Path, *extra: str) -> tuple[int, dict, str]:
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
        str(USERS),
        "--spawn-rate",
        str(USERS),
        "--run-time",
        "6s",
        "--out",
        str(out),
        "--json",
        *extra,
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_two_local_workers_send_the_load_the_master_reports(served: Served, tmp_path: Path) -> None:
    before = _successes(served)
    code, summary, stderr = _gate(served, tmp_path / "report", "--workers", "2")
    seen = _successes(served) - before
    assert code == EXIT_PASS, stderr
    assert summary["verdict"] == "pass" and summary["run"]["workers"] == {"count": 2, "where": "local"}
    total = next(e for e in summary["endpoints"] if e["name"] == "Aggregated")
    # every request both workers sent is in the master's aggregate: Triton saw as many (the
    # readiness probe's one call aside, and at most one call per user cut off at the stop)
    assert total["failures"] == 0 and total["requests"] > 50
    assert total["requests"] <= seen <= total["requests"] + USERS + 1
    master_log = (tmp_path / "report" / "locust.log").read_text()
    assert "--master" in master_log.splitlines()[0]
    for index in range(2):  # each worker ran, connected to that master, and left with it
        log = (tmp_path / "report" / f"locust-worker-{index}.log").read_text()
        assert "--worker" in log.splitlines()[0]
        assert "Traceback" not in log
    assert (tmp_path / "report" / "locust_report.html").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--workers", "2", "--remote-workers", "2"), "--workers and --remote-workers both given"),
        (("--remote-workers", "2", "--master-bind", "nowhere"), "--master-bind 'nowhere' is not HOST:PORT"),
        (("--workers", "8"), "--users 4 for 8 Locust workers"),
    ],
)
def test_worker_options_that_cannot_run_are_refused_before_any_load(
    served: Served, tmp_path: Path, extra: tuple[str, ...], message: str
) -> None:
    code, _, stderr = _gate(served, tmp_path / "report", *extra)
    assert code == EXIT_USAGE
    assert f"error: {message}" in stderr and "Traceback" not in stderr
