"""What drift counting costs (issue 11's goal: on vs off at 16 clients, >= 0.95x req/s, +<= 0.2 ms p50).

Two parts, both inside the gateway section (gateway_bench.py), on the model it serves:

1. ``observer_cost``: ``DriftMonitor.observe`` alone, in this process, on batches of the served
   model's own inputs (the rows the benchmark sends, assembled as the gateway assembles them) and
   its reference (``drift.reference`` from Triton's config): microseconds per batch by batch size.
2. ``compare``: two gateways on the same Triton, drift on (``GATEWAY_DRIFT_SAMPLE=1.0``, every row
   counted) and off (``0``), driven by the same HTTP clients at the aim's concurrency, alternated
   on off off on, so drift in the machine's load hits both alike.

``python -m benchmarks.drift_bench`` runs part 1 on a synthetic model of the same shape (7 numeric
and 2 string columns, a binary score), without any server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks import report
from benchmarks.gateway_loadgen import Target, Traffic, on_off
from builder.tune.load import Plan

AIM = {"concurrency": 16, "throughput_ratio": 0.95, "p50_added_ms": 0.2}


def observer_cost(
    spec: Any, inputs: dict[str, np.ndarray], sizes: Sequence[int] = (1, 16, 64), seconds: float = 0.5
) -> list[dict[str, Any]]:
    """µs per ``observe`` call for batches of ``sizes`` rows cut from ``inputs`` (``[N, 1]`` each,
    or the matrix), scores drawn uniformly; a fresh monitor per size (its first batch, which
    parses the reference, is not timed)."""
    from gateway.drift.monitor import DriftMonitor
    from gateway.observe import Observation
    from gateway.responses import Prediction

    n = len(next(iter(inputs.values())))
    rng = np.random.default_rng(0)
    out = []
    for size in sizes:
        take = np.arange(size) % n
        batch = {name: a[take] for name, a in inputs.items()}
        predictions = [Prediction(False, score=float(s)) for s in rng.random(size)]
        seen = Observation(spec, spec.version, batch, predictions, [{}] * size)
        monitor = DriftMonitor(sample=1.0)
        monitor.observe(seen)
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            monitor.observe(seen)
            calls += 1
        elapsed = time.perf_counter() - start
        out.append(
            {"rows": size, "us_per_batch": elapsed / calls * 1e6, "us_per_row": elapsed / calls / size * 1e6}
        )
    return out


def compare(
    pool: ProcessPoolExecutor,
    on: Target,
    off: Target,
    traffic: Traffic,
    seconds: float,
    warmup_s: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Gateway HTTP with drift counting on vs off at the aim's concurrency, and the verdict."""
    c = AIM["concurrency"]
    plan = Plan(int(c), warmup_s, seconds / 2)
    windows = on_off(pool, (on, off), traffic, plan, lambda line: say(f"gateway: drift {line}"))
    points = {}
    for name, ws in windows.items():
        latencies = np.concatenate([w.latencies_ns for w in ws])
        points[name] = {
            **report.latency_summary(latencies, sum(w.seconds for w in ws)),
            "errors": sum(w.errors for w in ws),
        }
    ratio = points["on"]["throughput_per_s"] / points["off"]["throughput_per_s"]
    added = points["on"]["p50_ms"] - points["off"]["p50_ms"]
    missed = [
        what
        for what, ok in (
            (f"{ratio:.3f}x < {AIM['throughput_ratio']}x req/s", ratio >= AIM["throughput_ratio"]),
            (f"p50 +{added:.3f} > {AIM['p50_added_ms']} ms", added <= AIM["p50_added_ms"]),
        )
        if not ok
    ]
    return {
        "concurrency": c,
        "on": points["on"],
        "off": points["off"],
        "throughput_ratio": ratio,
        "p50_added_ms": added,
        "aim": AIM,
        "verdict": "meets the aim" if not missed else "misses: " + "; ".join(missed),
    }


def _synthetic() -> tuple[Any, dict[str, np.ndarray]]:
    """A model shaped like the demo's (columns layout), with a reference from its own rows."""
    from gateway.catalog import Column, ModelSpec, OutputRoles

    rng = np.random.default_rng(1)
    n = 4000
    numeric = ["amount", "hour", "user_age_days", "tx_last_24h", "avg_amount_30d", "merchant_risk", "rate"]
    strings = {"channel": ["web", "app", "pos"], "merchant_category": [f"c{i}" for i in range(8)]}
    data: dict[str, np.ndarray] = {c: rng.lognormal(3, 1, n).astype(np.float32) for c in numeric}
    data.update({c: rng.choice(v, n).astype(object) for c, v in strings.items()})
    features = []
    for name in [*numeric, *strings]:
        if name in strings:
            cats = strings[name]
            counts = [int((data[name] == c).sum()) for c in cats]
            features.append(
                {"name": name, "kind": "categorical", "categories": cats, "counts": [*counts, 0], "nulls": 0}
            )
        else:
            edges = np.unique(np.quantile(data[name], np.arange(1, 10) / 10)).tolist()
            counts = np.bincount(np.searchsorted(edges, data[name], side="right"), minlength=len(edges) + 1)
            features.append(
                {"name": name, "kind": "numeric", "edges": edges, "counts": counts.tolist(), "nulls": 0}
            )
    score_edges = np.arange(1, 10) / 10
    reference = {
        "format": 1,
        "rows": n,
        "source": "synthetic",
        "features": features,
        "prediction": {
            "name": "score",
            "kind": "numeric",
            "edges": score_edges.tolist(),
            "counts": [n // 10] * 10,
            "nulls": 0,
        },
    }
    spec = ModelSpec(
        name="synthetic",
        triton_model="synthetic",
        version="1",
        layout="columns",
        input_name="",
        columns=tuple(Column(c, "string" if c in strings else "float32") for c in [*numeric, *strings]),
        feature_service="fs",
        entity_keys=(),
        request_fields=(),
        kind="binary",
        classes=(0, 1),
        roles=OutputRoles(probabilities="probabilities"),
        outputs=("probabilities",),
    )
    spec = replace(spec, drift_reference=json.dumps(reference))
    return spec, {name: a.reshape(n, 1) for name, a in data.items()}


if __name__ == "__main__":
    spec, inputs = _synthetic()
    for line in observer_cost(spec, inputs):
        batch, row = line["us_per_batch"], line["us_per_row"]
        print(f"{line['rows']:>3} rows/batch: {batch:7.1f} µs per batch, {row:6.2f} µs per row")
