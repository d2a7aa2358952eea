"""What shadow traffic costs the champion (issue 20's goal: a 100 % share, >= 0.95x req/s).

Inside the gateway section (gateway_bench.py): the model is exported a second time under the
name ``fraud-detector-challenger`` (the same graph, so the challenger's answers agree and its
Triton work equals the champion's), and a second gateway on the same Triton mirrors every
request to it (``GATEWAY_SHADOW``, share 1.0). Both gateways are driven by the same HTTP
clients at the aim's concurrency, alternated on off off on, so drift in the machine's load hits
both alike. Besides req/s and latency, each side's CPU per request is read from the gateway's
and Triton's process trees: the challenger's Triton call is real work, and on a machine whose
cores the champion already fills, that work is taken from the champion's throughput.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from benchmarks import report
from benchmarks.gateway_loadgen import Target, Traffic, Window, on_off
from builder.tune.load import Plan

AIM = {"concurrency": 16, "throughput_ratio": 0.95}
CHALLENGER = "fraud-detector-challenger"


def settings(model: str) -> dict[str, str]:
    """The mirroring gateway's extra environment."""
    return {"GATEWAY_SHADOW": json.dumps({model: {"model": CHALLENGER, "share": 1.0}})}


def compare(
    pool: ProcessPoolExecutor,
    targets: tuple[Target, Target],
    traffic: Traffic,
    seconds: float,
    warmup_s: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Gateway HTTP with a 100 % shadow (``targets[0]``) vs none (``targets[1]``), and the verdict."""
    c = AIM["concurrency"]
    plan = Plan(int(c), warmup_s, seconds / 2)
    windows = on_off(pool, targets, traffic, plan, lambda line: say(f"gateway: shadow {line}"))
    points = {name: _point(ws) for name, ws in windows.items()}
    ratio = points["on"]["throughput_per_s"] / points["off"]["throughput_per_s"]
    shadow = _shadow_report(targets[0])
    return {
        "concurrency": c,
        "on": points["on"],
        "off": points["off"],
        "throughput_ratio": ratio,
        "p50_added_ms": points["on"]["p50_ms"] - points["off"]["p50_ms"],
        "shadow": {
            k: shadow.get(k) for k in ("rows", "dropped_rows", "error_rows", "agreement", "last_error")
        },
        "aim": AIM,
        "verdict": "meets the aim"
        if ratio >= AIM["throughput_ratio"]
        else f"misses: {ratio:.3f}x < {AIM['throughput_ratio']}x req/s",
    }


def _point(windows: list[Window]) -> dict[str, Any]:
    latencies = np.concatenate([w.latencies_ns for w in windows])
    requests = len(latencies) + sum(w.errors for w in windows)
    return {
        **report.latency_summary(latencies, sum(w.seconds for w in windows)),
        "errors": sum(w.errors for w in windows),
        "gateway_cpu_us_per_request": sum(w.gateway_cpu_s for w in windows) / max(requests, 1) * 1e6,
        "triton_cpu_us_per_request": sum(w.triton_cpu_s for w in windows) / max(requests, 1) * 1e6,
    }


def _shadow_report(target: Target) -> dict[str, Any]:
    """What the mirroring gateway compared over the run (its ``/shadow`` endpoint)."""
    url = f"http://{target.gateway_http}/v1/models/{target.model}/shadow?window=15m"
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(json.loads(response.read()))
