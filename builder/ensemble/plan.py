"""What ``--ensemble`` builds, decided once and early, and the model it is built around.

``EnsemblePlan`` is settled right after the run's serving steps are read, before any conversion
work (builder/export/steps.py ``PlanEnsemble``): whether a spec is needed, where it comes from,
whether the generated stages are post-only (a model with typed inputs), steps or fused. A run
that needs a spec and logs none is refused then, not after conversion, parity and the drift
reference. ``WrappedModel`` is the exported model as the ensemble's stages see it.

Vocabulary: an ensemble's members are its *stages* (the generated pre/postprocess, the model,
the run's own *serving steps*); a *step* without qualifier is a step of the export pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from builder.ensemble.spec import EnsembleSpec, load_spec, takes_typed_inputs, typed_spec
from builder.ensemble.user_steps import UserStep
from builder.kinds import ModelKind
from builder.registry.client import RegistryModel
from builder.registry.signature import ModelInputs
from builder.repository.triton_config import ServingOptions
from builder.tensors import TensorSpec, graph_tensors

MODES = ("steps", "fused")  # steps: NAME_pre/postprocess + a Triton ensemble; fused: one graph


@dataclass(frozen=True)
class EnsemblePlan:
    mode: str  # one of MODES
    spec: EnsembleSpec | None  # None: the run's serving steps wrap the model alone
    typed: bool  # the model takes typed inputs: its generated stages are post-only
    serving_steps: tuple[UserStep, ...] = ()  # the run's own (serving/steps/)


def plan_ensemble(
    model: RegistryModel,
    inputs: ModelInputs,
    spec_file: Path | None,
    mode: str,
    serving_steps: tuple[UserStep, ...],
    workdir: Path,
) -> EnsemblePlan:
    """The plan of ``model``'s ensemble; the spec read from ``spec_file`` or the run (downloaded
    into the export's ``workdir``), refused where it is needed and missing."""
    # The run's own steps make the generated ones optional (a run may log only its own); a
    # typed model's post-only stages need no spec (its classes are the model's).
    typed = takes_typed_inputs(inputs.layout, inputs.tensors)
    required = not serving_steps and not typed
    spec = load_spec(model, spec_file, workdir, required=required)
    if spec is None and typed and not serving_steps:
        spec = typed_spec(model)
    return EnsemblePlan(mode, spec, typed, serving_steps)


@dataclass(frozen=True)
class WrappedModel:
    """The exported model an ensemble is built around, and how it is served."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    options: ServingOptions
    kind: ModelKind | None = None  # what the model answers (a typed model's classes)
    layout: str = "matrix"  # the model's input layout (builder/registry/signature.py)
    version: int = -1  # the version this export writes: every stage runs it

    @classmethod
    def of(
        cls,
        name: str,
        graph: onnx.ModelProto,
        options: ServingOptions,
        kind: ModelKind | None = None,
        layout: str = "matrix",
    ) -> WrappedModel:
        """The model ``graph`` under ``name``, its tensors read from the graph."""
        inputs, outputs = graph_tensors(graph.graph.input), graph_tensors(graph.graph.output)
        return cls(name, inputs, outputs, options, kind, layout)
