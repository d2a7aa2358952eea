"""The payload log of the real gateway: every row written as sent and answered, readable by
pandas and by Feast's own offline-store reader, no API key in it, and serving unharmed while its
folder cannot be written."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pandas as pd
import pytest
import requests

from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value
from support import servers
from tests.gateway.helpers import MODEL, Stack, gateway_env

pytestmark = pytest.mark.integration

KEY = "pl-secret-key-8f3a"
PAIRS = [(17, 3), (250, 88), (401, 12)]
ONLINE = {  # model column -> its log column (feature_repo/definitions.py views)
    "user_age_days": "user_stats__user_age_days",
    "tx_last_24h": "user_stats__tx_last_24h",
    "avg_amount_30d": "user_stats__avg_amount_30d",
    "merchant_risk": "merchant_stats__merchant_risk",
    "merchant_fraud_rate_30d": "merchant_stats__merchant_fraud_rate_30d",
    "merchant_category": "merchant_stats__merchant_category",
}


@pytest.fixture(scope="module")
def logged(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[servers.Gateway, Path]]:
    root = tmp_path_factory.mktemp("payload")
    env = gateway_env(
        stack,
        GATEWAY_PAYLOAD_LOG=str(root / "log"),
        GATEWAY_PAYLOAD_LOG_FLUSH_S="0.05",
        GATEWAY_API_KEYS=KEY,
    )
    with servers.gateway_process(root, env) as gw:
        yield gw, root / "log"


def counted(gw: servers.Gateway, outcome: str) -> float:
    text = requests.get(f"{gw.url}/metrics", timeout=5).text
    found = re.search(rf'gateway_payload_log_rows_total{{outcome="{outcome}"}} (\S+)', text)
    assert found, text[-2000:]
    return float(found.group(1))


def wait_for(gw: servers.Gateway, outcome: str, target: float) -> None:
    deadline = time.monotonic() + 20
    while counted(gw, outcome) < target:
        assert time.monotonic() < deadline, f"{outcome} never reached {target}:\n{gw.log_text()[-3000:]}"
        time.sleep(0.05)


def bodies(first: int, count: int) -> list[list[dict[str, Any]]]:
    """``count`` requests of 1-3 rows, every row with its own amount (to find it in the log)."""
    out, n = [], first
    for i in range(count):
        rows = []
        for j in range(1 + i % 3):
            user, merchant = PAIRS[(i + j) % 3]
            rows.append(
                {
                    "user_id": user,
                    "merchant_id": merchant,
                    "amount": 10.0 + n * 0.5,
                    "hour": (n * 5) % 24,
                    "channel": ("web", "app", "pos")[n % 3],
                }
            )
            n += 1
        out.append(rows)
    return out


def http(gw: servers.Gateway, rows: list[dict[str, Any]]) -> requests.Response:
    return requests.post(
        f"{gw.url}/v1/models/{MODEL}/predict", json={"rows": rows}, headers={"X-API-Key": KEY}, timeout=10
    )


def test_every_row_is_logged_as_sent_and_answered(stack: Stack, logged: tuple[servers.Gateway, Path]):
    from feature_repo import SERVICE

    gw, log = logged
    before = counted(gw, "written")
    requests_ = bodies(0, 12)
    with ThreadPoolExecutor(4) as pool:  # concurrent: the gateway merges them into batches
        answers = list(pool.map(lambda rows: http(gw, rows), requests_))
    assert [a.status_code for a in answers] == [200] * 12
    grpc_rows = bodies(100, 2)
    with grpc.insecure_channel(gw.grpc) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for rows in grpc_rows:
            wire = [gateway_pb2.Row(fields={k: to_value(v) for k, v in r.items()}) for r in rows]
            reply = stub.Predict(
                gateway_pb2.PredictRequest(model=MODEL, rows=wire),
                timeout=10,
                metadata=(("authorization", f"Bearer {KEY}"),),
            )
            answers.append({"predictions": [{"score": p.score} for p in reply.predictions]})  # type: ignore[arg-type]
    sent = [*requests_, *grpc_rows]
    total = sum(map(len, sent))
    wait_for(gw, "written", before + total)

    frame = pd.read_parquet(log / MODEL)
    assert len(frame) == before + total  # nothing lost, nothing twice
    frame = frame.set_index("amount")
    online = stack.store.get_online_features(
        features=stack.store.get_feature_service(SERVICE),
        entity_rows=[{"user_id": u, "merchant_id": m} for u, m in PAIRS],
    ).to_dict()
    ids = set()
    for rows, answer in zip(sent, answers, strict=True):
        body = answer.json() if isinstance(answer, requests.Response) else answer
        mine = frame.loc[[np.float32(r["amount"]) for r in rows]]
        assert mine.__request_id.nunique() == 1  # one request, one id
        ids.add(mine.__request_id.iloc[0])
        assert mine.__score.tolist() == pytest.approx([p["score"] for p in body["predictions"]], abs=1e-7)
        assert mine.channel.tolist() == [r["channel"] for r in rows]
        assert mine.hour.tolist() == [r["hour"] for r in rows]
        assert mine.user_id.tolist() == [r["user_id"] for r in rows]
        for row, (_, logged_row) in zip(rows, mine.iterrows(), strict=True):
            at = PAIRS.index((row["user_id"], row["merchant_id"]))
            for column, name in ONLINE.items():
                expected = online[column][at]
                if isinstance(expected, float):
                    expected = pytest.approx(float(np.float32(expected)))
                assert logged_row[name] == expected, (column, row)
                assert logged_row[f"{name}__status"] == 1
    assert frame.__model.unique().tolist() == [MODEL]
    assert frame.__model_version.unique().tolist() == [str(stack.trained.version)]
    assert len(ids) == len(sent)  # and each request its own
    for file in log.rglob("*"):  # the API key never reaches the log
        assert not file.is_file() or KEY.encode() not in file.read_bytes()


def test_feasts_offline_reader_reads_the_log(stack: Stack, logged: tuple[servers.Gateway, Path]):
    from feast.infra.offline_stores.dask import DaskOfflineStore
    from feast.infra.offline_stores.file_source import FileSource

    gw, log = logged
    before = counted(gw, "written")
    assert http(gw, bodies(200, 1)[0]).status_code == 200
    wait_for(gw, "written", before + 1)
    now = datetime.now(UTC)
    job = DaskOfflineStore.pull_all_from_table_or_query(
        config=stack.store.config,
        data_source=FileSource(path=str(log / MODEL), timestamp_field="__log_timestamp"),
        join_key_columns=["user_id", "merchant_id"],
        feature_name_columns=list(ONLINE.values()),
        timestamp_field="__log_timestamp",
        start_date=now - timedelta(hours=1),
        end_date=now + timedelta(minutes=1),
    )
    read = job.to_df()
    assert len(read) == len(pd.read_parquet(log / MODEL)) and set(ONLINE.values()) <= set(read.columns)


def test_serving_goes_on_while_the_log_cannot_be_written(logged: tuple[servers.Gateway, Path]):
    gw, log = logged
    failed, written = counted(gw, "failed"), counted(gw, "written")
    saved = log.with_name("saved")
    log.mkdir(parents=True, exist_ok=True)  # this test may run before any row was written
    shutil.move(log, saved)
    log.write_text("a file where the folder was: even root cannot create a folder under it")
    try:
        for rows in bodies(300, 6):  # one after another: several flushes fail
            assert http(gw, rows).status_code == 200
            wait_for(gw, "failed", failed + len(rows))
            failed += len(rows)
        assert gw.log_text().count("payload log: cannot write") == 1  # once per episode
    finally:
        log.unlink()
        shutil.move(saved, log)
    rows = bodies(400, 1)[0]
    assert http(gw, rows).status_code == 200
    wait_for(gw, "written", written + len(rows))
    assert "payload log: writing again" in gw.log_text()


def test_the_report_reads_the_real_log_against_the_exported_reference(
    stack: Stack, logged: tuple[servers.Gateway, Path], tmp_path: Path
):
    from typer.testing import CliRunner

    from gateway.cli import app

    gw, log = logged
    before = counted(gw, "written")
    assert http(gw, bodies(500, 1)[0]).status_code == 200
    wait_for(gw, "written", before + 1)
    out = tmp_path / "report.html"
    args = ["drift", "report", "--log", str(log), "--repo", str(stack.model_repo), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "no reference" not in result.output, result.output
    html = out.read_text()
    for name in (*stack.trained.columns, "score"):  # every model column, and the prediction
        assert f"<h3>{name}</h3><svg" in html, name
    # the top line says the verdict and who carries it; each chart says which bar is which
    assert re.search(r'class="verdict">(Verdict <b>(alert|warn|ok)</b>\. |No verdict)', html), html[:2000]
    assert html.count(">reference</text>") == html.count("<h3>") == html.count(">window</text>")
