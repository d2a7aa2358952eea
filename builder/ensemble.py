"""Ensembles: preprocess -> model -> postprocess, every part an ONNX graph.

Two shapes (``--ensemble-mode``): ``steps`` writes ``NAME_preprocess`` and ``NAME_postprocess``
(ONNX graphs the builder generates, see ``builder/ensemble_onnx.py``) and the Triton ensemble
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

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from builder.config import (
    ServingOptions,
    ensemble_config,
    onnx_model_config,
    step_serving_options,
)
from builder.convert.base import graph_tensors
from builder.ensemble_onnx import (
    fused_graph,
    label_graph,
    postprocess_graph,
    preprocess_graph,
    typed_fused_graph,
)
from builder.errors import UsageError
from builder.kinds import ModelKind
from builder.registry import RegistryModel
from builder.repository import ModelArtifact
from builder.tensors import TensorSpec
from builder.user_step_models import StepModel, user_step_artifact
from builder.user_steps import UserStep
from builder.wiring import Node, Port, wire

RUN_ARTIFACT = "serving/ensemble.json"


@dataclass(frozen=True)
class EnsembleSpec:
    preprocess: dict[str, Any]
    postprocess: dict[str, Any]
    source: str  # where it came from, recorded in the metadata

    @classmethod
    def from_dict(cls, data: Any, source: str) -> EnsembleSpec:
        if not isinstance(data, dict) or not set(data) <= {"preprocess", "postprocess"}:
            raise UsageError(
                f"ensemble spec {source}: expected an object with 'preprocess' and/or 'postprocess'"
            )
        pre, post = data.get("preprocess") or {}, data.get("postprocess") or {}
        for key in ("impute", "mean", "scale"):
            values = pre.get(key)
            if values is not None and not (
                isinstance(values, list) and all(isinstance(v, int | float) for v in values)
            ):
                raise UsageError(f"ensemble spec {source}: preprocess.{key} must be a list of numbers")
        threshold = post.get("threshold", 0.5)
        if not isinstance(threshold, int | float) or not 0.0 <= threshold <= 1.0:
            raise UsageError(f"ensemble spec {source}: postprocess.threshold must be in [0, 1]")
        return cls(preprocess=dict(pre), postprocess=dict(post), source=source)


def load_spec(
    model: RegistryModel, spec_file: Path | None, workdir: Path | None = None, *, required: bool = True
) -> EnsembleSpec | None:
    """The spec from ``spec_file``, else from the model's run (downloaded into ``workdir``, the
    export's scratch folder, so that nothing outlives the export); a threshold param overrides.
    Not ``required`` (the run logged its own steps): None where the run has no spec."""
    if spec_file is not None:
        try:
            data = json.loads(spec_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"cannot read ensemble spec {spec_file}: {exc}") from exc
        spec = EnsembleSpec.from_dict(data, str(spec_file))
    else:
        raw = _run_artifact(model, workdir, required)
        if raw is None:
            return None
        spec = EnsembleSpec.from_dict(raw, f"runs:/{model.run_id}/{RUN_ARTIFACT}")
    return _run_threshold(spec, model)


def _run_threshold(spec: EnsembleSpec, model: RegistryModel) -> EnsembleSpec:
    if "decision_threshold" in model.run_params:
        try:
            spec.postprocess["threshold"] = float(model.run_params["decision_threshold"])
        except ValueError as exc:
            raise UsageError("run param decision_threshold is not a number") from exc
    return spec


def typed_spec(model: RegistryModel) -> EnsembleSpec:
    """The spec of a typed model whose run logs none: post-only steps from the model's classes,
    with the run's ``decision_threshold`` (else 0.5)."""
    return _run_threshold(EnsembleSpec({}, {}, "the model's classes and the run's params"), model)


def takes_typed_inputs(layout: str, inputs: Sequence[TensorSpec]) -> bool:
    """Whether the model's graph takes typed inputs (one per column, or several tensors)
    rather than one float32 matrix: its preprocessing is then inside the graph, and the
    generated steps are post-only."""
    return layout == "columns" or len(inputs) != 1 or inputs[0].dtype != "float32"


@dataclass(frozen=True)
class TypedPost:
    """A typed model's generated postprocess: what it computes and over which classes."""

    postprocess: dict[str, Any]  # threshold, positive_index (binary)
    classes: tuple[Any, ...]
    label_dtype: str  # the model's own label's: int64 or string

    def record(self) -> dict[str, Any]:
        """spec.json beside the graph: the parameters it carries, readable."""
        return {**self.postprocess, "classes": list(self.classes)}


