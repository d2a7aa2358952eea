"""Triton ``config.pbtxt`` generation through the protobuf schema (never string templates).

Configs are built as dicts in the schema's own field names, parsed with
``json_format.ParseDict`` into tritonclient's ``ModelConfig`` (so a misspelt field or a wrong
type fails here, not in Triton), and printed with ``text_format``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from builder.errors import UsageError
from builder.tensors import TensorSpec, triton_dtype

__all__ = ["ModelConfig"]


@dataclass(frozen=True)
class VersionPolicy:
    """Triton's version_policy: ``latest:N``, ``all`` or ``specific:1,3``."""

    kind: str = "latest"
    versions: tuple[int, ...] = (1,)

    @classmethod
    def parse(cls, text: str) -> VersionPolicy:
        kind, _, arg = text.partition(":")
        try:
            if kind == "all" and not arg:
                return cls("all", ())
            if kind == "latest":
                n = int(arg or "1")
                if n >= 1:
                    return cls("latest", (n,))
            if kind == "specific" and arg:
                versions = tuple(int(v) for v in arg.split(","))
                if all(v >= 1 for v in versions):
                    return cls("specific", versions)
        except ValueError:
            pass
        raise UsageError(f"bad version policy {text!r}", hint="use latest:N, all, or specific:1,3")

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "all":
            return {"all": {}}
        if self.kind == "latest":
            return {"latest": {"num_versions": self.versions[0]}}
        return {"specific": {"versions": list(self.versions)}}


@dataclass(frozen=True)
class ServingOptions:
    """How Triton serves the model; every field is a CLI flag of ``builder export``.

    The defaults suit a small CPU model: batches of up to 64 rows, formed from what queued while
    the instance was busy and never waited for (queue delay 0, Triton's own default: a lone
    request runs at once, 0.34 ms p50 where 1 ms of delay gave 1.51 ms, and 16 clients still
    batch; a delay pays only at high concurrency, +24 % throughput at 64 clients with 1 ms, which
    ``builder tune`` finds; docs/benchmarks.md, bench (f)), one instance (the dynamic batcher, not extra
    instances, is what scales a cheap model on few cores), warm-up on, no queue limit unless asked.
    """

    max_batch_size: int = 64
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    dynamic_batching: bool = True
    max_queue_size: int = 0  # 0: unbounded, Triton's default
    queue_timeout_us: int = 0  # 0: no per-request timeout in the queue
    instances: int = 1
    version_policy: VersionPolicy = field(default_factory=VersionPolicy)
    warmup: bool = True
    gpu_accelerator: str = "none"  # "none" | "tensorrt": ONNX Runtime's TensorRT EP on GPU
    trt_precision: str = "FP16"
    trt_workspace_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        if self.max_batch_size < 0:
            raise UsageError("--max-batch-size must be >= 0 (0 disables batching)")
        if self.max_queue_delay_us < 0 or self.max_queue_size < 0 or self.queue_timeout_us < 0:
            raise UsageError("queue delay, size and timeout must be >= 0")
        if self.instances < 1:
            raise UsageError("--instances must be >= 1")
        bad = [b for b in self.preferred_batch_sizes if b < 1 or b > self.max_batch_size]
        if bad:
            raise UsageError(
                f"preferred batch size(s) {bad} outside 1..max_batch_size ({self.max_batch_size})"
            )
        if self.gpu_accelerator not in {"none", "tensorrt"}:
            raise UsageError(f"--gpu-accelerator {self.gpu_accelerator!r}: use none or tensorrt")
        if self.trt_precision not in {"FP16", "FP32"}:
            raise UsageError(f"--trt-precision {self.trt_precision!r}: use FP16 or FP32")


def _io(tensors: Sequence[TensorSpec], batched: bool) -> list[dict[str, Any]]:
    # With batching, Triton's dims are per row: the leading batch axis is implied.
    return [
        {
            "name": t.name,
            "data_type": triton_dtype(t.dtype),
            "dims": list(t.shape[1:] if batched else t.shape),
        }
        for t in tensors
    ]


def _batching(options: ServingOptions) -> dict[str, Any]:
    batching: dict[str, Any] = {"max_queue_delay_microseconds": options.max_queue_delay_us}
    if options.preferred_batch_sizes:
        batching["preferred_batch_size"] = list(options.preferred_batch_sizes)
    if options.max_queue_size or options.queue_timeout_us:
        batching["default_queue_policy"] = {
            "max_queue_size": options.max_queue_size,
            "timeout_action": "REJECT",
            "default_timeout_microseconds": options.queue_timeout_us,
        }
    return batching


def warmup(inputs: Sequence[TensorSpec], files: dict[str, str], batched: bool) -> list[dict[str, Any]]:
    """One warm-up request from the input example's raw files (``<model>/warmup/<input>``)."""
    return [
        {
            "name": "input_example",
            "batch_size": 1 if batched else 0,
            "inputs": {
                t.name: {
                    "data_type": triton_dtype(t.dtype),
                    "dims": list(t.shape[1:] if batched else t.shape),
                    "input_data_file": files[t.name],
                }
                for t in inputs
            },
        }
    ]


def _instances(options: ServingOptions) -> list[dict[str, Any]]:
    # No `kind`: Triton then picks GPU where there is one and CPU elsewhere, so the same file
    # loads on a laptop and on a GPU node (KIND_GPU fails to load without a GPU).
    return [{"count": options.instances}]


