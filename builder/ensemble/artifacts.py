"""What ``--ensemble`` writes beside the exported model, given the model's artifact and the
plan decided before conversion (builder/ensemble/plan.py): the steps ensemble's stages or the
fused model, each recording the export it came from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import onnx

from builder import __version__
from builder.ensemble.fused import fused_artifact
from builder.ensemble.plan import EnsemblePlan, WrappedModel
from builder.ensemble.steps_mode import ensemble_artifacts
from builder.ensemble.user_step_models import StepModel
from builder.repository.write import ModelArtifact


def ensemble_models(
    main: ModelArtifact,
    graph: onnx.ModelProto,
    model: WrappedModel,
    plan: EnsemblePlan,
    *,
    parameters: dict[str, str],
    drift: dict[str, Any],
    step_models: Mapping[str, StepModel],
) -> list[ModelArtifact]:
    """The ensemble's models around ``main`` (the exported model's artifact, of ``graph``):
    ``parameters`` are its config's (the model's serving contract, its own drift reference),
    ``drift`` its metadata's ``drift`` record; ``step_models``: the registered-model serving
    steps, exported."""
    spec = plan.spec
    if plan.mode == "fused":
        assert spec is not None  # fused takes no serving steps (PlanEnsemble), so a spec is required
        extra = [
            fused_artifact(
                model,
                graph,
                spec,
                parameters=parameters,
                warmup_files=main.model_files,
                identity=main.identity,
            )
        ]
    else:
        extra = ensemble_artifacts(
            model, spec, parameters=parameters, user_steps=plan.serving_steps, step_models=step_models
        )
    source = main.metadata["source"]
    for art in extra:
        # A registered-model step keeps its own source (the model its ONNX graph was
        # converted from, whose parity it records); ``export`` names the export that wrote
        # it beside the ensemble, which `builder validate`'s one-export check reads.
        own = art.metadata.get("source")
        art.metadata.update(
            {
                "source": source,
                "ensemble_spec": spec.source if spec is not None else None,
                "ensemble_mode": plan.mode,
                "builder_version": __version__,
                **({"drift": drift} if art.name == f"{model.name}_ensemble" else {}),
            }
        )
        if own is not None:
            art.metadata["source"], art.metadata["export"] = own, source
    if plan.serving_steps:
        extra[-1].metadata["user_steps"] = [
            {
                "name": s.name,
                "position": s.position,
                "source": s.source,
                **({"model": s.model.raw} if s.model is not None else {}),
            }
            for s in plan.serving_steps
        ]
    return extra
