"""Triton config of a TensorRT plan, through the protobuf schema like every other config.

Unlike the ONNX config, this one names ``KIND_GPU``: a plan cannot run on a CPU, so a CPU-only
server should refuse it at load rather than pretend. ``cc_model_filenames`` maps the compute
capability the engine was built for to its file, since an engine does not move between GPU
generations; the same file is the ``default_model_filename``, so ``builder validate`` checks
it is there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format

# The ONNX config's own helpers: the plan's tensors and batcher are declared the same way.
from builder.repository.triton_config import ModelConfig, ServingOptions, _batching, _io, warmup
from builder.tensorrt.profiles import BatchProfile, aligned_preferred_sizes
from builder.tensors import TensorSpec

PLATFORM = "tensorrt_plan"


def plan_filename(compute_capability: str) -> str:
    """``"9.0"`` -> ``model.sm90.plan``: the capability in the name, as engines are per-GPU."""
    return f"model.sm{compute_capability.replace('.', '')}.plan"


def plan_model_config(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    options: ServingOptions,
    profile: BatchProfile | None,
    *,
    compute_capability: str,
    warmup_files: dict[str, str] | None = None,
) -> ModelConfig:
    """Config of a ``tensorrt_plan`` model whose batcher matches the engine's profile; its file
    is named after ``compute_capability`` (``plan_filename``)."""
    plan_file = plan_filename(compute_capability)
    batched = options.max_batch_size > 0
    if batched and (profile is None or profile.max != options.max_batch_size):
        # Triton refuses a max_batch_size beyond the profile's max at load; catch it here.
        raise ValueError(f"profile {profile} does not end at max_batch_size {options.max_batch_size}")
    spec: dict[str, Any] = {
        "name": name,
        "platform": PLATFORM,
        "max_batch_size": options.max_batch_size,
        "version_policy": options.version_policy.to_dict(),
        "input": _io(inputs, batched),
        "output": _io(outputs, batched),
        "instance_group": [{"count": options.instances, "kind": "KIND_GPU"}],
        "default_model_filename": plan_file,
        "cc_model_filenames": {compute_capability: plan_file},
    }
    if batched and options.dynamic_batching:
        aligned = aligned_preferred_sizes(profile, options.preferred_batch_sizes)
        spec["dynamic_batching"] = _batching(dataclasses.replace(options, preferred_batch_sizes=aligned))
    if options.warmup and warmup_files:
        spec["model_warmup"] = warmup(inputs, warmup_files, batched)
    return json_format.ParseDict(spec, ModelConfig())
