"""The shim benchmark counts a process tree's CPU, sums its windows and judges the aim right."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.shim_bench import Window, _settings, summarize, to_markdown, tree_cpu_seconds, verdicts


def test_tree_cpu_counts_descendants() -> None:
    """A child burning CPU shows up in its parent's tree, and not as the named model's stub."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(5)"
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        before, _ = tree_cpu_seconds(os.getpid())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            total, stub = tree_cpu_seconds(os.getpid(), "some_model")
            if total - before >= 0.25:
                break
            time.sleep(0.05)
        assert total - before >= 0.25
        assert stub == 0.0
    finally:
        child.kill()
        child.wait()


def _window(model: str, requests: int, server_cpu_s: float, stub_cpu_s: float) -> Window:
    return Window(
        model=model,
        concurrency=1,
        seconds=1.0,
        latencies_ns=np.full(requests, 1_000_000, dtype=np.int64),
        server_cpu_s=server_cpu_s,
        stub_cpu_s=stub_cpu_s,
        client_cpu_s=0.3,
        machine_cpu_s=1.5,
        inference_count=requests,
        execution_count=requests,
    )


def test_summary_and_aim() -> None:
    shim = summarize([_window("m", 1000, 0.6, 0.25), _window("m", 1000, 0.7, 0.27)])
    identity = summarize([_window("m_identity", 1000, 0.5, 0.2), _window("m_identity", 1000, 0.5, 0.2)])
    assert shim["throughput_per_s"] == 1000
    assert round(shim["server_cpu_us_per_request"], 6) == 650
    assert round(shim["stub_cpu_us_per_request"], 6) == 260
    assert shim["windows_cpu_us_per_request"] == [600.0, 700.0]
    assert abs(shim["other_cores"] - 0.55) < 1e-9  # machine - server - client, per second
    [aim] = verdicts([shim, identity], {"m": {"cpu_us": 50.0}}, {"m": "m"})
    assert round(aim["floor_cpu_us"], 6) == 550 and abs(aim["ratio"] - 650 / 550) < 1e-9 and aim["aim_met"]
    [missed] = verdicts([shim, identity], {"m": {"cpu_us": -230.0}}, {"m": "m"})  # floor 270
    assert not missed["aim_met"]
    result = {
        "points": [shim, identity],
        "session_run": {"m": {"cpu_us": 50.0, "wall_us": 51.0, "cold_cpu_us": 90.0}},
        "aim": [aim, missed],
    }
    text = to_markdown(result)
    assert "| m | 1 | 650 | 500 | 50 | 1.18 |" in text and "(missed)" in text


def test_settings_default_when_the_caller_has_none() -> None:
    settings = _settings(argparse.Namespace(duration=6.0, shim_concurrency="1,4"))
    assert settings.concurrency == [1, 4] and settings.instances == [1] and settings.baseline == []
