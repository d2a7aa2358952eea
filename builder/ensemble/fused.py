"""``--ensemble-mode fused``: preprocess -> model -> postprocess as one ONNX model."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import onnx

from builder.ensemble.graphs import fused_graph, typed_fused_graph
from builder.ensemble.plan import WrappedModel
from builder.ensemble.spec import EnsembleSpec, checked_input, spec_file, takes_typed_inputs, typed_post
from builder.repository.triton_config import onnx_model_config
from builder.repository.write import ModelArtifact
from builder.tensors import graph_tensors


def fused_artifact(
    model: WrappedModel,
    graph: onnx.ModelProto,
    spec: EnsembleSpec,
    *,
    parameters: dict[str, str] | None = None,
    warmup_files: dict[str, bytes] | None = None,
    identity: str | None = None,
) -> ModelArtifact:
    """``--ensemble-mode fused``: preprocess -> model (``graph``) -> postprocess as one ONNX
    model ``NAME_ensemble``, with the steps ensemble's inputs and outputs, so clients (and the
    gateway, which tries ``NAME_ensemble`` first) need no change. It is the model itself, so
    it carries the model's batching, queue delay and instances, its warm-up files (under
    ``warmup/<input>``) and, hashed with the spec, its export ``identity``. A model with typed
    inputs: model -> postprocess, with the model's own inputs."""
    inputs, outputs = graph_tensors(graph.graph.input), graph_tensors(graph.graph.output)
    record: dict[str, Any]
    if takes_typed_inputs(model.layout, inputs):
        plan = typed_post(spec, model.kind, outputs)
        dtype = plan.label_dtype if plan is not None else "int64"
        fused = typed_fused_graph(
            graph,
            plan.postprocess if plan is not None else None,
            plan.classes if plan is not None else None,
            dtype,
        )
        served_inputs = list(inputs)
        record = {"preprocess": None, "postprocess": plan.record() if plan is not None else None}
    else:
        raw = checked_input(inputs, spec)
        by_name = {t.name: t for t in outputs}
        probs = by_name.get("probabilities")
        post = spec.postprocess if probs is not None else None
        classes = probs.shape[1] if probs is not None else 0
        fused = fused_graph(graph, spec.preprocess, post, raw.shape[1], classes)
        served_inputs = [raw]
        record = {"preprocess": spec.preprocess, "postprocess": post}
    served = graph_tensors(fused.graph.output)
    name, options = f"{model.name}_ensemble", model.options
    warmup = warmup_files if options.warmup else None
    if identity is not None:
        key = {"model": identity, "spec": [spec.preprocess, spec.postprocess]}
        identity = hashlib.sha256(json.dumps({"fused": key}, sort_keys=True).encode()).hexdigest()
    return ModelArtifact(
        name=name,
        config=onnx_model_config(
            name,
            served_inputs,
            served,
            options,
            warmup_files={t.name: t.name for t in inputs} if warmup else None,
            parameters=parameters,
        ),
        version_files={"model.onnx": fused.SerializeToString(), "spec.json": spec_file(record)},
        model_files=warmup or {},
        identity=identity,
    )
