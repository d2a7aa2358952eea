"""Closed-loop load for the gateway benchmark: direct Triton gRPC, gateway HTTP, gateway gRPC.

One harness drives all three paths, so they differ only in the request each client sends:

- ``triton``: ``tritonclient.grpc.aio`` to the model, with the inputs the gateway would send
  already assembled (``gateway/assemble.py``: one ``[1, 1]`` input per column, FP32, or BYTES for
  a string column; built by the gateway's own ``gateway.clients.triton_grpc.infer_inputs``), asking for the
  outputs the gateway asks for: what a caller that had the features itself would send;
- ``http``: ``POST /v1/models/{model}/predict`` with one row (entity keys + request fields, the
  string ``channel`` included), aiohttp, one keep-alive connection per client;
- ``grpc``: the gateway's ``Predict`` (gateway/proto), one row, one HTTP/2 channel for all clients.

Each client decodes the score from the answer, as a real caller would. The loop is the project's one
load generator (``builder/tune/load.py``, counting failed requests instead of stopping); it runs in
a process of its own, and reports the CPU it, the gateway, Triton and everyone else used in the
window, plus the deltas of the gateway's own histograms (``/metrics``) over the same window.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.tune.load import Plan, closed_loop, group_cpu_seconds, machine_cpu_seconds

_TIMEOUT_S = 10.0  # every call has a deadline; a stuck server shows up as errors, not a hang
MODES = ("triton", "http", "grpc")


@dataclass(frozen=True)
class Target:
    triton_url: str  # Triton gRPC host:port
    triton_model: str  # the Triton model the gateway calls
    outputs: tuple[str, ...]  # what the gateway asks it for (its ModelSpec's outputs)
    score_output: str  # the [N, C] probabilities output; column 1 is the binary score
    gateway_http: str  # host:port
    gateway_grpc: str
    model: str  # the gateway's model name
    triton_pgid: int
    gateway_pgid: int


@dataclass(frozen=True)
class Traffic:
    """The requests every path sends, each in its own form: ``rows[i]`` (the gateway's entity keys
    and request fields) and row i of every array in ``x`` (Triton's inputs by name, ``[N, 1]``
    each) are the same request."""

    rows: list[dict[str, Any]]
    x: dict[str, np.ndarray]


@dataclass
class Window:
    mode: str
    concurrency: int
    seconds: float
    latencies_ns: np.ndarray  # successful requests completed inside the window, client-side
    errors: int  # failed requests completed inside the window
    client_cpu_s: float
    gateway_cpu_s: float
    triton_cpu_s: float  # server + Python-backend stubs
    machine_cpu_s: float
    metrics: dict[str, float]  # gateway_*_sum / _count deltas over the window


def measure(mode: str, target: Target, traffic: Traffic, plan: Plan) -> Window:
    """``plan.concurrency`` closed-loop clients on ``mode``, taking turns over ``traffic``'s
    requests. The first ``plan.warmup_s`` are not counted."""
    return asyncio.run(_measure(mode, target, traffic, plan))


def metric_key(name: str, **labels: str) -> str:
    """``name{a="1",b="2"}`` with the labels sorted, as :func:`parse_metrics` keys them."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def parse_metrics(text: str) -> dict[str, float]:
    """The gateway's histogram totals: ``name_sum{labels}`` / ``name_count{labels}`` -> value."""
    out = {}
    for line in text.splitlines():
        if line.startswith("gateway_") and ("_sum{" in line or "_count{" in line):
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            out[name + "{" + ",".join(sorted(labels.rstrip("}").split(","))) + "}"] = float(value)
    return out


