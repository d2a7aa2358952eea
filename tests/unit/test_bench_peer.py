"""The peer benchmark reads wrk's own report right (units, trailing blanks, failures)."""

from __future__ import annotations

import pytest

from benchmarks.peer_bench import PeerBenchError, compare, parse_wrk

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
        "errors": 0,
    }


def test_wrk_failures_are_counted() -> None:
    text = WRK.replace(
        "Requests/sec",
        "  Socket errors: connect 0, read 2, write 0, timeout 3\n  Non-2xx or 3xx responses: 4\nRequests/sec",
    )
    assert parse_wrk(text)["errors"] == 9


def test_unreadable_wrk_output_is_an_error() -> None:
    with pytest.raises(PeerBenchError, match="cannot read wrk"):
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
