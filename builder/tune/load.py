"""The project's one closed-loop load generator (asyncio), used by ``builder tune`` and by every
benchmark that drives a server.

Closed loop: each of N clients sends one request, waits for the answer, sends the next;
requests in a warm-up window are sent but not counted, and only requests that complete inside
the measured window count (an unbiased rate). What a request is (a Triton gRPC call, a gateway
HTTP or gRPC call) and what is read at the window's edges (server statistics, CPU times,
metrics) are the caller's: :func:`closed_loop` runs the loop, :func:`measure` is its Triton
gRPC front-end.

Why not ``perf_analyzer``: the binary ships only in the ``tritonclient==2.41`` wheel (the
project pins 2.73), and needs a Debian package (``libb64-0d``) plus a renamed CUDA runtime on
``LD_LIBRARY_PATH``; this client needs nothing beyond the project environment. It shares the
machine's CPUs with the server, as perf_analyzer would, so :func:`measure` can also report how
many cores the client and the server used.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

_REQUEST_TIMEOUT_S = 10.0  # every outbound call has a timeout; a stuck server fails the run
_CLK_TCK = os.sysconf("SC_CLK_TCK")
S = TypeVar("S")


@dataclass(frozen=True)
class Plan:
    """How hard and how long: ``concurrency`` clients, ``warmup_s`` unmeasured, then ``seconds``."""

    concurrency: int
    warmup_s: float
    seconds: float


@dataclass(frozen=True)
class RequestInput:
    """One input tensor of a Triton request."""

    name: str
    datatype: str  # Triton wire name: FP32, INT64, BYTES, ...
    array: np.ndarray


@dataclass
class Loop(Generic[S]):
    """What one closed-loop window saw: client-side latencies and the caller's edge snapshots."""

    latencies_ns: np.ndarray  # every successful request completed inside the window
    errors: int  # failed requests completed inside the window (only with count_errors)
    before: S
    after: S


async def closed_loop(
    call: Callable[[int], Awaitable[bool]],
    requests: int,
    plan: Plan,
    snapshot: Callable[[], Awaitable[S]],
    *,
    count_errors: bool = False,
) -> Loop[S]:
    """``plan.concurrency`` clients; client ``w`` sends requests ``w, w + concurrency, ...``
    (modulo ``requests``) through ``call(i)``, which says whether the answer was right.
    ``snapshot()`` is taken at both edges of the measured window, under load.

    By default one failed request (an exception) fails the window; with ``count_errors`` it is
    counted, as a falsy answer is, and the clients go on.
    """
    start = time.perf_counter_ns()
    window_start = start + int(plan.warmup_s * 1e9)
    window_end = window_start + int(plan.seconds * 1e9)
    latencies: list[int] = []
    errors = 0

    async def client(worker: int) -> None:
        nonlocal errors
        i = worker
        while True:
            t0 = time.perf_counter_ns()
            if t0 >= window_end:
                return
            if count_errors:
                try:
                    ok = await call(i % requests)
                except Exception:  # an error answer (4xx/5xx, RPC error, timeout): counted, not fatal
                    ok = False
            else:
                ok = await call(i % requests)
            t1 = time.perf_counter_ns()
            if window_start <= t1 <= window_end:  # completions in the window: unbiased rate
                if ok:
                    latencies.append(t1 - t0)
                else:
                    errors += 1
            i += plan.concurrency

    async def bracket() -> tuple[S, S]:
        await asyncio.sleep(max(0.0, (window_start - time.perf_counter_ns()) / 1e9))
        before = await snapshot()
        await asyncio.sleep(max(0.0, (window_end - time.perf_counter_ns()) / 1e9))
        return before, await snapshot()

    async with asyncio.TaskGroup() as group:  # one failed request (uncounted) fails the window
        for worker in range(plan.concurrency):
            group.create_task(client(worker))
        edges = group.create_task(bracket())
    before, after = edges.result()
    return Loop(np.asarray(latencies, dtype=np.int64), errors, before, after)


