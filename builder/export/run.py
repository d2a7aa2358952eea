"""``builder export``: registry model -> ONNX -> parity -> Triton model repository.

The export is one context (``ExportContext``, builder/export/context.py), built up by a short list
of small steps (builder/export/steps.py), each reporting a status line: resolve the registry model;
with ``--ensemble``, read the run's serving steps (resolving the registered-model ones) and plan
the ensemble; load the model and say what it is, build the parity rows, convert, check parity,
compute the drift reference, (export the registered-model serving steps), describe the
artifacts, (build a plan), (``--keep-serving``: keep the serving version loaded), write. The
request's options were checked when it was made (``ExportRequest``); this module adds the model
name, the TensorRT preflight, ``--keep-serving``'s early check (something serves) and the
scratch folder. Nothing touches the repository until every step before the write has passed, so any
refusal leaves it unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from builder.errors import BuilderError, UsageError
from builder.export.context import ExportContext, ExportRequest, ExportResult, Progress, StepStatus
from builder.export.keep_serving import serving_now
from builder.export.steps import pipeline
from builder.registry.uri import parse_model_uri
from builder.repository.names import validate_model_name


def export_model(request: ExportRequest, progress: Progress = lambda _: None) -> ExportResult:
    """Run the export; raises a BuilderError subclass on any refusal, with nothing written."""
    uri = parse_model_uri(request.model_uri)
    if request.name is None and not uri.is_registry:
        raise UsageError(f"{uri.raw} has no registry name", hint="pass --name for runs:/ URIs")
    name = validate_model_name(request.name or uri.name or "")
    if request.keep_serving:  # at once, before any download: a challenger needs a champion
        serving_now(request.repo, name)
    preflight = None
    if "tensorrt" in request.formats:
        from builder.tensorrt.plan import preflight as plan_preflight  # fails fast, before any download

        preflight = plan_preflight(request.tensorrt, request.serving)
    with export_workdir() as tmp:
        ctx = ExportContext(request=request, uri=uri, name=name, workdir=tmp, preflight=preflight)
        timer = _Timer(progress)
        for step in pipeline(ctx):
            title = step.title(ctx)
            try:
                if title is None:  # a step that times its own parts (the TensorRT plan)
                    step.run(ctx, timer.run)
                else:
                    timer.run(title, functools.partial(step.run, ctx, timer.run), str)
            except BuilderError as exc:
                raise naming_the_model(exc, ctx) from exc
        return ExportResult(
            name=name,
            version=ctx.version,
            parity=ctx.parity,
            written=ctx.written,
            steps=timer.done,
            plan_parity=ctx.plan_parity,
            warnings=list(ctx.warnings),
        )


def naming_the_model(exc: BuilderError, ctx: ExportContext) -> BuilderError:
    """The refusal with the model's reference at the head of its line (the error contract,
    docs/errors.md), wherever in the pipeline it was raised: converters and helpers below the
    export do not know which model they work on. Before Resolve there is no reference yet; a
    UsageError is about the command line (its flags and files), not the model; a registered-model
    serving step's refusal names that model; an error class with its own constructor is passed
    on as it is."""
    model = getattr(ctx, "model", None)
    if model is None or isinstance(exc, UsageError):
        return exc
    head = exc.message.split("\n", 1)[0]
    if any(ref in head for ref in (model.ref, *(sub.uri.raw for sub in ctx.step_exports.values()))):
        return exc
    if type(exc).__init__ is not BuilderError.__init__:
        return exc
    return type(exc)(f"{model.ref}: {exc.message}", hint=exc.hint)


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
