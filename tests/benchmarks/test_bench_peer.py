"""The peer benchmark reads wrk's own report right (units, trailing blanks, failures), builds the
typed model's requests as each server reads them, and compares what was measured."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from benchmarks import wrk
from benchmarks.peer_bench import compare, pandas_body, typed_triton_body
from benchmarks.report import peer_markdown
from benchmarks.wrk import WrkError, failed_point, parse_wrk, run_wrk

# As wrk 4.1 prints it with --latency (note the blank after "1.12s").
WRK = """Running 3s test @ http://127.0.0.1:49519/v2/models/fraud/infer
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   305.07ms  535.90ms   2.96s    86.61%
    Req/Sec   372.75    199.22   848.00     70.83%
  Latency Distribution
     50%  871.45us
     75%  146.52ms
     90%    1.12s \n     99%    2.39s \n  1790 requests in 3.01s, 1.14MB read
Requests/sec:    594.00
Transfer/sec:    388.07KB
"""


def test_wrk_percentiles_and_throughput_in_milliseconds() -> None:
    point = parse_wrk(WRK)
    assert point == {
        "p50_ms": pytest.approx(0.87145),
        "p99_ms": pytest.approx(2390.0),
        "throughput_rps": 594.0,
        "requests": 1790,
        "errors": 0,
        "non_2xx": 0,
        "socket_errors": 0,
    }


def test_wrk_failures_are_counted() -> None:
    text = WRK.replace(
        "Requests/sec",
        "  Socket errors: connect 0, read 2, write 0, timeout 3\n  Non-2xx or 3xx responses: 4\nRequests/sec",
    )
    point = parse_wrk(text)
    assert (point["errors"], point["non_2xx"], point["socket_errors"]) == (9, 4, 5)
    # wrk's Requests/sec counts the 4 error responses too: only the successful ones are kept
    assert point["throughput_rps"] == pytest.approx(594.0 * (1790 - 4) / 1790)


def test_failed_requests_do_not_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    text = WRK.replace("Requests/sec", "  Non-2xx or 3xx responses: 6\nRequests/sec")

    def fake_wrk(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 0, text, "")

    monkeypatch.setattr(wrk, "wrk_path", lambda: "wrk")
    monkeypatch.setattr(wrk.subprocess, "run", fake_wrk)
    point = run_wrk("http://127.0.0.1:1/v2/models/fraud/infer", "{}", 64, 1, 0)
    assert point["errors"] == 6 and point["p50_ms"] == pytest.approx(0.87145)


def test_a_point_wrk_cannot_measure_is_recorded_as_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 1, "", "unable to connect to 127.0.0.1:1 Connection refused")

    monkeypatch.setattr(wrk, "wrk_path", lambda: "wrk")
    monkeypatch.setattr(wrk.subprocess, "run", refused)
    point = run_wrk("http://127.0.0.1:1/v2/models/fraud/infer", "{}", 1, 1, 0)
    assert point["p50_ms"] is None and point["throughput_rps"] == 0.0
    assert "Connection refused" in point["failure"]


def test_unreadable_wrk_output_is_an_error() -> None:
    with pytest.raises(WrkError, match="cannot read wrk"):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused")


def test_the_builder_default_is_compared_with_mlservers_best_config() -> None:
    points = [
        {
            "server": "Triton",
            "config": "builder default",
            "concurrency": 1,
            "p50_ms": 0.5,
            "throughput_rps": 1800.0,
        },
        {
            "server": "Triton",
            "config": "queue delay 0 µs",
            "concurrency": 1,
            "p50_ms": 0.1,
            "throughput_rps": 9e3,
        },
        {"server": "MLServer", "config": "plain", "concurrency": 1, "p50_ms": 0.55, "throughput_rps": 1760.0},
        {
            "server": "MLServer",
            "config": "adaptive",
            "concurrency": 1,
            "p50_ms": 1.85,
            "throughput_rps": 500.0,
        },
        {
            "server": "Triton",
            "config": "builder default",
            "concurrency": 16,
            "p50_ms": 1.7,
            "throughput_rps": 6000.0,
        },
        {"server": "MLServer", "config": "plain", "concurrency": 16, "p50_ms": 9.0, "throughput_rps": 1700.0},
        {
            "server": "MLServer",
            "config": "adaptive",
            "concurrency": 16,
            "p50_ms": 7.0,
            "throughput_rps": 2300.0,
        },
    ]
    c1, c16 = compare(points, [1, 16])
    assert c1["p50_ratio"] == pytest.approx(0.5 / 0.55) and c1["met"] and c1["mlserver_best_p50"] == "plain"
    assert c16["throughput_ratio"] == pytest.approx(6000 / 2300) and not c16["met"]
    assert c16["mlserver_best_throughput"] == "adaptive"


# The demo's typed model: 9 columns, 2 of them strings (as demo.train's model_frame makes a row)
ROW = {
    "amount": 42.5,
    "hour": 13.0,
    "channel": "web",
    "user_tx_count_7d": 3.0,
    "user_avg_amount_7d": 40.25,
    "user_country": "de",
    "merchant_risk": 0.12,
    "merchant_tx_count_7d": 120.0,
    "account_age_days": 400.0,
}
STRINGS = ["channel", "user_country"]


def test_typed_triton_request_has_one_typed_input_per_column() -> None:
    inputs = [(name, "BYTES" if name in STRINGS else "FP32", (1,)) for name in ROW]
    inputs[1] = ("hour", "INT64", (1,))
    body = json.loads(typed_triton_body(inputs, ROW, "probabilities"))
    by_name = {t["name"]: t for t in body["inputs"]}
    assert list(by_name) == list(ROW)
    assert by_name["channel"] == {"name": "channel", "shape": [1, 1], "datatype": "BYTES", "data": ["web"]}
    assert by_name["amount"] == {"name": "amount", "shape": [1, 1], "datatype": "FP32", "data": [42.5]}
    assert by_name["hour"]["data"] == [13] and isinstance(by_name["hour"]["data"][0], int)
    assert body["outputs"] == [{"name": "probabilities"}]


def test_mlserver_typed_request_is_a_dataframe_through_the_pandas_codec() -> None:
    body = json.loads(pandas_body(ROW, STRINGS, "predict_proba"))
    assert body["parameters"] == {"content_type": "pd"}
    assert [i["name"] for i in body["inputs"]] == list(ROW)  # the columns in the order fitted
    by_name = {i["name"]: i for i in body["inputs"]}
    assert by_name["user_country"] == {
        "name": "user_country",
        "shape": [1],
        "datatype": "BYTES",
        "parameters": {"content_type": "str"},
        "data": ["de"],
    }
    assert by_name["hour"] == {"name": "hour", "shape": [1], "datatype": "FP64", "data": [13.0]}
    assert body["outputs"] == [{"name": "predict_proba"}]


def _point(
    model: str, server: str, config: str, c: int, p50: float | None, rps: float, **extra: Any
) -> dict[str, Any]:
    return {
        "model": model,
        "server": server,
        "config": config,
        "concurrency": c,
        "p50_ms": p50,
        "p99_ms": p50,
        "throughput_rps": rps,
        "requests": int(rps * 4),
        "errors": 0,
        "non_2xx": 0,
        "socket_errors": 0,
        **extra,
    }


def test_failures_are_carried_into_the_comparison_and_the_table() -> None:
    points = [
        _point("numeric", "Triton", "builder default", 64, 30.0, 2000.0),
        _point("numeric", "MLServer", "as shipped", 64, 60.0, 900.0, errors=6, non_2xx=0, socket_errors=6),
        _point("numeric", "MLServer", "adaptive batching", 64, 40.0, 1000.0),
        _point("typed", "Triton", "builder default", 64, 30.0, 1500.0),
        {**_point("typed", "MLServer", "as shipped", 64, None, 0.0), **failed_point("wrk exited 1: refused")},
        _point("typed", "MLServer", "adaptive batching", 64, 50.0, 600.0),
    ]
    numeric, typed = compare(points, [64])
    assert numeric["mlserver_failed"] == 6 and numeric["triton_failed"] == 0
    assert numeric["throughput_ratio"] == pytest.approx(2.0) and not numeric["met"]
    # the point wrk could not measure is left out of MLServer's best, not the whole comparison
    assert typed["model"] == "typed" and typed["throughput_ratio"] == pytest.approx(2.5) and not typed["met"]
    assert typed["mlserver_best_throughput"] == "adaptive batching"
    settings = {
        "models": {"numeric": "GB", "typed": "demo"},
        "triton_config": {"max_batch_size": 64, "max_queue_delay_us": 500, "instances": 1},
        "mlserver": "MLServer",
        "load_generator": "wrk",
        "duration_s": 4.0,
        "warmup_s": 1.0,
    }
    text = "\n".join(peer_markdown({"settings": settings, "points": points, "comparison": [numeric, typed]}))
    assert "6 of 3,600 (6 socket)" in text
    assert "not measured: wrk exited 1: refused" in text
    assert "| numeric | 64 | 0.75× | 2.00× | 0 / 6 |" in text


def test_no_measured_peer_leaves_the_ratio_open() -> None:
    points = [
        _point("typed", "Triton", "builder default", 1, 1.0, 900.0),
        {**_point("typed", "MLServer", "as shipped", 1, None, 0.0), **failed_point("gone")},
    ]
    (row,) = compare(points, [1])
    assert row["p50_ratio"] is None and row["throughput_ratio"] is None and "met" not in row