def typed_post(spec: EnsembleSpec, kind: ModelKind | None, outputs: Sequence[TensorSpec]) -> TypedPost | None:
    """The post-only step of a typed model (None: a regressor, or a model of kind other, gets
    none); the spec refused where it asks for preprocessing the graph already does."""
    asked = [k for k in ("impute", "mean", "scale") if spec.preprocess.get(k) is not None]
    if asked:
        raise UsageError(
            f"ensemble spec {spec.source}: preprocess.{'/'.join(asked)} on a model with typed "
            "column inputs, whose graph carries its own preprocessing",
            hint="drop 'preprocess' from the spec (keep 'postprocess'), or impute and scale inside "
            "the model's Pipeline",
        )
    by_name = {t.name: t for t in outputs}
    if kind is None or not kind.is_classifier or kind.classes is None or "probabilities" not in by_name:
        return None
    label = by_name.get("label")
    dtype = label.dtype if label is not None else ("string" if kind.string_labels else "int64")
    post = dict(spec.postprocess) if kind.kind == "binary" else {}
    return TypedPost(post, tuple(kind.classes), dtype)


def _run_artifact(model: RegistryModel, workdir: Path | None, required: bool) -> Any:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        if not required:
            folder = RUN_ARTIFACT.rsplit("/", 1)[0]
            listed = {a.path for a in MlflowClient().list_artifacts(model.run_id, folder)}
            if RUN_ARTIFACT not in listed:
                return None
        # Without dst_path MLflow downloads into a fresh temp folder it never removes.
        dst = None
        if workdir is not None:
            dst = workdir / "ensemble-spec"
            dst.mkdir(parents=True, exist_ok=True)
        path = mlflow.artifacts.download_artifacts(
            run_id=model.run_id, artifact_path=RUN_ARTIFACT, dst_path=str(dst) if dst else None
        )
        return json.loads(Path(path).read_text())
    except (MlflowException, OSError, json.JSONDecodeError) as exc:
        raise UsageError(
            f"--ensemble: the run {model.run_id} of {model.ref} has no readable {RUN_ARTIFACT}",
            hint="log it with mlflow.log_dict(spec, 'serving/ensemble.json'), log serving steps "
            "under serving/steps/ (docs/user-steps.md), or pass --ensemble-spec FILE",
        ) from exc


def _spec_file(spec: dict[str, Any]) -> bytes:
    # Per version (the config is per model): see builder/repository.py on crash consistency.
    # The graph carries the parameters; this is their readable record beside it.
    return (json.dumps(spec, sort_keys=True) + "\n").encode()


def _checked_input(model_inputs: tuple[TensorSpec, ...], spec: EnsembleSpec) -> TensorSpec:
    """The model's one float32 input, whose width the spec's preprocess must match (a model
    with other inputs takes the typed, post-only path: ``takes_typed_inputs``)."""
    (raw,) = model_inputs
    width = raw.shape[1]
    for key in ("impute", "mean", "scale"):
        values = spec.preprocess.get(key)
        if values is not None and len(values) != width:
            raise UsageError(
                f"ensemble spec {spec.source}: preprocess.{key} has {len(values)} values, "
                f"the model takes {width} features"
            )
    return raw


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
        version_files={"model.onnx": graph.SerializeToString(), "spec.json": _spec_file(record)},
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
    name: str,
    model_inputs: tuple[TensorSpec, ...],
    model_outputs: tuple[TensorSpec, ...],
    spec: EnsembleSpec | None,
    options: ServingOptions,
    parameters: dict[str, str] | None = None,
    version: int = -1,
    user_steps: Sequence[UserStep] = (),
    *,
    kind: ModelKind | None = None,
    layout: str = "matrix",
    step_models: Mapping[str, StepModel] | None = None,
) -> list[ModelArtifact]:
    """``--ensemble-mode steps``: the Triton ensemble ``NAME_ensemble`` around the exported
    model ``name``: the run's pre steps, the generated preprocess ONNX model (with a spec), the
    model, the generated postprocess, the run's post steps. Every step runs ``version`` (the
    version this export writes); only the model batches with a queue delay. A model with typed
    inputs (``layout``) gets no preprocess and a postprocess over ``kind``'s classes.
    ``step_models``: the registered-model user steps, exported (by step name)."""
    step_options = step_serving_options(options)
    batched = options.max_batch_size > 0
    artifacts: list[ModelArtifact] = []
    generated_pre: list[Node] = []
    generated_post: list[Node] = []
    model_reads = {t.name: t.name for t in model_inputs}
    model_writes = list(model_outputs)
    outputs = [o.name for o in model_outputs]
    typed = spec is not None and takes_typed_inputs(layout, model_inputs)
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
        raw = _checked_input(model_inputs, spec)
        pre_name = f"{name}_preprocess"
        features = TensorSpec("features", raw.dtype, raw.shape)
        pre = preprocess_graph(spec.preprocess, raw.shape[1], raw.name)
        artifacts.append(
            ModelArtifact(
                name=pre_name,
                config=onnx_model_config(pre_name, [raw], [features], step_options),
                version_files={
                    "model.onnx": pre.SerializeToString(),
                    "spec.json": _spec_file(spec.preprocess),
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
    layout: str = "matrix"  # the model's input layout (builder/signature.py)


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
        raw = _checked_input(inputs, model.spec)
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
        version_files={"model.onnx": graph.SerializeToString(), "spec.json": _spec_file(record)},
        model_files=warmup or {},
        identity=identity,
    )