def onnx_model_config(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    options: ServingOptions,
    warmup_files: dict[str, str] | None = None,
    parameters: dict[str, str] | None = None,
) -> ModelConfig:
    """Config of an exported ONNX model, for the onnxruntime backend.

    ``parameters`` carry what a client needs to build the input (feature order, the Feast
    feature service): readable through Triton's model-config API, so a client needs no
    access to the repository's files. Backends ignore keys they do not know.
    """
    batched = options.max_batch_size > 0
    spec: dict[str, Any] = {
        "name": name,
        "backend": "onnxruntime",
        "max_batch_size": options.max_batch_size,
        "version_policy": options.version_policy.to_dict(),
        "input": _io(inputs, batched),
        "output": _io(outputs, batched),
        "instance_group": _instances(options),
    }
    if batched and options.dynamic_batching:
        spec["dynamic_batching"] = _batching(options)
    if options.gpu_accelerator == "tensorrt":
        spec["optimization"] = {
            "execution_accelerators": {
                "gpu_execution_accelerator": [
                    {
                        "name": "tensorrt",
                        "parameters": {
                            "precision_mode": options.trt_precision,
                            "max_workspace_size_bytes": str(options.trt_workspace_bytes),
                            "trt_engine_cache_enable": "1",
                            "trt_engine_cache_path": "/tmp/triton-trt-cache",
                        },
                    }
                ]
            }
        }
    if parameters:
        spec["parameters"] = {k: {"string_value": v} for k, v in parameters.items()}
    if options.warmup and warmup_files:
        spec["model_warmup"] = warmup(inputs, warmup_files, batched)
    return json_format.ParseDict(spec, ModelConfig())


def python_model_config(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    *,
    max_batch_size: int,
    parameters: dict[str, str],
    options: ServingOptions,
) -> ModelConfig:
    """Config of a hand-written Python-backend model (ensemble pre/postprocessing)."""
    batched = max_batch_size > 0
    spec: dict[str, Any] = {
        "name": name,
        "backend": "python",
        "max_batch_size": max_batch_size,
        "version_policy": options.version_policy.to_dict(),
        "input": _io(inputs, batched),
        "output": _io(outputs, batched),
        "instance_group": _instances(options),
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
    }
    if batched and options.dynamic_batching:
        spec["dynamic_batching"] = _batching(options)
    return json_format.ParseDict(spec, ModelConfig())


def step_serving_options(options: ServingOptions) -> ServingOptions:
    """Options of a generated ensemble step (preprocess, postprocess ONNX graphs).

    Every composing model has its own scheduler, so a queue delay on each step makes a lone
    request wait once per step (measured: 3.29 of 4.08 ms at concurrency 1 with three 1 ms
    delays). Only the model's batch is worth waiting for; the steps are a few elementwise
    operators, so they batch with no delay: a request runs at once, and what queued while
    the instance was busy goes as one batch. One instance each: a step costs microseconds a
    batch, and more instances only add threads on the model's cores. No queue policy, warm-up
    or TensorRT: the model, where the time goes, carries those.
    """
    return dataclasses.replace(
        options,
        max_queue_delay_us=0,
        preferred_batch_sizes=(),
        max_queue_size=0,
        queue_timeout_us=0,
        instances=1,
        warmup=False,
        gpu_accelerator="none",
    )


@dataclass(frozen=True)
class EnsembleStep:
    model_name: str
    input_map: dict[str, str]  # step's model input -> ensemble tensor
    output_map: dict[str, str]  # step's model output -> ensemble tensor
    # The step model's version the ensemble runs; -1 is "the latest loaded". builder export
    # pins the version it wrote, so that the ensemble config is the export's commit point.
    model_version: int = -1


def ensemble_config(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    steps: Sequence[EnsembleStep],
    *,
    max_batch_size: int,
    options: ServingOptions,
    parameters: dict[str, str] | None = None,
) -> ModelConfig:
    """An ``ensemble`` config; each step runs its ``model_version`` (-1: the latest loaded).

    No batcher of its own: ``ensemble_scheduling`` is the config's scheduling choice (a oneof
    with ``dynamic_batching``), and the ensemble scheduler hands each request to its first
    step on arrival, so the only queues are the steps'.
    """
    batched = max_batch_size > 0
    spec: dict[str, Any] = {
        "name": name,
        "platform": "ensemble",
        "max_batch_size": max_batch_size,
        "version_policy": options.version_policy.to_dict(),
        "input": _io(inputs, batched),
        "output": _io(outputs, batched),
        "ensemble_scheduling": {
            "step": [
                {
                    "model_name": s.model_name,
                    "model_version": s.model_version,
                    "input_map": s.input_map,
                    "output_map": s.output_map,
                }
                for s in steps
            ]
        },
    }
    pinned = {s.model_version for s in steps}
    if len(pinned) == 1 and min(pinned) > 0:
        # An ensemble version is an empty folder; what it runs is in this config. Loading only
        # the pinned version makes a new version folder inert until the config naming it lands,
        # so that one file replace switches the served version and its steps together.
        spec["version_policy"] = {"specific": {"versions": sorted(pinned)}}
    if parameters:
        spec["parameters"] = {k: {"string_value": v} for k, v in parameters.items()}
    return json_format.ParseDict(spec, ModelConfig())


def to_pbtxt(config: ModelConfig) -> str:
    """Text form of ``config``. proto3 omits zero scalars, but ``max_batch_size: 0`` means
    "this model does not batch" and a reader (or an auto-completing Triton) must see it."""
    text = text_format.MessageToString(config)
    if config.max_batch_size == 0:
        text = text.replace(f'name: "{config.name}"\n', f'name: "{config.name}"\nmax_batch_size: 0\n', 1)
    return text


def parse_pbtxt(text: str) -> ModelConfig:
    """Parse a config.pbtxt; raises google.protobuf.text_format.ParseError."""
    return text_format.Parse(text, ModelConfig())