# ---- CPU accounting (Linux /proc) -------------------------------------------------------------
def processes() -> Iterator[tuple[Path, list[str]]]:
    """Every live process (Linux /proc): its /proc folder and its stat fields from "state" (field
    3 of proc(5)) on: [1] the parent pid, [2] the process group, [11] + [12] utime + stime."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        yield entry, stat.rsplit(")", 1)[-1].split()


def clock_ticks(ticks: int) -> float:
    return ticks / _CLK_TCK


def group_cpu_seconds(pgid: int) -> float:
    """utime + stime of every live process in group ``pgid`` (Linux /proc), in seconds."""
    return clock_ticks(sum(int(f[11]) + int(f[12]) for _, f in processes() if int(f[2]) == pgid))


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine since boot (all but idle and iowait; steal, the
    hypervisor's other guests, counts as busy: it slows us too), in seconds."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / _CLK_TCK


# ---- Triton gRPC ------------------------------------------------------------------------------
@dataclass
class Segment:
    """What one measured window of one Triton model at one concurrency saw."""

    model: str
    concurrency: int
    seconds: float
    latencies_ns: np.ndarray  # every request completed inside the window, client-side
    inference_count: int  # Triton statistics deltas over the same window
    execution_count: int
    queue_ns: int
    compute_ns: int
    success_count: int
    client_cpu_s: float  # CPU time this process used in the window (all its threads)
    server_cpu_s: float  # CPU time of the server's process group (server + model stubs); 0 unasked
    machine_cpu_s: float  # busy CPU time of the whole machine: what is left is someone else's
    # Other models' statistics deltas over the same window (an ensemble's steps, say):
    # name -> (inference_count, execution_count, queue_ns, compute_ns, success_count).
    step_stats: dict[str, tuple[int, ...]] = field(default_factory=dict)


def float_rows(rows: np.ndarray, name: str = "input") -> list[list[RequestInput]]:
    """One request per row of a 2-D array: a single ``[1, columns]`` FP32 input."""
    return [[RequestInput(name, "FP32", row.reshape(1, -1).astype(np.float32))] for row in rows]


def measure(
    url: str,
    model: str,
    requests: Sequence[Sequence[RequestInput]],
    plan: Plan,
    *,
    server_pgid: int | None = None,
    stats_models: tuple[str, ...] = (),
) -> Segment:
    """Drive ``model`` at ``url`` (gRPC host:port) closed-loop, the clients taking turns over
    ``requests``. Triton's statistics of ``model`` and of ``stats_models`` (e.g. an ensemble's
    steps), and CPU times (of process group ``server_pgid`` when given), are read at the
    measured window's edges."""
    return asyncio.run(_measure(url, model, requests, plan, server_pgid, stats_models))


async def _stats(client: Any, model: str) -> tuple[int, int, int, int, int]:
    response = await client.get_inference_statistics(model, client_timeout=_REQUEST_TIMEOUT_S)
    s = response.model_stats[0]
    i = s.inference_stats
    return s.inference_count, s.execution_count, i.queue.ns, i.compute_infer.ns, i.success.count


def _delta(after: tuple[Any, ...], before: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a - b for a, b in zip(after, before, strict=True))


async def _measure(
    url: str,
    model: str,
    requests: Sequence[Sequence[RequestInput]],
    plan: Plan,
    server_pgid: int | None,
    stats_models: tuple[str, ...],
) -> Segment:
    import tritonclient.grpc.aio as aio  # imported here: only the client (process) needs it

    client = aio.InferenceServerClient(url)
    # Inputs are built once, so the client's CPU (shared with the server) goes to sending
    # requests, not to converting numpy arrays again and again.
    wire: list[list[Any]] = []
    for request in requests:
        inputs = []
        for spec in request:
            inp = aio.InferInput(spec.name, list(spec.array.shape), spec.datatype)
            inp.set_data_from_numpy(spec.array)
            inputs.append(inp)
        wire.append(inputs)

    async def call(i: int) -> bool:
        await client.infer(model, wire[i], client_timeout=_REQUEST_TIMEOUT_S)
        return True

    def cpu() -> tuple[float, float, float]:
        server = group_cpu_seconds(server_pgid) if server_pgid is not None else 0.0
        return time.process_time(), server, machine_cpu_seconds()

    async def snapshot() -> tuple[tuple[int, ...], tuple[float, ...], dict[str, tuple[int, ...]]]:
        # Server counters at the window's edges, under load: where the time goes (queue, i.e.
        # the batcher's wait, vs compute), as perf_analyzer reports it.
        counters, cpu_times = await _stats(client, model), cpu()
        return counters, cpu_times, {m: await _stats(client, m) for m in stats_models}

    try:
        loop = await closed_loop(call, len(wire), plan, snapshot)
    finally:
        await client.close()
    (counters0, cpu0, steps0), (counters1, cpu1, steps1) = loop.before, loop.after
    inference_count, execution_count, queue_ns, compute_ns, success_count = _delta(counters1, counters0)
    client_cpu, server_cpu, machine_cpu = _delta(cpu1, cpu0)
    return Segment(
        model=model,
        concurrency=plan.concurrency,
        seconds=plan.seconds,
        latencies_ns=loop.latencies_ns,
        inference_count=inference_count,
        execution_count=execution_count,
        queue_ns=queue_ns,
        compute_ns=compute_ns,
        success_count=success_count,
        client_cpu_s=client_cpu,
        server_cpu_s=server_cpu,
        machine_cpu_s=machine_cpu,
        step_stats={m: _delta(steps1[m], steps0[m]) for m in stats_models},
    )


def triton_version(url: str) -> str:
    """The server's version string (Triton's metadata API), for a report."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        return str(client.get_server_metadata(client_timeout=10).version)
    finally:
        client.close()
