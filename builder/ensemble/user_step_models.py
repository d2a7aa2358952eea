"""A user step (``builder/ensemble/user_steps.py``) as a model of the repository and a node of the
ensemble: a Python-backend model written from the run's files, or a registered model the
builder exported itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from builder.ensemble.user_steps import StepPort, UserStep
from builder.ensemble.wiring import Node, Port, describe, dims_agree
from builder.errors import UsageError
from builder.repository.names import validate_model_name
from builder.repository.triton_config import ServingOptions, python_model_config, step_serving_options
from builder.repository.write import ModelArtifact
from builder.tensors import TensorSpec, dtype_from_triton

_HINT = "fix the step's step.json (docs/user-steps.md): a registered-model step names its model's tensors"


@dataclass(frozen=True)
class StepModel:
    """A registered-model step exported through the normal path (its own conversion and
    parity): its ONNX model's artifact, named ``<model>_<step>``, and its graph's tensors."""

    artifact: ModelArtifact
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


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
    model: str,
    step: UserStep,
    options: ServingOptions,
    version: int,
    exported: StepModel | None = None,
) -> tuple[ModelArtifact, Node]:
    """The step's model and its node in the ensemble: a Python step's config, and
    ``model.py`` with the folder's other files in version ``version``; a registered-model
    step's ``exported`` model (builder.steps.StepModels), its tensors its graph's."""
    if step.model is not None:
        if exported is None:
            raise UsageError(f"{step.label}: {step.model.raw} was not exported with this ensemble")
        return exported.artifact, registered_step_node(step, exported, options, version)
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


def registered_step_node(step: UserStep, exported: StepModel, options: ServingOptions, version: int) -> Node:
    """The node of a registered-model step: each port typed by the exported graph's tensor of
    its name, a ``data_type``/``dims`` step.json gives checked against it, and every graph input
    mapped (Triton runs no step with an input left unfed)."""
    assert step.model is not None
    uri, batched = step.model.raw, step_options(step, options).max_batch_size > 0
    inputs = _typed_ports(step, "input", step.inputs, exported.inputs, batched)
    unmapped = sorted({t.name for t in exported.inputs} - {p.name for p in step.inputs})
    if unmapped:
        raise UsageError(
            f"{step.label}: {uri} takes input(s) {unmapped} that step.json does not map",
            hint=f'add {{"name": "{unmapped[0]}", "from": "<ensemble tensor>"}} to the step\'s "inputs"',
        )
    outputs = _typed_ports(step, "output", step.outputs, exported.outputs, batched)
    name = exported.artifact.name
    return Node(name, step.label, step.position, inputs, outputs, user=True, version=version)


def _typed_ports(
    step: UserStep, kind: str, ports: Sequence[StepPort], tensors: Sequence[TensorSpec], batched: bool
) -> tuple[Port, ...]:
    assert step.model is not None
    by_name, typed = {t.name: t for t in tensors}, []
    for port in ports:
        real = by_name.get(port.name)
        where = f"{step.label}: {kind} {port.name!r}"
        if real is None:
            raise UsageError(
                f"{where} is not an {kind} of {step.model.raw} ({', '.join(sorted(by_name))})", hint=_HINT
            )
        declared_dims = real.shape[1:] if batched and real.batched else real.shape
        wrong_type = port.data_type is not None and dtype_from_triton(port.data_type) != real.dtype
        wrong_dims = port.dims is not None and not dims_agree(tuple(port.dims), tuple(declared_dims))
        if wrong_type or wrong_dims:
            dtype = port.data_type or describe(real, batched).split()[0]
            said = f"{dtype} {list(port.dims or declared_dims)}"
            raise UsageError(
                f"{where} is declared {said}, but {step.model.raw}'s exported graph has "
                f"{describe(real, batched)}",
                hint="leave data_type/dims out (a registered-model step's come from its graph), or fix them",
            )
        typed.append(Port(port.name, port.tensor, real, port.ensemble_input))
    return tuple(typed)
