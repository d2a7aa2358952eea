"""What an export writes for one model: config.pbtxt, model.onnx, warm-up rows, metadata.json;
with ``--ensemble``, the ensemble's models beside it (builder/ensemble/artifacts.py, from the
plan made before conversion), whose drift record is decided here.

The serving contract (docs/serving-contract.md) is decided here, once, and written through
``serving_contract`` into both the config's ``parameters`` (for clients that only see Triton)
and ``metadata.json`` (for tools that read the repository): input layout and columns, model
kind, classes, output roles, the run's ``feast.*`` tags; and the drift reference beside it
(docs/drift.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import onnx

from builder import __version__
from builder.errors import UsageError
from builder.export.drift_reference import Drift
from builder.kinds import ModelKind
from builder.registry.client import RegistryModel, tracking_uri
from builder.registry.signature import ModelInputs
from builder.repository.triton_config import onnx_model_config
from builder.repository.write import ModelArtifact
from builder.tensors import TensorSpec, graph_tensors
from serving_contract import Column, Dtype, Layout, ServingContract, feast_tags, keys
from serving_contract import Explainer as ContractExplainer

if TYPE_CHECKING:
    from builder.export.context import ExportContext, ExportRequest

# ONNX operators that need a UTF-8 locale in the serving container (onnxruntime's
# StringNormalizer builds one from its `locale` attribute).
STRING_OPS = {"StringNormalizer", "Tokenizer"}


def opset_of(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def uses_string_ops(model: onnx.ModelProto) -> bool:
    return any(n.op_type in STRING_OPS for n in model.graph.node)


def decision_threshold(model: RegistryModel, kind: ModelKind) -> float | None:
    """The run param ``decision_threshold`` of a binary classifier, if it has one."""
    raw = model.run_params.get("decision_threshold")
    if raw is None or kind.kind != "binary":
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise UsageError(f"run param decision_threshold={raw!r} is not a number") from exc
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"run param decision_threshold={raw} is outside [0, 1]")
    return value


def serving_contract(
    model: RegistryModel,
    inputs: ModelInputs,
    kind: ModelKind,
    graph: onnx.ModelProto,
    explainer: ContractExplainer | None = None,
) -> ServingContract:
    """The serving contract of the exported model: its inputs' layout and columns, what its kind
    answers, the run's decision threshold and ``feast.*`` tags (feature service, entity keys,
    request-time fields), and whether the graph needs a UTF-8 locale."""
    tabular = inputs.tabular
    return dataclasses.replace(
        kind.contract(),
        layout=cast(Layout, inputs.layout),
        columns=tuple(Column(c.name, cast(Dtype, c.dtype)) for c in inputs.columns) if tabular else None,
        feature_names=tuple(inputs.feature_names or ()) if tabular else None,
        decision_threshold=decision_threshold(model, kind),
        string_ops=uses_string_ops(graph),
        feast=feast_tags(model.run_tags),
        explainer=explainer,
    )


def warmup_bytes(tensor: TensorSpec, row: np.ndarray) -> bytes:
    """One row as Triton's warm-up ``input_data_file`` holds it: raw little-endian values, or
    for strings its BYTES serialization (4-byte length + UTF-8 bytes per element)."""
    if tensor.dtype == "string":
        from tritonclient.utils import serialize_byte_tensor

        serialized = serialize_byte_tensor(np.array([str(v).encode() for v in row.ravel()], dtype=object))
        return bytes(serialized.item()) if serialized.size else b""
    return np.ascontiguousarray(row).tobytes()


def _identity(request: ExportRequest, model: RegistryModel, explained: bool = False) -> str:
    """Same registry version, run, builder and conversion settings = the same export."""
    key = {
        "registered_name": model.registered_name,
        "version": model.version,
        "run_id": model.run_id,
        "uri": model.uri.raw if model.version is None else None,
        "builder_version": __version__,
        "opset": request.opset,
        # The ONNX model is the same whatever is built beside it (a plan has its own identity),
        # and this keeps the identities of ONNX-only exports what they always were.
        "formats": ["onnx"],
    }
    if request.reference is not None:
        # A reference file is not part of the run: another file is another export. (Without one,
        # the run's own artifact is, and identities stay what they were before drift.)
        key["reference_sha256"] = hashlib.sha256(request.reference.read_bytes()).hexdigest()
    if explained:  # the config names the explainer (without one, identities stay as they were)
        key["explain"] = True
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def ensemble_drift(drift: Drift, preprocess: dict[str, Any], serving_steps: bool = False) -> Drift:
    """The ensemble's drift record. Its clients send the values *before* its preprocess step, and
    the reference bins the model's own inputs (after it): the same bins only when the preprocess
    changes nothing; otherwise drift is off for the ensemble rather than a false alarm. The run's
    own steps (docs/user-steps.md) may change inputs or the prediction in ways the builder cannot
    know, so an ensemble with any has drift off too."""
    if drift.reference is None:
        return drift
    if serving_steps:
        return Drift(
            None,
            "the ensemble runs the run's own serving steps, which may change its inputs or "
            "prediction: the model's reference does not describe them",
        )
    if not any(preprocess.get(k) is not None for k in ("impute", "mean", "scale")):
        return drift
    return Drift(
        None,
        "the ensemble's inputs are the values before its preprocess step, and the reference "
        "describes the model's inputs after it",
    )


def model_artifacts(ctx: ExportContext) -> list[ModelArtifact]:
    """The exported model's artifact, plus the ensemble's when asked."""
    from builder.parity.rows import example_digest

    request, model, inputs, graph = ctx.request, ctx.model, ctx.inputs, ctx.graph
    outputs = graph_tensors(graph.graph.output)
    options = request.serving
    if options.max_batch_size > 0 and not all(t.batched for t in (*inputs.tensors, *outputs)):
        raise UsageError(
            f"{model.ref} has tensors without a variable batch dimension; export with --max-batch-size 0"
        )
    explained = None
    if ctx.explainer is not None:
        from builder.explain.artifact import contract_explainer

        explained = contract_explainer(ctx.name, ctx.explainer)
    contract = serving_contract(model, inputs, ctx.kind, graph, explained)
    params = contract.to_parameters()
    drift = ctx.drift
    reference = drift.parameter()
    if reference is not None:  # the gateway reads it from Triton with the serving contract
        params[keys.DRIFT_REFERENCE] = reference
    # Warm-up sends the first parity row (the input example's, when there is one).
    first = ctx.feeds.head(1)
    warmup = {f"warmup/{t.name}": warmup_bytes(t, first[t.name]) for t in inputs.tensors}
    config = onnx_model_config(
        ctx.name,
        inputs.tensors,
        outputs,
        options,
        warmup_files={t.name: t.name for t in inputs.tensors} if options.warmup else None,
        parameters=params,
    )
    onnx_bytes = graph.SerializeToString()
    metadata = {
        "builder_version": __version__,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": {
            "uri": model.uri.raw,
            "tracking_uri": tracking_uri(),
            "registered_name": model.registered_name,
            "version": model.version,
            "run_id": model.run_id,
            "flavor": model.flavor,
        },
        "signature": {
            "inputs": [t.to_dict() for t in inputs.tensors],
            "outputs": [t.to_dict() for t in outputs],
            "feature_names": list(inputs.feature_names) if inputs.feature_names else None,
        },
        **contract.to_metadata(),
        "input_example_sha256": example_digest(ctx.example) if ctx.example is not None else None,
        "parity": ctx.parity.to_dict(),
        "drift": drift.to_metadata(),
        "onnx": {"opset": opset_of(graph), "sha256": hashlib.sha256(onnx_bytes).hexdigest()},
    }
    # Run and version tags carry what serving needs to know from training, e.g. the Feast
    # feature service and ordered feature list (the contract's feast.* tags, the run's);
    # MLflow's own bookkeeping tags are left out.
    metadata[keys.TAGS] = {
        k: v for k, v in {**model.run_tags, **model.version_tags}.items() if not k.startswith("mlflow.")
    }
    artifacts = [
        ModelArtifact(
            name=ctx.name,
            config=config,
            version_files={"model.onnx": onnx_bytes},
            model_files=warmup if options.warmup else {},
            metadata=metadata,
            identity=_identity(request, model, ctx.explainer is not None),
        )
    ]
    if ctx.ensemble is not None:
        artifacts += _ensemble(ctx, artifacts[0], params, drift)
    if ctx.explainer is not None:
        from builder.explain.artifact import explainer_artifact

        artifacts.append(explainer_artifact(ctx, ctx.explainer, artifacts[0].identity))
    return artifacts


def _ensemble(
    ctx: ExportContext, main: ModelArtifact, params: dict[str, str], drift: Drift
) -> list[ModelArtifact]:
    """The ensemble's models (builder/ensemble/artifacts.py), with its own drift record."""
    from builder.ensemble.artifacts import ensemble_models
    from builder.ensemble.plan import WrappedModel

    plan = ctx.ensemble
    assert plan is not None  # only asked with --ensemble
    spec = plan.spec
    ens_drift = ensemble_drift(drift, spec.preprocess if spec is not None else {}, bool(plan.serving_steps))
    ens_params = {k: v for k, v in params.items() if k != keys.DRIFT_REFERENCE}
    if ens_drift.parameter() is not None:
        ens_params[keys.DRIFT_REFERENCE] = str(ens_drift.parameter())
    model = WrappedModel(
        ctx.name,
        ctx.inputs.tensors,
        graph_tensors(ctx.graph.graph.output),
        ctx.request.serving,
        kind=ctx.kind,
        layout=ctx.inputs.layout,
        version=ctx.version,
    )
    return ensemble_models(
        main,
        ctx.graph,
        model,
        plan,
        parameters=ens_params,
        drift=ens_drift.to_metadata(),
        step_models=ctx.step_models,
    )
