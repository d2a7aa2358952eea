"""Drift through the real gateway: the exported reference (builder export, from the training rows
the demo's training logs), traffic like the training data, then a burst with ``amount`` x3.

One gateway process of its own (the session's is shared by other tests' traffic), counting
every row (``GATEWAY_DRIFT_SAMPLE`` 1.0, the default) with the default 500-row minimum.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from support import servers
from tests.gateway.helpers import MODEL, Stack, gateway_env, like_training, send

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def drift_gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Gateway]:
    # "default": an entity without online features is served on NaN stand-ins, which the
    # drift counts as nulls, as the training frame has them
    env = gateway_env(stack, GATEWAY_MISSING_ENTITIES="default")
    with servers.gateway_process(tmp_path_factory.mktemp("gw-drift"), env) as gw:
        yield gw


def drift(gw: servers.Gateway, window: str = "5m", model: str = MODEL) -> requests.Response:
    return requests.get(f"{gw.url}/v1/models/{model}/drift", params={"window": window}, timeout=10)


def verdicts(body: dict[str, Any]) -> dict[str, str]:
    (version,) = body["versions"]
    return {f["name"]: f["verdict"] for f in version["features"]}


def summary(body: dict[str, Any]) -> str:
    """Each feature's verdict, PSI and KS bound (critical value), for a failure's message."""
    (version,) = body["versions"]
    return "; ".join(
        f"{f['name']}: {f['verdict']} psi={f['psi']} ks={f['ks']} ({f['ks_critical']})"
        for f in [*version["features"], version["prediction"]]
    )


def test_unshifted_traffic_is_no_drift_and_amount_x3_flags_amount_alone(
    stack: Stack, drift_gateway: servers.Gateway
):
    rows = like_training(stack, 600, seed=1)
    send(drift_gateway, rows)
    body = drift(drift_gateway).json()
    (version,) = body["versions"]
    assert version["version"] == str(stack.trained.version) and version["rows"] == 600
    before = verdicts(body)
    assert set(before) == set(stack.trained.columns)
    # The merchant scores are the exception: 100 merchants, each served with its latest snapshot
    # (noise sd 0.03, about one decile bin's width) where training saw a spread of snapshots, so
    # these two columns' effective sample is 100, not 600, and their PSI lands near 0.1-0.2.
    noisy = {"merchant_risk", "merchant_fraud_rate_30d"}
    assert {v for k, v in before.items() if k not in noisy} == {"ok"}, summary(body)
    assert {before[k] for k in noisy} <= {"ok", "warn"}, summary(body)
    assert version["prediction"]["name"] == "score" and version["prediction"]["verdict"] == "ok"
    assert body["verdict"] != "alert"
    psi_before = {f["name"]: f["psi"] for f in version["features"]}

    # The same rows twice more with amount x3: every other column's shares are unchanged
    shifted = [{**row, "amount": row["amount"] * 3} for row in rows + rows]
    send(drift_gateway, shifted)
    body = drift(drift_gateway).json()
    (version,) = body["versions"]
    assert version["rows"] == 1800
    after = verdicts(body)
    assert {k for k in after if after[k] != before[k]} == {"amount"}, summary(body)
    assert after["amount"] == "alert" and body["verdict"] == "alert"
    prediction = version["prediction"]["verdict"]
    for f in version["features"]:
        if f["name"] != "amount":
            assert f["psi"] == pytest.approx(psi_before[f["name"]], abs=1e-5)

    # the CLI reads the same report, and says "alert" with its exit code
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "drift",
            "--url",
            drift_gateway.url,
            "--model",
            MODEL,
            "--window",
            "5m",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 3, cli.stderr
    assert json.loads(cli.stdout) == {"reports": [drift(drift_gateway).json()]}
    table = subprocess.run(
        [sys.executable, "-m", "gateway", "drift", "--url", drift_gateway.url, "--model", MODEL],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},  # rich wraps to the terminal width
    )
    assert table.returncode == 3 and "amount" in table.stdout and "alert" in table.stdout

    # and the Prometheus gauges say the same for the last hour
    metrics = requests.get(f"{drift_gateway.url}/metrics", timeout=10).text
    version_label = f'version="{stack.trained.version}"'
    status = {
        line.split('feature="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("gateway_drift_status{") and version_label in line
    }
    code = {"insufficient": -1, "ok": 0, "warn": 1, "alert": 2}  # docs/drift.md section 2
    assert status == {**{k: code[v] for k, v in after.items()}, "__prediction__": code[prediction]}
    rows_total = [line for line in metrics.splitlines() if line.startswith("gateway_drift_rows_total{")]
    assert rows_total and float(rows_total[0].rsplit(" ", 1)[1]) == 1800


def test_bad_window_is_400_unknown_model_404_and_the_cli_exit_codes(drift_gateway: servers.Gateway):
    bad = drift(drift_gateway, window="7x")
    assert bad.status_code == 400 and "window" in bad.json()["error"]
    unknown = drift(drift_gateway, model="no-such-model")
    assert unknown.status_code == 404 and "no-such-model" in unknown.json()["error"]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "gateway", "drift", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    assert cli("--url", drift_gateway.url, "--window", "7x").returncode == 2
    refused = cli("--url", drift_gateway.url, "--model", "no-such-model")
    assert refused.returncode == 1 and "404" in refused.stderr and "Traceback" not in refused.stderr
    down = cli("--url", f"http://127.0.0.1:{servers.free_port()}")
    assert down.returncode == 1 and "unreachable" in down.stderr and "Traceback" not in down.stderr
