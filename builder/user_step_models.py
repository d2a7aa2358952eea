"""A user step (``builder/user_steps.py``) as a model of the repository and a node of the
ensemble: a Python-backend model written from the run's files, or a registered model the
builder exported itself."""

from __future__ import annotations

import dataclasses

from builder.config import ServingOptions, python_model_config, step_serving_options
from builder.errors import UsageError
from builder.names import validate_model_name
from builder.repository import ModelArtifact
from builder.tensors import TensorSpec, dtype_from_triton
from builder.user_steps import StepPort, UserStep
from builder.wiring import Node, Port


def step_model_name(model: str, step: UserStep) -> str:
    """A Python step's model folder: ``<model>_<step>``, beside the generated ``_preprocess``."""
    return validate_model_name(f"{model}_{step.name}", what=f"user step {step.name!r}'s model name")


def step_options(step: UserStep, options: ServingOptions) -> ServingOptions:
    """The step's serving options: a generated step's (no queue delay, one instance) with the
    step's config hints on top, its max batch size checked against the ensemble's."""
    hints, ensemble_mbs = step.hints, options.max_batch_size
    mbs = ensemble_mbs if hints.max_batch_size is None else hints.max_batch_size
    if ensemble_mbs == 0 and mbs > 0:
        raise UsageError(
            f"{step.label}: config.max_batch_size {mbs}, but the ensemble does not batch "
            "(--max-batch-size 0)",
            hint="leave max_batch_size out of the step's config, or export with a max batch size",
        )
    if ensemble_mbs > 0 and mbs < ensemble_mbs:
        raise UsageError(
            f"{step.label}: config.max_batch_size {mbs} is below the ensemble's {ensemble_mbs}",
            hint=f"raise it, or export with --max-batch-size {mbs}" if mbs else "raise it",
        )
    return dataclasses.replace(
        step_serving_options(options),
        max_batch_size=mbs,
        instances=hints.instance_count,
        max_queue_delay_us=hints.max_queue_delay_us,
    )


def _spec(port: StepPort, batched: bool) -> TensorSpec:
    assert port.data_type is not None and port.dims is not None  # parse_step checks Python steps
    dims = tuple(port.dims)
    return TensorSpec(port.name, dtype_from_triton(port.data_type), (-1, *dims) if batched else dims)


def user_step_artifact(
    model: str, step: UserStep, options: ServingOptions, version: int
) -> tuple[ModelArtifact, Node]:
    """The Python step's model (config, and ``model.py`` with the folder's other files in
    version ``version``) and its node in the ensemble."""
    if step.model is not None:
        raise UsageError(f"{step.label}: registered-model steps are not exported by this builder yet")
    # (builder.steps.ServingSteps refuses them before any conversion work; this guards callers.)
    name = step_model_name(model, step)
    served = step_options(step, options)
    batched = served.max_batch_size > 0
    inputs = [_spec(p, batched) for p in step.inputs]
    outputs = [_spec(p, batched) for p in step.outputs]
    config = python_model_config(
        name,
        inputs,
        outputs,
        max_batch_size=served.max_batch_size,
        parameters=step.hints.parameters,
        options=served,
    )
    artifact = ModelArtifact(name=name, config=config, version_files=dict(step.files))
    node = Node(
        name,
        step.label,
        step.position,
        tuple(Port(p.name, p.tensor, s, p.ensemble_input) for p, s in zip(step.inputs, inputs, strict=True)),
        tuple(Port(p.name, p.tensor, s) for p, s in zip(step.outputs, outputs, strict=True)),
        user=True,
        version=version,
    )
    return artifact, node
