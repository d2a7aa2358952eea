"""Closed-loop gRPC load generator for Triton, run in its own process (see ``run.py``).

Why not ``perf_analyzer``: on these machines it needs a 2.41 tritonclient wheel, a Debian
package and a renamed CUDA runtime library on ``LD_LIBRARY_PATH``; this ~150-line client needs
nothing beyond the project environment and measures the same things (closed loop: each of N
clients sends one request, waits for the answer, sends the next).

It runs in a process of its own because a client in the benchmark's own process would share
one GIL with MLflow's leftovers and distort both. It still shares the machine's CPUs with the
server, so :func:`measure` also reports how many cores the client and the server used.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_REQUEST_TIMEOUT_S = 10.0  # every outbound call has a timeout; a stuck server fails the run
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Segment:
    """What one measured window of one model at one concurrency saw."""

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
    server_cpu_s: float  # CPU time of the server's process group (server + model stubs)
    machine_cpu_s: float  # busy CPU time of the whole machine: what is left is someone else's
    # Other models' statistics deltas over the same window (an ensemble's steps, say):
    # name -> (inference_count, execution_count, queue_ns, compute_ns, success_count).
    step_stats: dict[str, tuple[int, ...]] = field(default_factory=dict)


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


def measure(
    url: str,
    model: str,
    rows: np.ndarray,
    concurrency: int,
    warmup_s: float,
    seconds: float,
    server_pgid: int,
    stats_models: tuple[str, ...] = (),
) -> Segment:
    """Drive ``model`` with ``concurrency`` closed-loop clients, one row per request.

    Requests during the first ``warmup_s`` are sent but not counted; then for ``seconds``
    every request that completes is counted and its latency kept. The statistics of
    ``stats_models`` (e.g. an ensemble's steps) are read at the same window edges.
    """
    return asyncio.run(_measure(url, model, rows, concurrency, warmup_s, seconds, server_pgid, stats_models))


async def _stats(client: Any, model: str) -> tuple[int, int, int, int, int]:
    response = await client.get_inference_statistics(model, client_timeout=_REQUEST_TIMEOUT_S)
    s = response.model_stats[0]
    i = s.inference_stats
    return s.inference_count, s.execution_count, i.queue.ns, i.compute_infer.ns, i.success.count


async def _measure(
    url: str,
    model: str,
    rows: np.ndarray,
    concurrency: int,
    warmup_s: float,
    seconds: float,
    server_pgid: int,
    stats_models: tuple[str, ...] = (),
) -> Segment:
    import tritonclient.grpc.aio as aio  # imported here: only the client process needs it

    client = aio.InferenceServerClient(url)
    # Inputs are built once, so the client's CPU (taken from the server's 2 shared cores)
    # goes to sending requests, not to converting numpy rows again and again.
    inputs = []
    for row in rows:
        inp = aio.InferInput("input", [1, rows.shape[1]], "FP32")
        inp.set_data_from_numpy(row.reshape(1, -1).astype(np.float32))
        inputs.append([inp])
    start = time.perf_counter_ns()
    window_start = start + int(warmup_s * 1e9)
    window_end = window_start + int(seconds * 1e9)
    latencies: list[int] = []

    async def closed_loop(worker: int) -> None:
        i = worker
        while True:
            t0 = time.perf_counter_ns()
            if t0 >= window_end:
                return
            await client.infer(model, inputs[i % len(inputs)], client_timeout=_REQUEST_TIMEOUT_S)
            t1 = time.perf_counter_ns()
            if window_start <= t1 <= window_end:  # completions in the window: unbiased rate
                latencies.append(t1 - t0)
            i += concurrency

    def cpu() -> tuple[float, float, float]:
        return time.process_time(), group_cpu_seconds(server_pgid), machine_cpu_seconds()

    def delta(after: tuple[Any, ...], before: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(a - b for a, b in zip(after, before, strict=True))

    async def bracket() -> tuple[tuple[int, ...], tuple[float, ...], dict[str, tuple[int, ...]]]:
        # Server counters and CPU times snapshotted at the window's edges, under load.
        await asyncio.sleep((window_start - time.perf_counter_ns()) / 1e9)
        before, cpu_before = await _stats(client, model), cpu()
        steps_before = {m: await _stats(client, m) for m in stats_models}
        await asyncio.sleep(max(0.0, (window_end - time.perf_counter_ns()) / 1e9))
        after, cpu_after = await _stats(client, model), cpu()
        steps_after = {m: await _stats(client, m) for m in stats_models}
        steps = {m: delta(steps_after[m], steps_before[m]) for m in stats_models}
        return delta(after, before), delta(cpu_after, cpu_before), steps

    try:
        async with asyncio.TaskGroup() as group:  # one failed request cancels the segment
            for worker in range(concurrency):
                group.create_task(closed_loop(worker))
            edges = group.create_task(bracket())
    finally:
        await client.close()
    counters, cpu_times, step_stats = edges.result()
    inference_count, execution_count, queue_ns, compute_ns, success_count = counters
    client_cpu, server_cpu, machine_cpu = cpu_times
    return Segment(
        model=model,
        concurrency=concurrency,
        seconds=seconds,
        latencies_ns=np.asarray(latencies, dtype=np.int64),
        inference_count=inference_count,
        execution_count=execution_count,
        queue_ns=queue_ns,
        compute_ns=compute_ns,
        success_count=success_count,
        client_cpu_s=client_cpu,
        server_cpu_s=server_cpu,
        machine_cpu_s=machine_cpu,
        step_stats=step_stats,
    )


def triton_version(url: str) -> str:
    """The server's version string (Triton's metadata API), for the report."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        return str(client.get_server_metadata(client_timeout=10).version)
    finally:
        client.close()
