"""The release gate and the gateway Locust user against the real gateway (real Feast, real
Triton): the user's requests are all answered 200, a loose SLA passes and an impossible one
fails with the violation named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import servers
from tests.loadtests.helpers import run_cli, smoke_user

pytestmark = pytest.mark.integration


def test_gateway_user_is_answered_by_the_real_gateway(gateway: servers.Gateway, tmp_path: Path):
    result = smoke_user(
        "GatewayUser",
        ["--host", gateway.url, "--rows-per-request", "3", "--model", "fraud-detector"],
        tmp_path,
    )
    assert result["finished"], result
    requests = result["requests"]
    assert requests and all(r["exception"] is None for r in requests), requests
    assert all((r["type"], r["name"]) == ("POST", "predict") for r in requests)


def test_gate_against_the_real_gateway_passes_loose_and_fails_impossible(
    gateway: servers.Gateway, tmp_path: Path
):
    common = [
        "gate",
        "--target",
        gateway.url,
        "--user-class",
        "gateway",
        "--users",
        "4",
        "--spawn-rate",
        "4",
        "--run-time",
        "6s",
        "--model",
        "fraud-detector",
        "--json",
    ]
    loose = run_cli(*common, "--sla", "demo", "--out", str(tmp_path / "loose"), timeout=120)
    assert loose.returncode == 0, loose.stdout + loose.stderr
    assert json.loads(loose.stdout)["verdict"] == "pass"
    strict = tmp_path / "impossible.yaml"
    strict.write_text("endpoints:\n  - name: Aggregated\n    p50_ms: 1\n    min_rps: 100000\n")
    missed = run_cli(*common, "--sla", str(strict), "--out", str(tmp_path / "strict"), timeout=120)
    assert missed.returncode == 1, missed.stdout + missed.stderr
    assert "min_rps" in missed.stdout or "rps" in missed.stdout
    assert (tmp_path / "strict" / "summary.json").is_file()
