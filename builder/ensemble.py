"""Ensembles: preprocess (Python backend) -> model (ONNX) -> postprocess (Python backend).

The pre/postprocessing parameters come from the MLflow run that trained the model: the
artifact ``serving/ensemble.json`` (``{"preprocess": {...}, "postprocess": {...}}``, the format
of ``builder/ensemble_models/transforms.py``), with the run param ``decision_threshold``
overriding the threshold. ``--ensemble-spec FILE`` gives the same JSON from a file instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from builder.config import EnsembleStep, ServingOptions, ensemble_config, python_model_config
from builder.errors import UsageError
from builder.registry import RegistryModel
from builder.repository import ModelArtifact
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


def load_spec(model: RegistryModel, spec_file: Path | None, workdir: Path | None = None) -> EnsembleSpec:
    """The spec from ``spec_file``, else from the model's run (downloaded into ``workdir``, the
    export's scratch folder, so that nothing outlives the export); a threshold param overrides."""
    if spec_file is not None:
        try:
            data = json.loads(spec_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"cannot read ensemble spec {spec_file}: {exc}") from exc
        spec = EnsembleSpec.from_dict(data, str(spec_file))
    else:
        spec = EnsembleSpec.from_dict(_run_artifact(model, workdir), f"runs:/{model.run_id}/{RUN_ARTIFACT}")
    if "decision_threshold" in model.run_params:
        try:
            spec.postprocess["threshold"] = float(model.run_params["decision_threshold"])
        except ValueError as exc:
            raise UsageError("run param decision_threshold is not a number") from exc
    return spec


def _run_artifact(model: RegistryModel, workdir: Path | None) -> Any:
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
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
            hint="log it with mlflow.log_dict(spec, 'serving/ensemble.json') or pass --ensemble-spec FILE",
        ) from exc


def _step_files(script: str, spec: dict[str, Any]) -> dict[str, bytes]:
    package = resources.files("builder.ensemble_models")
    return {
        "model.py": package.joinpath(script).read_bytes(),
        "transforms.py": package.joinpath("transforms.py").read_bytes(),
        # Per version (the config is per model): see builder/repository.py on crash consistency.
        "spec.json": (json.dumps(spec, sort_keys=True) + "\n").encode(),
    }


def ensemble_artifacts(
    name: str,
    model_inputs: tuple[TensorSpec, ...],
    model_outputs: tuple[TensorSpec, ...],
    spec: EnsembleSpec,
    options: ServingOptions,
    parameters: dict[str, str] | None = None,
    version: int = -1,
) -> list[ModelArtifact]:
    """The preprocess, postprocess and ensemble models around the exported model ``name``;
    the ensemble's steps run ``version`` of each (the version this export writes)."""
    if len(model_inputs) != 1 or model_inputs[0].dtype != "float32":
        raise UsageError(
            "--ensemble needs a model with one float32 input (all columns numeric)",
            hint="a model with string columns carries its preprocessing in its graph: "
            "export it without --ensemble",
        )
    (raw,) = model_inputs
    by_name = {t.name: t for t in model_outputs}
    mbs = options.max_batch_size
    pre_name, post_name, ens_name = f"{name}_preprocess", f"{name}_postprocess", f"{name}_ensemble"
    features = TensorSpec("features", raw.dtype, raw.shape)
    width = raw.shape[1]
    for key in ("impute", "mean", "scale"):
        values = spec.preprocess.get(key)
        if values is not None and len(values) != width:
            raise UsageError(
                f"ensemble spec {spec.source}: preprocess.{key} has {len(values)} values, "
                f"the model takes {width} features"
            )
    spec_json = {"spec": json.dumps(spec.preprocess)}
    artifacts = [
        ModelArtifact(
            name=pre_name,
            config=python_model_config(
                pre_name,
                [raw],
                [features],
                max_batch_size=mbs,
                parameters=spec_json,
                options=options,
            ),
            version_files=_step_files("preprocess.py", spec.preprocess),
        )
    ]
    steps = [
        EnsembleStep(pre_name, {raw.name: raw.name}, {"features": "features"}, version),
        EnsembleStep(
            name,
            {raw.name: "features"},
            {o.name: o.name for o in model_outputs if o.name != "label"},
            version,
        ),
    ]
    outputs = [o for o in model_outputs if o.name != "label"]
    if "probabilities" in by_name:
        probs = by_name["probabilities"]
        score = TensorSpec("score", "float32", (-1, 1))
        label = TensorSpec("label", "int64", (-1, 1))
        artifacts.append(
            ModelArtifact(
                name=post_name,
                config=python_model_config(
                    post_name,
                    [probs],
                    [score, label],
                    max_batch_size=mbs,
                    parameters={"spec": json.dumps(spec.postprocess)},
                    options=options,
                ),
                version_files=_step_files("postprocess.py", spec.postprocess),
            )
        )
        steps.append(
            EnsembleStep(
                post_name,
                {"probabilities": "probabilities"},
                {"score": "score", "label": "label"},
                version,
            )
        )
        outputs += [score, label]
    artifacts.append(
        ModelArtifact(
            name=ens_name,
            config=ensemble_config(
                ens_name, [raw], outputs, steps, max_batch_size=mbs, options=options, parameters=parameters
            ),
            version_files={},
        )
    )
    return artifacts
