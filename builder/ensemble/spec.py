"""The ensemble spec: the pre/postprocessing parameters an ensemble is generated from.

It comes from the MLflow run that trained the model (the artifact ``serving/ensemble.json``,
``{"preprocess": {...}, "postprocess": {...}}`` in the format of
``builder/ensemble_models/transforms.py``), with the run param ``decision_threshold``
overriding the threshold, or from ``--ensemble-spec FILE``. A model with typed inputs needs
none: its steps are post-only (``typed_post``), from the model's own classes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import UsageError
from builder.kinds import ModelKind
from builder.registry.client import RegistryModel
from builder.registry.run_artifacts import Refusal, fetch_run_artifact
from builder.tensors import TensorSpec

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
    model: RegistryModel, spec_file: Path | None, workdir: Path, *, required: bool = True
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


def _run_artifact(model: RegistryModel, workdir: Path, required: bool) -> Any:
    refusal = Refusal(
        f"--ensemble: the run {model.run_id} of {model.ref} has no readable {RUN_ARTIFACT}",
        hint="log it with mlflow.log_dict(spec, 'serving/ensemble.json'), log serving steps "
        "under serving/steps/ (docs/user-steps.md), or pass --ensemble-spec FILE",
        reason=False,
    )
    path = fetch_run_artifact(
        model.run_id, RUN_ARTIFACT, workdir / "ensemble-spec", refusal, optional=not required
    )
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise refusal.error(exc) from exc


def spec_file(spec: dict[str, Any]) -> bytes:
    # Per version (the config is per model): see builder/repository/write.py on crash consistency.
    # The graph carries the parameters; this is their readable record beside it.
    return (json.dumps(spec, sort_keys=True) + "\n").encode()


def checked_input(model_inputs: tuple[TensorSpec, ...], spec: EnsembleSpec) -> TensorSpec:
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