def row_inputs(x: Mapping[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Request i's Triton inputs: row i of each named array, batch axis kept (``[1, ...]``)."""
    return {name: np.ascontiguousarray(array[i : i + 1]) for name, array in x.items()}


async def _caller(
    mode: str,
    target: Target,
    rows: list[dict[str, Any]],
    x: Mapping[str, np.ndarray],
    stack: AsyncExitStack,
) -> Callable[[int], Awaitable[bool]]:
    """``call(i)``: send request i, return whether a score came back. Requests are built once."""
    if mode == "triton":
        import tritonclient.grpc.aio as aio

        from gateway.clients.triton_grpc import infer_inputs  # the gateway's own typing: str arrays -> BYTES

        client = aio.InferenceServerClient(target.triton_url)
        stack.push_async_callback(client.close)
        inputs = [infer_inputs(row_inputs(x, i)) for i in range(len(rows))]
        outputs = [aio.InferRequestedOutput(o) for o in target.outputs]

        async def infer(i: int) -> bool:
            result = await client.infer(
                target.triton_model, inputs[i], outputs=outputs, client_timeout=_TIMEOUT_S
            )
            probabilities = result.as_numpy(target.score_output)
            return probabilities is not None and probabilities.shape == (1, 2)

        return infer
    if mode == "http":
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=_TIMEOUT_S)
        )
        stack.push_async_callback(session.close)
        url = f"http://{target.gateway_http}/v1/models/{target.model}/predict"
        bodies = [json.dumps(r).encode() for r in rows]
        headers = {"Content-Type": "application/json"}

        async def post(i: int) -> bool:
            async with session.post(url, data=bodies[i], headers=headers) as resp:
                body = await resp.read()
                return resp.status == 200 and "score" in json.loads(body)["predictions"][0]

        return post
    if mode == "grpc":
        import grpc

        from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value

        channel = grpc.aio.insecure_channel(target.gateway_grpc)
        stack.push_async_callback(channel.close)
        stub = gateway_pb2_grpc.GatewayStub(channel)

        requests = [
            gateway_pb2.PredictRequest(
                model=target.model, rows=[gateway_pb2.Row(fields={k: to_value(v) for k, v in r.items()})]
            )
            for r in rows
        ]

        async def predict(i: int) -> bool:
            reply = await stub.Predict(requests[i], timeout=_TIMEOUT_S)
            return len(reply.predictions) == 1

        return predict
    raise ValueError(f"unknown mode {mode!r}; one of {MODES}")


async def _measure(mode: str, target: Target, traffic: Traffic, plan: Plan) -> Window:
    import aiohttp

    async with AsyncExitStack() as stack:
        call = await _caller(mode, target, traffic.rows, traffic.x, stack)
        scraper = await stack.enter_async_context(aiohttp.ClientSession())
        metrics_url = f"http://{target.gateway_http}/metrics"

        async def snapshot() -> tuple[dict[str, float], tuple[float, ...]]:
            async with scraper.get(metrics_url, timeout=aiohttp.ClientTimeout(total=_TIMEOUT_S)) as resp:
                totals = parse_metrics(await resp.text())
            cpu = (
                time.process_time(),
                group_cpu_seconds(target.gateway_pgid),
                group_cpu_seconds(target.triton_pgid),
                machine_cpu_seconds(),
            )
            return totals, cpu

        loop = await closed_loop(call, len(traffic.rows), plan, snapshot, count_errors=True)
    (before, cpu_before), (after, cpu_after) = loop.before, loop.after
    metrics = {k: v - before.get(k, 0.0) for k, v in after.items()}
    client_cpu, gateway_cpu, triton_cpu, machine_cpu = (
        a - b for a, b in zip(cpu_after, cpu_before, strict=True)
    )
    return Window(
        mode=mode,
        concurrency=plan.concurrency,
        seconds=plan.seconds,
        latencies_ns=loop.latencies_ns,
        errors=loop.errors,
        client_cpu_s=client_cpu,
        gateway_cpu_s=gateway_cpu,
        triton_cpu_s=triton_cpu,
        machine_cpu_s=machine_cpu,
        metrics=metrics,
    )


def on_off(
    pool: Any, targets: tuple[Target, Target], traffic: Traffic, plan: Plan, say: Callable[[str], None]
) -> dict[str, list[Window]]:
    """A setting's two gateways (``targets``: on, off) driven over HTTP by ``plan``'s clients,
    alternated on off off on so drift in the machine's load hits both alike; each window is
    ``plan.seconds`` long, run in ``pool``'s client process."""
    windows: dict[str, list[Window]] = {"on": [], "off": []}
    for name in ("on", "off", "off", "on"):
        say(f"{name}, HTTP at concurrency {plan.concurrency}, {plan.seconds:g} s")
        target = targets[0] if name == "on" else targets[1]
        windows[name].append(pool.submit(measure, "http", target, traffic, plan).result())
    return windows
