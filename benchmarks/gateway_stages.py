"""Where a gateway request's CPU goes, stage by stage (issue 16; docs/benchmarks.md).

In one process, on one thread, one request after another, a ``gateway.service.Service`` opened
as ``gateway serve`` opens it (the same settings, Triton, online store) serves one-row requests
through the same functions the predict path calls, each stage timed by the thread's CPU clock
(``time.thread_time_ns``: waiting on Triton or the store costs nothing here, as on the server):

HTTP parse (``gateway.http.v1.parse_request``), validate (the cached spec + ``request.validate``),
feature read (``features.fetch``), assemble (``assemble.assemble_input``), Triton call
(``triton.infer``: building the request, the socket calls, decoding the answer), response
(``responses.predictions``, ``PredictResult``, JSON), metrics and drift (the Prometheus
observations of one request, the observers' ``notify``, and the drift monitor's count of the
batches waiting whenever its ``FLUSH_S`` has passed, as its timer does in ``gateway serve``).

``feature_read`` times the feature read alone, back to back: the gateway's feature client
(``features.fetch`` of one row, the demo's two views) on one thread, caches warm, as
benchmarks/feature_read.py times the readers (issue 33: at most 30 µs).

What this does not see (the HTTP server, the event loop's turns, the batcher, the kernel's
socket work) is the gateway's measured CPU per request minus these stages' sum: part (c)
reports it as "server and event loop" beside them, from the same run.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

STAGES = (
    "HTTP parse",
    "validate",
    "feature read",
    "assemble",
    "Triton call",
    "response",
    "metrics + drift",
)


async def _open(triton_url: str, feature_repo: Path, model: str, env: dict[str, str]) -> Any:
    """A ``Service`` opened as ``gateway serve`` opens it, with ``env``'s GATEWAY_* settings."""
    from gateway.service import Service
    from gateway.settings import GatewaySettings, nest

    flat = {k.removeprefix("GATEWAY_").lower(): v for k, v in env.items()}
    settings = GatewaySettings(
        **nest({"triton_url": triton_url, "feature_repo": feature_repo, "models": (model,), **flat})
    )
    if settings.features.reader == "direct" and settings.features.specs is None:
        # as `gateway serve` does at start (there in a child process; here the bench's own)
        from gateway.feature_specs import compile_into

        specs = Path(tempfile.mkdtemp(prefix="bench-features-"))
        compile_into(settings.features, specs)
        settings = settings.model_copy(
            update={"features": settings.features.model_copy(update={"specs": specs})}
        )
    return await Service.open(settings, (model,))


async def _measure(
    triton_url: str, feature_repo: Path, model: str, rows: list[dict[str, Any]], n: int, env: dict[str, str]
) -> dict[str, float]:
    from gateway import metrics
    from gateway.assemble import assemble_input
    from gateway.drift import monitor
    from gateway.http.bodies import to_json
    from gateway.http.v1 import parse_request
    from gateway.observe import Observation, notify
    from gateway.request import validate
    from gateway.responses import PredictResult, predictions

    service = await _open(triton_url, feature_repo, model, env)
    predictor = service.predictor
    bodies = [json.dumps(r).encode() for r in rows]
    totals = dict.fromkeys(STAGES, 0)
    clock = time.thread_time_ns
    counted = time.monotonic()
    # a monitor that counts each batch as it comes (before issue 33) has nothing to flush
    flush_s = getattr(monitor, "FLUSH_S", float("inf"))
    try:
        for i in range(n + n // 10):
            if i == n // 10:  # the first tenth warms every cache
                totals = dict.fromkeys(STAGES, 0)
            t0 = clock()
            request = parse_request(model, bodies[i % len(bodies)])
            t1 = clock()
            spec = await predictor.spec(model)
            entity_rows, request_values = validate(spec, request)
            t2 = clock()
            fetched = await predictor.features.fetch(spec.feature_service, entity_rows)
            t3 = clock()
            inputs = assemble_input(spec, request_values, fetched.values, len(entity_rows))
            t4 = clock()
            out, ran = await predictor.triton.infer(spec.triton_model, inputs, spec.outputs)
            t5 = clock()
            scored = predictions(spec, out, [bool(m) for m in fetched.missing])
            result = PredictResult(spec.name, ran, spec.kind, spec.classes, scored, 0.0)
            to_json(result.to_dict())
            t6 = clock()
            metrics.FEATURE_SECONDS.labels(spec.name).observe(0.0)
            metrics.TRITON_SECONDS.labels(spec.name).observe(0.0)
            metrics.REQUEST_SECONDS.labels("predict", spec.name, "200").observe(0.0)
            metrics.IN_FLIGHT.inc()
            metrics.IN_FLIGHT.dec()
            notify(
                predictor.observers,
                Observation(spec, ran, inputs, scored, entity_rows, time.time(), (), fetched.times),
            )
            if service.drift is not None and time.monotonic() - counted >= flush_s:
                service.drift.flush()  # what the monitor's timer does in a serving process
                counted = time.monotonic()
            t7 = clock()
            for stage, (a, b) in zip(
                STAGES, ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6), (t6, t7)), strict=True
            ):
                totals[stage] += b - a
    finally:
        await service.close()
    return {stage: ns / n / 1e3 for stage, ns in totals.items()}


def measure(
    triton_url: str,
    feature_repo: Path,
    model: str,
    rows: list[dict[str, Any]],
    n: int = 2000,
    env: dict[str, str] | None = None,
) -> dict[str, float]:
    """Mean CPU µs per one-row request of each stage (run it in a process of its own: it opens
    the gateway's Service, with its Prometheus metrics and Feast store)."""
    import uvloop

    return uvloop.run(_measure(triton_url, feature_repo, model, rows, n, env or {}))


async def _feature_read(
    triton_url: str, feature_repo: Path, model: str, rows: list[dict[str, Any]], env: dict[str, str]
) -> dict[str, float]:
    from gateway.http.v1 import parse_request
    from gateway.request import validate

    service = await _open(triton_url, feature_repo, model, env)
    try:
        features = service.predictor.features
        spec = await service.predictor.spec(model)
        keys = [validate(spec, parse_request(model, json.dumps(r).encode()))[0] for r in rows]
        for key in keys:  # warm: connections, statements, caches
            await features.fetch(spec.feature_service, key)
        passes = []
        for _ in range(REPEATS):
            start = time.thread_time_ns()
            for _ in range(READS // len(keys)):
                for key in keys:
                    await features.fetch(spec.feature_service, key)
            passes.append((time.thread_time_ns() - start) / (READS // len(keys) * len(keys)) / 1e3)
    finally:
        await service.close()
    return {"median_us": statistics.median(passes), "min_us": min(passes), "reads": READS}


READS, REPEATS = 2048, 7


def feature_read(
    triton_url: str,
    feature_repo: Path,
    model: str,
    rows: list[dict[str, Any]],
    env: dict[str, str] | None = None,
) -> dict[str, float]:
    """CPU µs of the gateway's feature read of one row, back to back on one thread (the median
    and the least of ``REPEATS`` passes over ``rows``); in a process of its own, as ``measure``."""
    import uvloop

    return uvloop.run(_feature_read(triton_url, feature_repo, model, rows, env or {}))
