"""``builder export``: registry model -> ONNX -> parity -> Triton model repository.

The export is one context (``ExportContext``), built up by a short list of small steps
(builder/steps.py), each reporting a status line: resolve the registry model, load it and say
what it is, build the parity rows, convert, check parity, compute the drift reference,
describe the artifacts, (build a plan), write. Nothing touches the repository until every
step before the write has passed, so any refusal leaves it unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.config import ServingOptions
from builder.convert import DEFAULT_OPSET
from builder.errors import UsageError
from builder.names import validate_model_name
from builder.parity import DEFAULT_ATOL, DEFAULT_RTOL, ParityReport
from builder.repository import WriteResult
from builder.tensorrt.options import PlanOptions
from builder.uri import parse_model_uri

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


def export_model(request: ExportRequest, progress: Progress = lambda _: None) -> ExportResult:
    """Run the export; raises a BuilderError subclass on any refusal, with nothing written."""
    from builder import steps

    uri = parse_model_uri(request.model_uri)
    if request.name is None and not uri.is_registry:
        raise UsageError(f"{uri.raw} has no registry name", hint="pass --name for runs:/ URIs")
    name = validate_model_name(request.name or uri.name or "")
    if request.ensemble_spec is not None and not request.ensemble:
        raise UsageError("--ensemble-spec needs --ensemble")
    if request.ensemble_mode != "steps" and not request.ensemble:
        raise UsageError("--ensemble-mode needs --ensemble")
    if request.ensemble_mode not in ("steps", "fused"):
        raise UsageError(f"--ensemble-mode {request.ensemble_mode!r}: use steps or fused")
    unknown = set(request.formats) - set(FORMATS)
    if unknown:
        raise UsageError(
            f"--format {', '.join(sorted(unknown))}: use onnx, tensorrt or all",
            hint="--format is onnx, tensorrt or all",
        )
    preflight = None
    if "tensorrt" in request.formats:
        from builder.tensorrt.plan import preflight as plan_preflight  # fails fast, before any download

        preflight = plan_preflight(request.tensorrt, request.serving)
    with export_workdir() as tmp:
        ctx = steps.ExportContext(request=request, uri=uri, name=name, workdir=tmp, preflight=preflight)
        timer = _Timer(progress)
        for step in steps.pipeline(ctx):
            title = step.title(ctx)
            if title is None:  # a step that times its own parts (the TensorRT plan)
                step.run(ctx, timer.run)
            else:
                timer.run(title, functools.partial(step.run, ctx, timer.run), str)
        return ExportResult(
            name=name,
            version=ctx.version,
            parity=ctx.parity_report,
            written=ctx.written,
            steps=timer.done,
            plan_parity=ctx.plan_parity,
            warnings=list(ctx.warnings),
        )


WORKDIR_PREFIX = "builder-export-"


@contextlib.contextmanager
def export_workdir(parent: Path | None = None) -> Iterator[Path]:
    """The export's scratch folder, ``<tmp>/builder-export-<pid>-*``, removed on the way out.

    A killed export cannot remove its own (SIGKILL runs no cleanup), and its downloads can be
    large, so the folder is stamped with the pid and every export first removes those whose
    process is gone.
    """
    parent = parent or Path(tempfile.gettempdir())
    remove_stale_workdirs(parent)
    tmp = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-", dir=parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_workdirs(parent: Path) -> list[Path]:
    """Remove the scratch folders of exports that no longer run; returns what was removed."""
    removed = []
    for folder in parent.glob(f"{WORKDIR_PREFIX}*"):
        pid = folder.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to clean
        return True
    return True


class _Timer:
    """Reports each step as it starts (the CLI shows these as progress) and times it."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.done: list[StepStatus] = []

    def run(self, title: str, fn: Callable[[], Any], detail: Callable[[Any], str]) -> Any:
        self.progress(title)
        start = time.perf_counter()
        value = fn()
        self.done.append(StepStatus(title, detail(value), time.perf_counter() - start))
        return value
