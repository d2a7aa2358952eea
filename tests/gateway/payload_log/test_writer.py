"""The payload log without servers: an Observation in, Parquet files (or counted drops) out."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from prometheus_client import REGISTRY

from gateway.payload_log import LogConfig, ParquetSink, PayloadLog
from tests.gateway.payload_log.helpers import VIEWS, observation, opened

# Every column a file of this model has (docs/gateway.md, "Payload log"), in order; then log_date.
COLUMNS = [
    "user_id",
    "merchant_id",
    *(
        f"{view}__{f}{suffix}"
        for f, view in [
            ("tx_last_24h", "user_stats"),
            ("avg_amount_30d", "user_stats"),
            ("merchant_category", "merchant_stats"),
        ]
        for suffix in ("", "__timestamp", "__status")
    ),
    "amount",
    "channel",
    "__model",
    "__model_version",
    "__answered_by",
    "__fallback",
    "__score",
    "__label",
    "__probabilities",
    "__defaults_used",
    "__log_timestamp",
    "__log_date",
    "__request_id",
]


def counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("gateway_payload_log_rows_total", {"outcome": outcome}) or 0.0


def wait_for(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_every_row_is_written_with_what_was_sent_and_answered(tmp_path: Path) -> None:
    written = counted("written")
    at = dt.datetime(2026, 3, 1, 23, 59, 59, tzinfo=dt.UTC).timestamp()
    batches = [observation(5, seed=1, at=at, sizes=(2, 3)), observation(4, seed=2, at=at + 2)]  # 2 days
    log = opened(ParquetSink(str(tmp_path)), flush_rows=3)
    for batch in batches:
        log.observe(batch)
    log.close()
    assert counted("written") - written == 9
    days = sorted(p.name for p in (tmp_path / "fraud-detector").iterdir())
    assert days == ["log_date=2026-03-01", "log_date=2026-03-02"]
    frame = pd.read_parquet(tmp_path / "fraud-detector").sort_values("__log_timestamp", kind="stable")
    assert list(frame.columns) == [*COLUMNS, "log_date"]
    for i, (batch, day) in enumerate(zip(batches, ["2026-03-01", "2026-03-02"], strict=True)):
        rows = frame.iloc[:5] if i == 0 else frame.iloc[5:]
        col = {k: v.reshape(-1) for k, v in batch.inputs.items()}
        assert rows.user_id.tolist() == [k["user_id"] for k in batch.entity_rows]
        assert rows.amount.tolist() == col["amount"].tolist()  # float32 as sent
        assert rows.channel.tolist() == col["channel"].tolist()
        assert rows.user_stats__tx_last_24h.tolist() == col["tx_last_24h"].tolist()
        avg = rows.user_stats__avg_amount_30d.to_numpy()
        assert np.isnan(avg[0]) and (avg[1:] == col["avg_amount_30d"][1:]).all()
        assert rows.user_stats__avg_amount_30d__status.tolist() == [3] + [1] * (len(rows) - 1)
        ts = rows.user_stats__avg_amount_30d__timestamp
        assert ts.isna().iloc[0] and ts.iloc[1] == pd.Timestamp(1_700_000_001, unit="s", tz="UTC")
        assert rows.merchant_stats__merchant_category.tolist()[:2] == ["grocery", None]  # "" = missing
        assert rows.merchant_stats__merchant_category__status.tolist()[:2] == [1, 3]
        assert rows.__score.tolist() == [p.score for p in batch.predictions]
        assert rows.__label.tolist() == [p.label for p in batch.predictions]
        assert rows.__model_version.unique().tolist() == ["3"]
        # the model's own answer: no fallback stood in (gateway/fallback/)
        assert rows.__answered_by.unique().tolist() == [batch.spec.name] and not rows.__fallback.any()
        assert rows.__log_date.astype(str).unique().tolist() == [day]
        assert (rows.__log_timestamp == pd.Timestamp(batch.at, unit="s", tz="UTC").floor("us")).all()
    first = frame.iloc[:5].__request_id.tolist()  # two requests: 2 rows, then 3
    assert len(set(first[:2])) == 1 and len(set(first[2:])) == 1 and first[0] != first[2]


def test_a_full_queue_drops_and_counts_rows_and_never_waits_for_the_writer(tmp_path: Path) -> None:
    class SlowSink:  # stands for a slow object store: each write waits until the test lets it go
        def __init__(self) -> None:
            self.entered, self.go, self.rows = threading.Event(), threading.Event(), 0

        def write(self, model: str, date: dt.date, table: pa.Table) -> None:
            self.entered.set()
            self.go.wait(10)
            self.rows += table.num_rows

    sink = SlowSink()
    dropped, written = counted("dropped"), counted("written")
    log = opened(sink, queue_rows=10, flush_rows=1)
    log.observe(observation(4))
    assert sink.entered.wait(10)  # the writer holds those 4 rows in a write that does not return
    start = time.perf_counter()
    for seed in range(5):  # 20 rows: two batches (8 rows) fit the queue, three (12) do not
        log.observe(observation(4, seed=seed))
    assert time.perf_counter() - start < 0.5  # observe never waited for the stuck write
    assert counted("dropped") - dropped == 12
    sink.go.set()
    log.close()
    assert sink.rows == 12 and counted("written") - written == 12


def test_keys_are_hashed_with_the_salt_when_asked(tmp_path: Path) -> None:
    batch = observation(3)
    log = opened(ParquetSink(str(tmp_path)), salt=b"pepper")
    log.observe(batch)
    log.close()
    frame = pd.read_parquet(tmp_path / "fraud-detector")
    expected = [
        hmac.new(b"pepper", str(k["user_id"]).encode(), hashlib.sha256).hexdigest() for k in batch.entity_rows
    ]
    assert frame.user_id.tolist() == expected


def test_hashing_needs_a_salt() -> None:
    from pydantic import ValidationError

    from gateway.settings import GatewaySettings, nest

    with pytest.raises(ValidationError, match="GATEWAY_PAYLOAD_LOG_SALT"):
        GatewaySettings(**nest({"payload_log": "x", "payload_log_hash_keys": True}))


def test_sampling_keeps_about_its_share() -> None:
    class Count:
        rows = 0

        def write(self, model: str, date: dt.date, table: pa.Table) -> None:
            self.rows += table.num_rows

    sink = Count()
    log = PayloadLog(LogConfig(sample=0.25), sink, lambda _: VIEWS, rng=np.random.default_rng(7))
    for seed in range(20):
        log.observe(observation(50, seed=seed))
    log.close()
    assert 200 < sink.rows < 300  # 1000 rows x 0.25 (binomial sd ~14)


def test_an_unwritable_destination_counts_failed_logs_once_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "log"
    failed, written = counted("failed"), counted("written")
    log = opened(ParquetSink(str(root)), flush_rows=1)
    log.observe(observation(2))
    wait_for(lambda: counted("written") - written == 2)
    shutil.rmtree(root)
    root.write_text("a file where the folder was: even root cannot create a folder under it")
    with caplog.at_level(logging.WARNING, "gateway.payload_log"):
        for seed in range(3):
            log.observe(observation(3, seed=seed))
            wait_for(lambda seed=seed: counted("failed") - failed == 3 * (seed + 1))  # type: ignore[misc]
        root.unlink()
        log.observe(observation(4))
        log.close()
    assert counted("written") - written == 6
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot write" in m for m in messages) == 1 and "payload log: writing again" in messages
