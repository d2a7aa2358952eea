"""Closed-loop gRPC load generator (asyncio), and the request a tune sends.

Moved here from ``benchmarks/loadgen.py`` (trimmed to what tuning needs) so the builder does
not import from ``benchmarks/``. Closed loop: each of N clients sends one request, waits for the
answer, sends the next; requests in a warm-up window are sent but not counted.

Why not ``perf_analyzer``: the binary ships only in the ``tritonclient==2.41`` wheel (the
project pins 2.73), and needs a Debian package (``libb64-0d``) plus a renamed CUDA runtime on
``LD_LIBRARY_PATH``; this client needs nothing beyond the project environment. It shares the
machine's CPUs with the server, as perf_analyzer would.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.repository.triton_config import ModelConfig
from builder.tune.search import Measurement

_REQUEST_TIMEOUT_S = 10.0  # every outbound call has a timeout; a stuck server fails the run
_NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
}


@dataclass(frozen=True)
class RequestInput:
    """One input tensor of the request every client sends (one row)."""

    name: str
    datatype: str  # Triton wire name: FP32, INT64, BYTES, ...
    array: np.ndarray


def request_inputs(config: ModelConfig, model_dir: Path, seed: int = 0) -> list[RequestInput]:
    """One row per input: the export's warm-up row (``<model>/warmup/<input>``) where there is
    one, so the model sees realistic values; else random values of the right dtype and shape."""
    from tritonclient.grpc.model_config_pb2 import DataType
    from tritonclient.utils import deserialize_bytes_tensor

    rng = np.random.default_rng(seed)
    batched = config.max_batch_size > 0
    out = []
    for tensor in config.input:
        dtype_name = DataType.Name(tensor.data_type)
        dims = [d if d > 0 else 1 for d in tensor.dims]
        shape = [1, *dims] if batched else dims
        wire = dtype_name.removeprefix("TYPE_").replace("STRING", "BYTES")
        raw = model_dir / "warmup" / tensor.name
        if wire == "BYTES":
            if raw.is_file():
                values = deserialize_bytes_tensor(raw.read_bytes())
            else:
                values = np.array([b"x"] * int(np.prod(shape)), dtype=object)
            array = np.asarray(values, dtype=object).reshape(shape)
        else:
            np_dtype = _NUMPY[dtype_name]
            if raw.is_file() and raw.stat().st_size == int(np.prod(shape)) * np.dtype(np_dtype).itemsize:
                array = np.frombuffer(raw.read_bytes(), dtype=np_dtype).reshape(shape)
            elif np.issubdtype(np_dtype, np.floating):
                array = rng.normal(size=shape).astype(np_dtype)
            else:
                array = rng.integers(0, 2, size=shape).astype(np_dtype)
        out.append(RequestInput(tensor.name, wire, array))
    return out


def measure(
    url: str, model: str, inputs: list[RequestInput], concurrency: int, warmup_s: float, seconds: float
) -> Measurement:
    """Drive ``model`` with ``concurrency`` closed-loop clients; latencies of the requests that
    complete inside the ``seconds`` window after ``warmup_s``."""
    return asyncio.run(_measure(url, model, inputs, concurrency, warmup_s, seconds))


async def _measure(
    url: str, model: str, inputs: list[RequestInput], concurrency: int, warmup_s: float, seconds: float
) -> Measurement:
    import tritonclient.grpc.aio as aio

    client = aio.InferenceServerClient(url)
    # Built once: the client's CPU (shared with the server) goes to requests, not conversions.
    wire: list[Any] = []
    for spec in inputs:
        inp = aio.InferInput(spec.name, list(spec.array.shape), spec.datatype)
        inp.set_data_from_numpy(spec.array)
        wire.append(inp)
    start = time.perf_counter_ns()
    window_start = start + int(warmup_s * 1e9)
    window_end = window_start + int(seconds * 1e9)
    latencies: list[int] = []

    async def closed_loop() -> None:
        while True:
            t0 = time.perf_counter_ns()
            if t0 >= window_end:
                return
            await client.infer(model, wire, client_timeout=_REQUEST_TIMEOUT_S)
            t1 = time.perf_counter_ns()
            if window_start <= t1 <= window_end:  # completions in the window: unbiased rate
                latencies.append(t1 - t0)

    async def server_split() -> tuple[int, int, int]:
        # Triton's own counters at the window's edges, under load: where the time goes
        # (queue, i.e. the batcher's wait, vs compute), as perf_analyzer reports it.
        await asyncio.sleep(max(0.0, (window_start - time.perf_counter_ns()) / 1e9))
        before = await _stats(client, model)
        await asyncio.sleep(max(0.0, (window_end - time.perf_counter_ns()) / 1e9))
        after = await _stats(client, model)
        count, queue_ns, compute_ns = (a - b for a, b in zip(after, before, strict=True))
        return count, queue_ns, compute_ns

    try:
        async with asyncio.TaskGroup() as group:  # one failed request fails the measurement
            for _ in range(concurrency):
                group.create_task(closed_loop())
            split = group.create_task(server_split())
    finally:
        await client.close()
    served, queue_ns, compute_ns = split.result()
    lat_ms = np.asarray(latencies, dtype=np.float64) / 1e6
    return Measurement(
        concurrency=concurrency,
        throughput=len(latencies) / seconds,
        p50_ms=float(np.percentile(lat_ms, 50)) if lat_ms.size else float("inf"),
        p99_ms=float(np.percentile(lat_ms, 99)) if lat_ms.size else float("inf"),
        requests=len(latencies),
        queue_us=queue_ns / served / 1e3 if served else 0.0,
        compute_us=compute_ns / served / 1e3 if served else 0.0,
    )


async def _stats(client: Any, model: str) -> tuple[int, int, int]:
    """Successful requests, and their total queue and compute-infer time (ns), so far."""
    response = await client.get_inference_statistics(model, client_timeout=_REQUEST_TIMEOUT_S)
    stats = response.model_stats[0].inference_stats
    return stats.success.count, stats.queue.ns, stats.compute_infer.ns
