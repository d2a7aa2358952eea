"""The gate's failures that need no server: each is fast, one clear line, its own exit code.

Run through the real CLI in a subprocess, as a pipeline runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.runtime.ports import free_port
from loadtests.errors import (
    EXIT_BAD_SLA,
    EXIT_EVIDENCE_UNAVAILABLE,
    EXIT_LOCUST_FAILED,
    EXIT_TARGET_DOWN,
    EXIT_USAGE,
)
from loadtests.runner import LocustRun
from loadtests.settings import LoadOptions
from tests.loadtests.helpers import GatewayStandIn, run_cli

FAST_S = 10


def error_line(stderr: str) -> str:
    """The one ``error:`` line (the gate prints a one-line header before it)."""
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    return line


def test_the_gate_process_never_imports_locust_or_gevent() -> None:
    """Locust monkey-patches whatever imports it; the gate must stay a plain process."""
    code = (
        "import sys, loadtests.cli, loadtests.gate, loadtests.report, loadtests.plot; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent')); "
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_bad_sla_file_fails_fast_naming_the_field(tmp_path: Path) -> None:
    sla = tmp_path / "bad.yaml"
    sla.write_text("endpoints:\n  - name: infer\n    p95_ms: -3\n")
    start = time.monotonic()
    proc = run_cli(
        "gate", "--target", "http://127.0.0.1:9", "--sla", str(sla), "--out", str(tmp_path / "out")
    )
    assert time.monotonic() - start < FAST_S
    assert proc.returncode == EXIT_BAD_SLA
    first = error_line(proc.stderr)
    assert first.startswith("error: SLA file") and "endpoints[0] (infer).p95_ms" in first
    assert "Traceback" not in proc.stderr
    # checked before the target: the closed port 9 was never the reason
    assert "target" not in first


@pytest.mark.parametrize(
    ("user_class", "target"),
    [
        ("gateway", "http://127.0.0.1:{port}"),
        ("triton-http", "http://127.0.0.1:{port}"),
        ("triton-grpc", "127.0.0.1:{port}"),
    ],
)
def test_down_target_fails_fast_with_one_clear_line(tmp_path: Path, user_class: str, target: str) -> None:
    down = target.format(port=free_port())
    start = time.monotonic()
    proc = run_cli(
        "gate",
        "--target",
        down,
        "--sla",
        "demo",
        "--user-class",
        user_class,
        "--out",
        str(tmp_path),
        "--json",
    )
    elapsed = time.monotonic() - start
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"
    assert proc.returncode == EXIT_TARGET_DOWN, proc.stderr
    first = error_line(proc.stderr)
    assert first.startswith("error: target not ready: nothing answers at"), first
    summary = json.loads(proc.stdout)
    assert summary["kind"] == "target-down" and summary["exit_code"] == EXIT_TARGET_DOWN
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"] == "error"
    assert not (tmp_path / "locust.log").exists()  # no load was started


@pytest.mark.integration  # starts the gateway stand-in server
def test_a_target_that_answers_not_ready_is_down_too(tmp_path: Path) -> None:
    with GatewayStandIn() as gateway:
        gateway.ready = False
        proc = run_cli("gate", "--target", gateway.url, "--sla", "demo", "--out", str(tmp_path))
    assert proc.returncode == EXIT_TARGET_DOWN
    assert "/readyz answered HTTP 503" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "127.0.0.1:8000"], "bad HTTP target"),
        (["--target", "http://127.0.0.1:8000", "--run-time", "soon"], "bad duration"),
        (["--target", "grpc//x", "--user-class", "triton-grpc"], "bad gRPC target"),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run_cli("gate", "--sla", "demo", "--out", str(tmp_path), *args)
    assert proc.returncode == EXIT_USAGE
    assert message in proc.stderr


@pytest.mark.integration  # starts the gateway stand-in server
def test_locust_past_its_hard_timeout_is_killed_and_reported(tmp_path: Path) -> None:
    """The stand-in answers, so Locust starts; a 2 s hard limit on a 30 s run must kill it."""
    with GatewayStandIn() as gateway:
        start = time.monotonic()
        proc = run_cli(
            "gate",
            "--target",
            gateway.url,
            "--sla",
            "demo",
            "--run-time",
            "30s",
            "--timeout",
            "2",
            "--users",
            "1",
            "--out",
            str(tmp_path),
        )
        elapsed = time.monotonic() - start
    assert proc.returncode == EXIT_LOCUST_FAILED, proc.stderr
    assert "did not finish within 2 s and was killed" in proc.stderr
    assert elapsed < 20


def test_the_locust_command_line(tmp_path: Path) -> None:
    """What the gate runs: the same interpreter, headless, SLA-neutral exit code, no secrets."""
    run = LocustRun(
        "TritonHttpUser", "http://h:1", 3, 2.0, 7, "spike", tmp_path, LoadOptions(model="m", api_key="s3cret")
    )
    cmd = run.command()
    assert cmd[:3] == [sys.executable, "-m", "locust"] and "TritonHttpUser" in cmd and "--headless" in cmd
    assert cmd[cmd.index("--exit-code-on-error") + 1] == "0"  # failures are the SLA's to judge
    assert cmd[cmd.index("--run-time") + 1] == "7s" and "--csv-full-history" in cmd
    assert cmd[cmd.index("--model") + 1] == "m"
    assert "s3cret" not in " ".join(cmd)
    assert run.environment()["LOADTESTS_SHAPE"] == "spike"
    assert run.timeout_s > 7


PROMOTION_SLA = (
    "endpoints:\n  - name: Aggregated\n    p95_ms: 1000\n"
    "promotion:\n  shadow: {min_rows: 10}\n  quality: {max_worse: {auc: 0.01}}\n"
)


@pytest.mark.parametrize(
    ("evidence_args", "code", "message"),
    [
        ([], EXIT_USAGE, "has promotion criteria but no evidence source was given"),
        (["--gateway", "http://127.0.0.1:{port}"], EXIT_EVIDENCE_UNAVAILABLE, "gateway not reachable"),
        (
            ["--shadow", "{dir}/absent.json", "--quality", "{dir}/absent.json"],
            EXIT_EVIDENCE_UNAVAILABLE,
            "cannot read",
        ),
    ],
)
def test_promotion_evidence_that_cannot_be_had_fails_before_any_load(
    tmp_path: Path, evidence_args: list[str], code: int, message: str
) -> None:
    """The evidence is read before Locust starts (the closed port 9 target is never reached)."""
    sla = tmp_path / "sla.yaml"
    sla.write_text(PROMOTION_SLA)
    args = [a.format(port=free_port(), dir=tmp_path) for a in evidence_args]
    start = time.monotonic()
    proc = run_cli("gate", "--target", "http://127.0.0.1:9", "--sla", str(sla), "--out", str(tmp_path), *args)
    assert time.monotonic() - start < FAST_S
    assert proc.returncode == code, proc.stderr
    assert message in error_line(proc.stderr)
    assert not (tmp_path / "locust.log").exists()


def test_a_criteria_only_file_is_not_a_load_test_sla(tmp_path: Path) -> None:
    proc = run_cli("gate", "--target", "http://127.0.0.1:9", "--sla", "promotion", "--out", str(tmp_path))
    assert proc.returncode == EXIT_BAD_SLA
    assert "has no 'endpoints'" in error_line(proc.stderr) and "loadtests evidence" in proc.stderr


def test_every_exit_code_is_in_the_help() -> None:
    for command in ("gate", "evidence"):
        proc = run_cli(command, "--help")
        assert proc.returncode == 0
        text = " ".join(proc.stdout.split())
        assert "6 a promotion criterion (shadow, quality) failed or could not be judged" in text
        assert "7 the evidence could not be fetched or read" in text
