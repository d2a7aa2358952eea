"""Ensembles: preprocess -> model -> postprocess, every part an ONNX graph.

Two shapes (``--ensemble-mode``): ``steps`` writes ``NAME_preprocess`` and ``NAME_postprocess``
(ONNX graphs the builder generates, see ``builder/ensemble/graphs.py``) and the Triton ensemble
``NAME_ensemble`` over them and ``NAME``; ``fused`` writes one ONNX model ``NAME_ensemble`` with
the same inputs and outputs. Both serve on the onnxruntime backend, natively on the NGC server.

The pre/postprocessing parameters come from the MLflow run that trained the model: the
artifact ``serving/ensemble.json`` (``{"preprocess": {...}, "postprocess": {...}}``, the format
of ``builder/ensemble_models/transforms.py``), with the run param ``decision_threshold``
overriding the threshold. ``--ensemble-spec FILE`` gives the same JSON from a file instead.

A model whose graph takes typed columns (a scikit-learn Pipeline over a DataFrame) carries
its preprocessing inside that graph, so its generated steps are post-only: the model, then a
postprocess that writes class values (``threshold -> label`` for a binary classifier,
``argmax -> class`` for a multiclass one, a constant lookup of the model's classes), nothing
for a regressor. Its spec is optional (the classes come from the model, the threshold from
the run), and a spec that asks it for preprocessing is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from builder.ensemble.graphs import (
    label_graph,
    postprocess_graph,
    preprocess_graph,
)
from builder.ensemble.plan import WrappedModel
from builder.ensemble.spec import EnsembleSpec, checked_input, spec_file, takes_typed_inputs, typed_post
from builder.ensemble.user_step_models import StepModel, user_step_artifact
from builder.ensemble.user_steps import UserStep
from builder.ensemble.wiring import Node, Port, wire
from builder.repository.triton_config import (
    ServingOptions,
    ensemble_config,
    onnx_model_config,
    step_serving_options,
)
from builder.repository.write import ModelArtifact
from builder.tensors import TensorSpec, graph_tensors


def _post_tensors() -> tuple[TensorSpec, TensorSpec]:
    # The dtypes and shapes the Python-backend postprocess answered with: clients keep theirs.
    return TensorSpec("score", "float32", (-1, 1)), TensorSpec("label", "int64", (-1, 1))


def _post_step(
    name: str,
    probs: TensorSpec,
    graph: onnx.ModelProto,
    record: dict[str, Any],
    options: ServingOptions,
    version: int,
    written: Sequence[TensorSpec] | None = None,
) -> tuple[ModelArtifact, Node]:
    """The generated postprocess model ``NAME_postprocess`` (reading ``probs``) and its node;
    ``written``: its outputs as the config declares them (default: the graph's)."""
    post_name = f"{name}_postprocess"
    outs = list(written) if written is not None else list(graph_tensors(graph.graph.output))
    artifact = ModelArtifact(
        name=post_name,
        config=onnx_model_config(post_name, [probs], outs, options),
        version_files={"model.onnx": graph.SerializeToString(), "spec.json": spec_file(record)},
    )
    node = Node(
        post_name,
        "the generated postprocess",
        "post",
        (Port(probs.name, probs.name, probs),),
        tuple(Port(t.name, t.name, t) for t in outs),
        version=version,
    )
    return artifact, node


def ensemble_artifacts(
    model: WrappedModel,
    spec: EnsembleSpec | None,
    *,
    parameters: dict[str, str] | None = None,
    user_steps: Sequence[UserStep] = (),
    step_models: Mapping[str, StepModel] | None = None,
) -> list[ModelArtifact]:
    """``--ensemble-mode steps``: the Triton ensemble ``NAME_ensemble`` around the exported
    model: the run's pre serving steps, the generated preprocess ONNX model (with a spec), the
    model, the generated postprocess, the run's post serving steps. Every stage runs
    ``model.version`` (the version this export writes); only the model batches with a queue
    delay. A model with typed inputs (``model.layout``) gets no preprocess and a postprocess
    over ``model.kind``'s classes. ``step_models``: the registered-model serving steps,
    exported (by step name)."""
    name, options, version, kind = model.name, model.options, model.version, model.kind
    model_inputs, model_outputs = model.inputs, model.outputs
    step_options = step_serving_options(options)
    batched = options.max_batch_size > 0
    artifacts: list[ModelArtifact] = []
    generated_pre: list[Node] = []
    generated_post: list[Node] = []
    model_reads = {t.name: t.name for t in model_inputs}
    model_writes = list(model_outputs)
    outputs = [o.name for o in model_outputs]
    typed = spec is not None and takes_typed_inputs(model.layout, model_inputs)
    post_plan = typed_post(spec, kind, model_outputs) if spec is not None and typed else None
    if post_plan is not None:
        probs = next(o for o in model_outputs if o.name == "probabilities")
        graph = label_graph(post_plan.postprocess, post_plan.classes, post_plan.label_dtype)
        artifact, node = _post_step(name, probs, graph, post_plan.record(), step_options, version)
        artifacts.append(artifact)
        generated_post.append(node)
        # The looked-up label replaces the model's own.
        model_writes = [o for o in model_outputs if o.name != "label"]
        outputs = [o.name for o in model_writes] + [p.tensor for p in node.outputs]
    if spec is not None and not typed:
        raw = checked_input(model_inputs, spec)
        pre_name = f"{name}_preprocess"
        features = TensorSpec("features", raw.dtype, raw.shape)
        pre = preprocess_graph(spec.preprocess, raw.shape[1], raw.name)
        artifacts.append(
            ModelArtifact(
                name=pre_name,
                config=onnx_model_config(pre_name, [raw], [features], step_options),
                version_files={
                    "model.onnx": pre.SerializeToString(),
                    "spec.json": spec_file(spec.preprocess),
                },
            )
        )
        generated_pre.append(
            Node(
                pre_name,
                "the generated preprocess",
                "pre",
                (Port(raw.name, raw.name, raw),),
                (Port("features", "features", features),),
                version=version,
            )
        )
        model_reads = {raw.name: "features"}
        # The thresholded label replaces the model's argmax label.
        model_writes = [o for o in model_outputs if o.name != "label"]
        outputs = [o.name for o in model_writes]
        by_name = {t.name: t for t in model_outputs}
        if "probabilities" in by_name:
            probs = by_name["probabilities"]
            post = postprocess_graph(spec.postprocess, probs.shape[1])
            artifact, node = _post_step(
                name, probs, post, spec.postprocess, step_options, version, _post_tensors()
            )
            artifacts.append(artifact)
            generated_post.append(node)
            outputs += ["score", "label"]
    by_input = {t.name: t for t in model_inputs}
    model_node = Node(
        name,
        f"the model {name!r}",
        "model",
        tuple(Port(n, tensor, by_input[n]) for n, tensor in model_reads.items()),
        tuple(Port(o.name, o.name, o) for o in model_writes),
        version=version,
    )
    exported = step_models or {}
    user = [user_step_artifact(name, step, options, version, exported.get(step.name)) for step in user_steps]
    artifacts += [art for art, _ in user]
    user_pre = [node for (_, node), s in zip(user, user_steps, strict=True) if s.position == "pre"]
    user_post = [node for (_, node), s in zip(user, user_steps, strict=True) if s.position == "post"]
    nodes = [*user_pre, *generated_pre, model_node, *generated_post, *user_post]
    wiring = wire(nodes, set(by_input), outputs, batched=batched)
    ens_name = f"{name}_ensemble"
    artifacts.append(
        ModelArtifact(
            name=ens_name,
            config=ensemble_config(
                ens_name,
                wiring.inputs,
                wiring.outputs,
                wiring.steps,
                max_batch_size=options.max_batch_size,
                options=options,
                parameters=parameters,
            ),
            version_files={},
        )
    )
    return artifacts
