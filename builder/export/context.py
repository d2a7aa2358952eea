"""What an export is asked (``ExportRequest``), the state its steps fill in (``ExportContext``,
after Model Navigator's execution context) and what it answers (``ExportResult``).

These types sit below the pipeline (export/steps.py), the description of the artifacts
(export/describe.py) and the run (export/run.py), so that each of those imports them and none
imports another to reach them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from builder.convert import DEFAULT_OPSET
from builder.convert.base import FlavorConverter
from builder.ensemble.plan import MODES, EnsemblePlan
from builder.ensemble.user_step_models import StepModel
from builder.ensemble.user_steps import UserStep
from builder.errors import UsageError
from builder.explain.build import Explainer
from builder.export.drift_reference import Drift
from builder.kinds import ModelKind
from builder.parity.compare import DEFAULT_ATOL, DEFAULT_RTOL, GraphSession, ParityReport
from builder.parity.rows import Feeds
from builder.registry.client import RegistryModel
from builder.registry.signature import ModelInputs
from builder.registry.uri import ModelURI
from builder.repository.triton_config import ServingOptions, VersionPolicy
from builder.repository.write import ModelArtifact, WriteResult
from builder.tensorrt.options import PlanOptions

if TYPE_CHECKING:
    from builder.tensorrt.plan import Preflight


FORMATS = ("onnx", "tensorrt")


@dataclass(frozen=True)
class ExportRequest:
    """Everything ``builder export`` was asked; the options are checked against each other here,
    once, whoever builds the request (the CLI or a script). Files are the CLI's to check (it
    refuses a missing or unreadable one before anything is loaded)."""

    model_uri: str
    repo: Path
    name: str | None = None
    serving: ServingOptions = field(default_factory=ServingOptions)
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    parity_rows: int = 64
    opset: int = DEFAULT_OPSET
    ensemble: bool = False
    ensemble_spec: Path | None = None
    ensemble_mode: str = "steps"  # steps or fused (builder/ensemble/plan.py MODES)
    reference: Path | None = None  # drift reference rows (Parquet); None: the run's serving/reference.parquet
    force: bool = False
    formats: tuple[str, ...] = ("onnx",)
    tensorrt: PlanOptions = field(default_factory=PlanOptions)  # used with "tensorrt" in formats
    # Load this version (a challenger) beside the one serving now (the champion, recorded in the
    # config for the gateway, which names its version), until a plain export promotes it
    # (export/keep_serving.py).
    keep_serving: bool = False
    # Write <name>_explain, the exact explainer (docs/explain.md); None: as the run's tag says.
    explain: bool | None = None

    def __post_init__(self) -> None:
        if self.ensemble_spec is not None and not self.ensemble:
            raise UsageError("--ensemble-spec needs --ensemble")
        if self.ensemble_mode != "steps" and not self.ensemble:
            raise UsageError("--ensemble-mode needs --ensemble")
        if self.ensemble_mode not in MODES:
            raise UsageError(f"--ensemble-mode {self.ensemble_mode!r}: use steps or fused")
        unknown = set(self.formats) - set(FORMATS)
        if unknown:
            raise UsageError(
                f"--format {', '.join(sorted(unknown))}: use onnx, tensorrt or all",
                hint="--format is onnx, tensorrt or all",
            )
        if self.keep_serving and self.ensemble:
            raise UsageError(
                "--keep-serving cannot be used with --ensemble: an ensemble pins one version of "
                "each step, so two versions of it cannot serve side by side",
                hint="export the challenger without --ensemble, or under its own name (--name) "
                "and shadow that model instead",
            )
        if self.keep_serving and self.explain:
            raise UsageError(
                "--keep-serving cannot be used with --explain: the explainer of the challenger "
                "would replace the champion's",
                hint="export the challenger without --explain; its promotion (a plain export) "
                "can write the explainer",
            )
        if self.keep_serving and self.serving.version_policy != VersionPolicy():
            raise UsageError(
                "--keep-serving sets the version policy itself (the serving version and this one)",
                hint="leave out --version-policy with --keep-serving",
            )


@dataclass(frozen=True)
class StepStatus:
    name: str
    detail: str
    seconds: float


@dataclass
class ExportResult:
    name: str
    version: int
    parity: ParityReport
    written: list[WriteResult]
    steps: list[StepStatus]
    plan_parity: ParityReport | None = None  # TensorRT engine vs ONNX Runtime, with a plan
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "version": self.version,
            "parity": self.parity.to_dict(),
            **({"tensorrt_parity": self.plan_parity.to_dict()} if self.plan_parity else {}),
            "models": [
                {
                    "name": w.name,
                    "version": w.version,
                    "status": w.status,
                    "path": str(w.path),
                    "files": list(w.files),
                }
                for w in self.written
            ],
            "warnings": list(self.warnings),
            "steps": [
                {"step": s.name, "detail": s.detail, "seconds": round(s.seconds, 3)} for s in self.steps
            ],
        }


Progress = Callable[[str], Any]


@dataclass
class ExportContext:
    """One export's state: what it was asked, then what its steps found, each datum under one
    name. The fields without a default are set by the step named beside them, in pipeline order
    (builder/export/steps.py); reading one before its step ran raises AttributeError, as a step
    run out of order is a bug. (Left out of the repr: unset, they would break it; set, most are
    large.)

    Vocabulary: a *step* is a step of this pipeline; the members of an ensemble are its
    *stages*, of which the run's own (``serving/steps/``) are its *serving steps*."""

    request: ExportRequest
    uri: ModelURI
    name: str
    workdir: Path
    preflight: Preflight | None = None  # None: no --format tensorrt
    # set by Resolve
    model: RegistryModel = field(init=False, repr=False)
    converter: FlavorConverter = field(init=False, repr=False)
    inputs: ModelInputs = field(init=False, repr=False)  # what is served (the converter decides)
    # --ensemble: ServingSteps, StepModels, PlanEnsemble
    serving_steps: tuple[UserStep, ...] = ()  # the run's serving/steps/
    step_exports: dict[str, ExportContext] = field(default_factory=dict)  # registered-model serving steps
    step_models: dict[str, StepModel] = field(default_factory=dict)  # ... exported, by serving step name
    ensemble: EnsemblePlan | None = None  # None: no --ensemble
    # set by Load
    native: Any = field(init=False, repr=False)
    kind: ModelKind = field(init=False, repr=False)
    example: dict[str, np.ndarray] | None = field(init=False, repr=False)  # None: no usable input example
    # set by ParityRows, Convert, Parity
    feeds: Feeds = field(init=False, repr=False)
    graph: onnx.ModelProto = field(init=False, repr=False)  # the final ONNX graph
    session: GraphSession = field(init=False, repr=False)  # its one onnxruntime session
    parity: ParityReport = field(init=False, repr=False)
    onnx_outputs: dict[str, np.ndarray] = field(init=False, repr=False)  # the session's outputs on the feeds
    # set by Reference (a serving step's export: by _step_export), Explain, Describe, Plan, Write
    drift: Drift = field(init=False, repr=False)
    explainer: Explainer | None = None  # set by Explain: None unless asked (--explain, the run's tag)
    artifacts: list[ModelArtifact] = field(default_factory=list)
    plan_parity: ParityReport | None = None  # None: no plan
    written: list[WriteResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # printed as `warning:` lines; the export goes on

    @property
    def version(self) -> int:
        return self.model.version or 1
