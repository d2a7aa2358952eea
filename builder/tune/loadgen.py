"""The request a tune sends, and its measurement through the project's load generator.

The closed loop itself is ``builder.tune.load`` (shared with the benchmarks, so there is one load
generator): each of N clients sends one request, waits for the answer, sends the next; requests
in a warm-up window are sent but not counted. This module builds the one-row request from the
model's config and turns a measured window into the tune's :class:`Measurement`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from builder.repository.triton_config import ModelConfig
from builder.tune import load
from builder.tune.load import RequestInput
from builder.tune.search import Measurement

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


def measure(url: str, model: str, inputs: list[RequestInput], plan: load.Plan) -> Measurement:
    """Drive ``model`` with ``plan.concurrency`` closed-loop clients, all sending ``inputs``;
    latencies of the requests that complete inside the ``plan.seconds`` window after the
    warm-up, and Triton's queue/compute split per request over the same window."""
    segment = load.measure(url, model, [inputs], plan)
    lat_ms = segment.latencies_ns.astype(np.float64) / 1e6
    served = segment.success_count
    return Measurement(
        concurrency=plan.concurrency,
        throughput=len(lat_ms) / plan.seconds,
        p50_ms=float(np.percentile(lat_ms, 50)) if lat_ms.size else float("inf"),
        p99_ms=float(np.percentile(lat_ms, 99)) if lat_ms.size else float("inf"),
        requests=len(lat_ms),
        queue_us=segment.queue_ns / served / 1e3 if served else 0.0,
        compute_us=segment.compute_ns / served / 1e3 if served else 0.0,
    )
