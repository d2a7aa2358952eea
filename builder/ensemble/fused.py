"""``--ensemble-mode fused``: preprocess -> model -> postprocess as one ONNX model."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import onnx

from builder.ensemble.graphs import fused_graph, typed_fused_graph
from builder.ensemble.spec import EnsembleSpec, checked_input, spec_file, takes_typed_inputs, typed_post
from builder.kinds import ModelKind
from builder.repository.triton_config import ServingOptions, onnx_model_config
from builder.repository.write import ModelArtifact
from builder.tensors import graph_tensors


@dataclass(frozen=True)
class FusedModel:
    """What ``--ensemble-mode fused`` builds from: the exported model and how it is served."""

    name: str
    graph: onnx.ModelProto
    spec: EnsembleSpec
    options: ServingOptions
    parameters: dict[str, str] | None = None
    warmup_files: dict[str, bytes] | None = None  # the model's, under ``warmup/<input>``
    identity: str | None = None  # the model's export identity, made the fused one's
    kind: ModelKind | None = None  # what the model answers (a typed model's classes)
    layout: str = "matrix"  # the model's input layout (builder/registry/signature.py)


def fused_artifact(model: FusedModel) -> ModelArtifact:
    """``--ensemble-mode fused``: preprocess -> model -> postprocess as one ONNX model
    ``NAME_ensemble``, with the steps ensemble's inputs and outputs, so clients (and the
    gateway, which tries ``NAME_ensemble`` first) need no change. It is the model itself, so
    it carries the model's batching, queue delay and instances. A model with typed inputs:
    model -> postprocess, with the model's own inputs."""
    inputs, outputs = graph_tensors(model.graph.graph.input), graph_tensors(model.graph.graph.output)
    record: dict[str, Any]
    if takes_typed_inputs(model.layout, inputs):
        plan = typed_post(model.spec, model.kind, outputs)
        dtype = plan.label_dtype if plan is not None else "int64"
        graph = typed_fused_graph(
            model.graph,
            plan.postprocess if plan is not None else None,
            plan.classes if plan is not None else None,
            dtype,
        )
        served_inputs = list(inputs)
        record = {"preprocess": None, "postprocess": plan.record() if plan is not None else None}
    else:
        raw = checked_input(inputs, model.spec)
        by_name = {t.name: t for t in outputs}
        probs = by_name.get("probabilities")
        post = model.spec.postprocess if probs is not None else None
        classes = probs.shape[1] if probs is not None else 0
        graph = fused_graph(model.graph, model.spec.preprocess, post, raw.shape[1], classes)
        served_inputs = [raw]
        record = {"preprocess": model.spec.preprocess, "postprocess": post}
    served = graph_tensors(graph.graph.output)
    name, options = f"{model.name}_ensemble", model.options
    warmup = model.warmup_files if options.warmup else None
    identity = None
    if model.identity is not None:
        key = {"model": model.identity, "spec": [model.spec.preprocess, model.spec.postprocess]}
        identity = hashlib.sha256(json.dumps({"fused": key}, sort_keys=True).encode()).hexdigest()
    return ModelArtifact(
        name=name,
        config=onnx_model_config(
            name,
            served_inputs,
            served,
            options,
            warmup_files={t.name: t.name for t in inputs} if warmup else None,
            parameters=model.parameters,
        ),
        version_files={"model.onnx": graph.SerializeToString(), "spec.json": spec_file(record)},
        model_files=warmup or {},
        identity=identity,
    )
