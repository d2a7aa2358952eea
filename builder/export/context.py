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
from builder.ensemble.user_step_models import StepModel
from builder.ensemble.user_steps import UserStep
from builder.export.drift_reference import Drift
from builder.kinds import ModelKind
from builder.parity.compare import DEFAULT_ATOL, DEFAULT_RTOL, ParityReport
from builder.parity.rows import Feeds
from builder.registry.client import RegistryModel
from builder.registry.signature import ModelInputs
from builder.registry.uri import ModelURI
from builder.repository.triton_config import ServingOptions
from builder.repository.write import ModelArtifact, WriteResult
from builder.tensorrt.options import PlanOptions

if TYPE_CHECKING:
    from builder.tensorrt.plan import Preflight


FORMATS = ("onnx", "tensorrt")


@dataclass(frozen=True)
class ExportRequest:
    """Everything ``builder export`` was asked, validated once by the CLI."""

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
    ensemble_mode: str = "steps"  # steps: NAME_pre/postprocess + a Triton ensemble; fused: one graph
    reference: Path | None = None  # drift reference rows (Parquet); None: the run's serving/reference.parquet
    force: bool = False
    formats: tuple[str, ...] = ("onnx",)
    tensorrt: PlanOptions = field(default_factory=PlanOptions)  # used with "tensorrt" in formats


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
    request: ExportRequest
    uri: ModelURI
    name: str
    workdir: Path
    preflight: Preflight | None = None
    # filled in by the steps, in this order
    model: RegistryModel | None = None
    converter: FlavorConverter | None = None
    inputs: ModelInputs | None = None
    native: Any = None
    kind: ModelKind | None = None
    example: dict[str, np.ndarray] | None = None
    feeds: Feeds | None = None
    onnx_model: onnx.ModelProto | None = None
    parity: ParityReport | None = None
    drift: Drift | None = None
    user_steps: list[UserStep] = field(default_factory=list)  # the run's serving/steps/
    step_exports: dict[str, ExportContext] = field(default_factory=dict)  # registered-model steps
    step_models: dict[str, StepModel] = field(default_factory=dict)  # ... exported, by step name
    artifacts: list[ModelArtifact] = field(default_factory=list)
    plan_parity: ParityReport | None = None
    written: list[WriteResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # printed as `warning:` lines; the export goes on

    # Typed views of what an earlier step must have set (a step run out of order is a bug).
    @property
    def registry_model(self) -> RegistryModel:
        return _set(self.model, "model")

    @property
    def served(self) -> ModelInputs:
        return _set(self.inputs, "inputs")

    @property
    def flavor(self) -> FlavorConverter:
        return _set(self.converter, "converter")

    @property
    def parity_feeds(self) -> Feeds:
        return _set(self.feeds, "feeds")

    @property
    def graph(self) -> onnx.ModelProto:
        return _set(self.onnx_model, "onnx_model")

    @property
    def parity_report(self) -> ParityReport:
        return _set(self.parity, "parity")

    @property
    def model_kind(self) -> ModelKind:
        return _set(self.kind, "kind")

    @property
    def version(self) -> int:
        return self.registry_model.version or 1


def _set(value: Any, what: str) -> Any:
    if value is None:
        raise RuntimeError(f"export step ran before {what} was set")
    return value
