"""``--format tensorrt``: from the checked ONNX model to a ``tensorrt_plan`` model artifact.

Two entry points, called by ``builder.export``: ``preflight`` before anything is downloaded
(option errors, then the GPU and TensorRT checks, so a machine without a GPU stops at once), and
``plan_artifact`` once the ONNX model has passed its own parity check: build in a subprocess,
compare the engine with ONNX Runtime's outputs on the same rows (parity's, not computed again),
and return the artifact for the same all-or-nothing write as the ONNX model's.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.errors import ConversionError
from builder.parity.compare import ParityReport
from builder.parity.rows import Feeds
from builder.repository.triton_config import ServingOptions
from builder.repository.write import ModelArtifact
from builder.tensorrt import gpu
from builder.tensorrt.build import PlanBuild, build_plan, default_timing_cache
from builder.tensorrt.calibration import CalibrationSet, calibration_set
from builder.tensorrt.config import plan_filename, plan_model_config
from builder.tensorrt.options import TRITON_TENSORRT, PlanOptions
from builder.tensorrt.parity import plan_parity, require_plan_pass
from builder.tensorrt.profiles import BatchProfile, input_shapes
from builder.tensorrt.script import ONNX_NAME, ScriptSpec
from builder.tensors import TensorSpec, graph_tensors

# builder.export's step runner: (title, work, one-line detail of the result) -> result
StepRunner = Callable[[str, Callable[[], Any], Callable[[Any], str]], Any]

# What TensorRT 10 takes at an engine's edge; float64 and strings it does not.
_ENGINE_DTYPES = {"float32", "float16", "int32", "int64", "int8", "uint8", "bool"}
_STANDARD_DOMAINS = {"", "ai.onnx"}


@dataclass(frozen=True)
class Preflight:
    """What was settled before the download: the options, the batch profile, the GPU."""

    options: PlanOptions
    profile: BatchProfile | None
    compute_capability: str


def preflight(options: PlanOptions, serving: ServingOptions) -> Preflight:
    """Refuse bad options (exit 2), then a machine that cannot build (exit 9)."""
    from builder.tensorrt.profiles import batch_profile

    options.check_files()
    profile = batch_profile(serving.max_batch_size, serving.preferred_batch_sizes, options.opt_batch_size)
    gpu.require_tensorrt()
    return Preflight(options, profile, gpu.compute_capability())


def check_engine_input(model: onnx.ModelProto, model_ref: str) -> None:
    """Refuse graphs TensorRT cannot parse, with the reason, before a build is started."""
    foreign = sorted(
        {f"{n.domain}.{n.op_type}" for n in model.graph.node if n.domain not in _STANDARD_DOMAINS}
    )
    if foreign:
        raise ConversionError(
            f"{model_ref}: TensorRT has no kernels for the operators {', '.join(foreign)} "
            "(classic-ML converters emit ONNX-ML operators such as tree ensembles)",
            hint="serve this model with --format onnx (with --gpu-accelerator tensorrt, ONNX Runtime "
            "hands TensorRT the parts it can run)",
        )
    for t in (*graph_tensors(model.graph.input), *graph_tensors(model.graph.output)):
        if t.dtype not in _ENGINE_DTYPES:
            raise ConversionError(
                f"{model_ref}: tensor {t.name!r} is {t.dtype}, which a TensorRT engine cannot take or return",
                hint="cast it to float32 in the model, or use --format onnx",
            )


def check_engine_io(build: PlanBuild, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
    """The engine's tensors must be the ONNX model's, or Triton refuses the config at load."""
    declared = {t.name: t.dtype for t in (*inputs, *outputs)}
    built = {
        e["name"]: e["dtype"] for e in (*build.result.get("inputs", []), *build.result.get("outputs", []))
    }
    if declared != built:
        raise ConversionError(
            f"the engine's tensors {sorted(built.items())} differ from the ONNX model's "
            f"{sorted(declared.items())}",
            hint="TensorRT changed a tensor's type or name; use --format onnx for this model",
        )


@dataclass(frozen=True)
class PlanSource:
    """The checked ONNX model a plan is built from, as the export has it after parity."""

    model_ref: str
    artifact: ModelArtifact  # the ONNX model's: its bytes, config parameters, metadata, identity
    graph: onnx.ModelProto
    feeds: Feeds  # the parity rows, which the engine is run on too
    onnx_outputs: dict[str, np.ndarray]  # ONNX Runtime's outputs on them (parity's, not rerun)
    example: dict[str, np.ndarray] | None  # the input example, INT8's default calibration rows
    serving: ServingOptions


def plan_artifact(
    pre: Preflight, source: PlanSource, name: str, workdir: Path, run: StepRunner
) -> tuple[ModelArtifact, ParityReport]:
    """Build, check and describe the plan ``name``; raises a BuilderError with nothing written."""
    options, model_ref, serving = pre.options, source.model_ref, source.serving
    check_engine_input(source.graph, model_ref)
    inputs, outputs = graph_tensors(source.graph.graph.input), graph_tensors(source.graph.graph.output)
    shapes = input_shapes(pre.profile, inputs)
    calibration = (
        calibration_set(inputs, options.int8_calibration, source.example)
        if options.precision == "int8"
        else None
    )
    cc = pre.compute_capability
    spec = ScriptSpec(
        model=model_ref,
        plan=plan_filename(cc),
        precision=options.precision,
        shapes=shapes,
        workspace_mb=options.workspace_mb,
        timing_cache=options.timing_cache or default_timing_cache(cc),
        calibration=calibration is not None,
    )
    feeds = source.feeds
    build: PlanBuild = run(
        f"build TensorRT plan ({options.precision}, sm{cc.replace('.', '')})",
        lambda: build_plan(
            spec,
            source.artifact.version_files[ONNX_NAME],
            feeds.arrays,
            workdir,
            expected_cc=cc,
            calibration_npz=calibration.to_npz() if calibration else None,
            timeout_s=options.build_timeout_s,
        ),
        lambda b: (
            f"{spec.plan}, TensorRT {b.tensorrt_version}{_version_note(b.tensorrt_version)}, "
            f"{len(b.plan) / 1e6:.1f} MB, {b.result.get('build_seconds', 0):.1f}s build"
        ),
    )
    check_engine_io(build, inputs, outputs)
    parity = run(
        "check TensorRT parity",
        lambda: plan_parity(
            build.outputs, source.onnx_outputs, rows=feeds.rows, source=feeds.source, options=options
        ),
        _parity_line,
    )
    require_plan_pass(parity, model_ref, options.precision)
    config = plan_model_config(
        name,
        inputs,
        outputs,
        serving,
        pre.profile,
        compute_capability=build.compute_capability,
        warmup_files={t.name: t.name for t in inputs} if serving.warmup else None,
    )
    # The plan answers as the ONNX model does: clients read the same serving contract from it.
    for key, value in source.artifact.config.parameters.items():
        config.parameters[key].CopyFrom(value)
    described = _describe(pre, spec, build, parity, calibration)
    onnx_artifact = source.artifact
    metadata = copy.deepcopy(onnx_artifact.metadata)
    metadata["format"] = "tensorrt_plan"
    metadata["tensorrt"] = described
    identity_key = {"onnx": onnx_artifact.identity, **{k: described[k] for k in _IDENTITY_KEYS}}
    artifact = ModelArtifact(
        name=name,
        config=config,
        version_files={spec.plan: build.plan, **build.files},
        model_files=dict(onnx_artifact.model_files),
        metadata=metadata,
        identity=hashlib.sha256(json.dumps(identity_key, sort_keys=True).encode()).hexdigest(),
    )
    return artifact, parity


# Settings that make two plans of the same ONNX model different exports.
_IDENTITY_KEYS = (
    "precision",
    "profile",
    "workspace_mb",
    "compute_capability",
    "tensorrt_version",
    "calibration",
)


def _describe(
    pre: Preflight,
    spec: ScriptSpec,
    build: PlanBuild,
    parity: ParityReport,
    calibration: CalibrationSet | None,
) -> dict[str, Any]:
    result = build.result
    return {
        "plan_file": spec.plan,
        "plan_sha256": hashlib.sha256(build.plan).hexdigest(),
        "precision": spec.precision,
        "flags": result.get("flags"),
        "profile": {
            "batch": pre.profile.to_dict() if pre.profile else None,
            "inputs": {s.name: s.to_dict() for s in spec.shapes},
        },
        "workspace_mb": spec.workspace_mb,
        "compute_capability": build.compute_capability,
        "gpu": result.get("device", {}).get("name"),
        "tensorrt_version": build.tensorrt_version,
        "timing_cache": result.get("timing_cache"),
        "calibration": calibration.to_dict() if calibration else None,
        "build_seconds": result.get("build_seconds"),
        "command": list(build.command),
        "parity": parity.to_dict(),
    }


def _version_note(version: str) -> str:
    if version == TRITON_TENSORRT or version.startswith(f"{TRITON_TENSORRT}."):
        return ""
    return f" (Triton 24.10 loads TensorRT {TRITON_TENSORRT} plans only)"


def _parity_line(report: ParityReport) -> str:
    worst = max((o.max_abs_err for o in report.outputs), default=0.0)
    verdict = "pass" if report.passed else "FAIL"
    return f"{verdict}: {report.rows} rows vs ONNX Runtime, atol {report.atol:g}, max abs err {worst:.2g}"
