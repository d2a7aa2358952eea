"""Helpers of the tests in this folder."""

from __future__ import annotations

from builder.ensemble.fused import fused_artifact
from builder.ensemble.plan import WrappedModel
from builder.ensemble.spec import EnsembleSpec
from builder.ensemble.steps_mode import ensemble_artifacts
from builder.repository.triton_config import ServingOptions, VersionPolicy, onnx_model_config
from builder.repository.write import (
    ModelArtifact,
)
from builder.tensors import graph_tensors
from tests.builder.helpers import CAP, CLIP, step, tiny_classifier


def export_artifacts(version: int, layout: str = "steps", policy: str = "latest:1") -> list[ModelArtifact]:
    """Registry version ``version`` of "tiny" as ``builder export`` describes it in ``layout``.
    Every config names its export in ``test.export`` (as the real ones carry the threshold and
    drift reference), so a version served with another export's config is seen."""
    options = ServingOptions(version_policy=VersionPolicy.parse(policy))
    model = tiny_classifier()
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    source = {"registered_name": "tiny", "version": version, "run_id": f"run-{version}"}
    params = {"test.export": str(version), "serving.decision_threshold": str(THRESHOLDS[version])}
    warmup = {"warmup/input": bytes([version]) * 12}
    main = ModelArtifact(
        name="tiny",
        config=onnx_model_config("tiny", inputs, outputs, options, {"input": "input"}, params),
        version_files={"model.onnx": model.SerializeToString()},
        model_files=warmup,
        metadata={"source": source},
        identity=f"export-{version}",
    )
    spec = EnsembleSpec.from_dict(
        {
            "preprocess": {"mean": [0, 0, 0], "scale": [1, 2, 4]},
            "postprocess": {"threshold": THRESHOLDS[version]},
        },
        "test",
    )
    if layout == "bare":
        return [main]
    if layout == "fused":
        wrapped = WrappedModel.of("tiny", model, options)
        extra = [
            fused_artifact(
                wrapped, model, spec, parameters=params, warmup_files=warmup, identity=main.identity
            )
        ]
    else:
        user = [step("clip", CLIP), step("cap", CAP)] if layout == "user_steps" else []
        wrapped = WrappedModel("tiny", inputs, outputs, options, version=version)
        extra = ensemble_artifacts(wrapped, spec, parameters=params, user_steps=user)
    for art in extra:
        art.metadata["source"] = source
    return [main, *extra]


THRESHOLDS = {1: 0.3, 2: 0.7}  # what a user notices: the decision threshold of each export
