"""``builder export``: registry model -> ONNX -> parity -> Triton model repository.

The export is a short list of small steps, each reporting a status line. Nothing touches the
repository until every step before the write has passed, so any refusal leaves it unchanged.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from builder import __version__
from builder.config import ServingOptions, onnx_model_config
from builder.convert import DEFAULT_OPSET, converter_for
from builder.convert.base import check_model, graph_tensors, normalize_outputs
from builder.errors import ConversionError, UsageError
from builder.names import validate_model_name
from builder.parity import DEFAULT_ATOL, DEFAULT_RTOL, ParityReport, compare, require_pass, run_onnx
from builder.registry import RegistryModel, fetch_model, tracking_uri
from builder.repository import ModelArtifact, WriteResult, write_models
from builder.signature import ModelInputs, inputs_from_signature
from builder.tensorrt.options import PlanOptions
from builder.uri import parse_model_uri

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
    force: bool = False
    formats: tuple[str, ...] = ("onnx",)
    tensorrt: PlanOptions = field(default_factory=PlanOptions)  # used with "tensorrt" in formats


@dataclass
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
            "steps": [
                {"step": s.name, "detail": s.detail, "seconds": round(s.seconds, 3)} for s in self.steps
            ],
        }


Progress = Callable[[str], Any]


class _Steps:
    """Times each step and reports it as it starts (the CLI shows these as progress)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.done: list[StepStatus] = []

    def run(self, name: str, fn: Callable[[], Any], detail: Callable[[Any], str]) -> Any:
        self.progress(name)
        start = time.perf_counter()
        value = fn()
        self.done.append(StepStatus(name, detail(value), time.perf_counter() - start))
        return value


def export_model(request: ExportRequest, progress: Progress = lambda _: None) -> ExportResult:
    """Run the export; raises a BuilderError subclass on any refusal, with nothing written."""
    uri = parse_model_uri(request.model_uri)
    if request.name is None and not uri.is_registry:
        raise UsageError(f"{uri.raw} has no registry name", hint="pass --name for runs:/ URIs")
    name = validate_model_name(request.name or uri.name or "")
    if request.ensemble_spec is not None and not request.ensemble:
        raise UsageError("--ensemble-spec needs --ensemble")
    unknown = set(request.formats) - set(FORMATS)
    if unknown:
        raise UsageError(
            f"--format {', '.join(sorted(unknown))}: use onnx, tensorrt or all",
            hint="--format is onnx, tensorrt or all",
        )
    plan = None
    if "tensorrt" in request.formats:
        from builder.tensorrt.plan import preflight  # fails fast, before any download

        plan = preflight(request.tensorrt, request.serving)
    steps = _Steps(progress)
    with tempfile.TemporaryDirectory(prefix="builder-export-") as tmp:
        model = steps.run(
            f"resolve {uri.raw} in {tracking_uri()}",
            lambda: fetch_model(uri, Path(tmp)),
            lambda m: f"{m.ref} ({m.flavor}, run {m.run_id[:8]})",
        )
        version = model.version or 1
        inputs = inputs_from_signature(model.mlmodel.signature, model_ref=model.ref)
        converter = converter_for(model.flavor, output_names=_signature_output_names(model))
        native = steps.run("load native model", lambda: _load(converter, model), lambda _: model.flavor)
        opset = request.opset
        onnx_model = steps.run(
            "convert to ONNX",
            lambda: _convert(converter, native, inputs, opset, model),
            lambda m: f"opset {_opset(m)}, {len(m.graph.node)} nodes",
        )
        feeds, source, example_hash = _parity_rows(model, inputs, request.parity_rows)
        parity = steps.run(
            "check parity",
            lambda: compare(
                run_onnx(onnx_model, feeds),
                converter.predict(native, feeds, inputs),
                rows=len(next(iter(feeds.values()))),
                source=source,
                atol=request.atol,
                rtol=request.rtol,
            ),
            lambda r: _parity_line(r),
        )
        require_pass(parity, model.ref)
        artifacts = _artifacts(request, name, model, inputs, onnx_model, feeds, parity, example_hash)
        plan_parity = None
        if plan is not None:
            artifacts, plan_parity = _with_plan(
                plan, request, name, model, inputs, onnx_model, feeds, source, artifacts, steps, Path(tmp)
            )
        written = steps.run(
            f"write {request.repo}",
            lambda: write_models(request.repo, version, artifacts, force=request.force),
            lambda ws: ", ".join(f"{w.name}/{w.version} {w.status}" for w in ws),
        )
    return ExportResult(
        name=name, version=version, parity=parity, written=written, steps=steps.done, plan_parity=plan_parity
    )


def _with_plan(
    pre: Preflight,
    request: ExportRequest,
    name: str,
    model: RegistryModel,
    inputs: ModelInputs,
    onnx_model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    source: str,
    artifacts: list[ModelArtifact],
    steps: _Steps,
    tmp: Path,
) -> tuple[list[ModelArtifact], ParityReport]:
    """``--format tensorrt``: NAME becomes the plan; ``all``: NAME stays ONNX, NAME_trt is the plan."""
    from builder.tensorrt.plan import plan_artifact

    onnx_artifact, rest = artifacts[0], artifacts[1:]
    both = "onnx" in request.formats
    plan, plan_parity = plan_artifact(
        pre,
        name=validate_model_name(f"{name}_trt") if both else name,
        model_ref=model.ref,
        onnx_artifact=onnx_artifact,
        onnx_model=onnx_model,
        feeds=feeds,
        source=source,
        example=_input_example(model, inputs),
        serving=request.serving,
        workdir=tmp / "tensorrt",
        run=steps.run,
    )
    return [*([onnx_artifact] if both else []), plan, *rest], plan_parity


def _signature_output_names(model: RegistryModel) -> list[str] | None:
    sig = model.mlmodel.signature
    if sig is None or sig.outputs is None:
        return None
    names = [getattr(s, "name", None) for s in sig.outputs.inputs]
    return [str(n) for n in names] if names and all(names) else None


def _load(converter: Any, model: RegistryModel) -> Any:
    try:
        return converter.load(model.local_path)
    except ConversionError:
        raise
    except Exception as exc:  # a corrupted artifact surfaces as whatever its loader raises
        raise ConversionError(
            f"{model.ref}: the {model.flavor} model artifact cannot be loaded: "
            f"{type(exc).__name__}: {str(exc).strip()[:200]}",
            hint="the artifact may be corrupted or need a library version this environment lacks",
        ) from exc


def _convert(
    converter: Any, native: Any, inputs: ModelInputs, opset: int, model: RegistryModel
) -> onnx.ModelProto:
    onnx_model = converter.to_onnx(native, inputs, opset)
    onnx_model = check_model(onnx_model, model.ref)
    expected = {t.name for t in inputs.tensors}
    actual = {t.name for t in graph_tensors(onnx_model.graph.input)}
    if expected != actual:
        raise ConversionError(
            f"{model.ref}: ONNX inputs {sorted(actual)} do not match the signature's {sorted(expected)}"
        )
    probe = {t.name: t.sample(3, np.random.default_rng(1)) for t in inputs.tensors}
    return check_model(normalize_outputs(onnx_model, probe), model.ref)


def _opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _parity_rows(
    model: RegistryModel, inputs: ModelInputs, generated: int
) -> tuple[dict[str, np.ndarray], str, str | None]:
    """Input example rows (as the served tensors), plus rows generated from the signature."""
    rng = np.random.default_rng(0)
    example = _input_example(model, inputs)
    example_hash = None
    parts: list[dict[str, np.ndarray]] = []
    if example is not None:
        parts.append(example)
        h = hashlib.sha256()
        for key in sorted(example):
            h.update(key.encode() + np.ascontiguousarray(example[key]).tobytes())
        example_hash = h.hexdigest()
    if generated > 0 or not parts:
        parts.append({t.name: t.sample(max(generated, 8), rng) for t in inputs.tensors})
    feeds = {t.name: np.concatenate([p[t.name] for p in parts]) for t in inputs.tensors}
    source = "+".join(
        (["input_example"] if example is not None else [])
        + (["generated"] if len(parts) > (example is not None) else [])
    )
    return feeds, source, example_hash


def _input_example(model: RegistryModel, inputs: ModelInputs) -> dict[str, np.ndarray] | None:
    try:
        example = model.mlmodel.load_input_example(str(model.local_path))
    except Exception:  # an unreadable example is not fatal: parity falls back to generated rows
        return None
    if example is None:
        return None
    if inputs.tabular:
        import pandas as pd

        frame = example if isinstance(example, pd.DataFrame) else pd.DataFrame(example)
        missing = [c for c in inputs.feature_names or () if c not in frame.columns]
        if missing:
            return None
        (tensor,) = inputs.tensors
        return {tensor.name: frame[list(inputs.feature_names or ())].to_numpy(dtype=np.float32)}
    if isinstance(example, dict):
        return {
            t.name: np.asarray(example[t.name], dtype=t.dtype) for t in inputs.tensors if t.name in example
        } or None
    if len(inputs.tensors) == 1:
        (tensor,) = inputs.tensors
        return {tensor.name: np.asarray(example, dtype=tensor.dtype)}
    return None


def serving_parameters(model: RegistryModel, inputs: ModelInputs) -> dict[str, str]:
    """Config parameters a client (the gateway) builds requests from: the input's column order
    and the run's ``feast.*`` tags (feature service, entity keys, request-time fields)."""
    params = {k: v for k, v in sorted(model.run_tags.items()) if k.startswith("feast.")}
    if inputs.feature_names:
        params["serving.feature_names"] = json.dumps(list(inputs.feature_names))
    return params


def _identity(request: ExportRequest, model: RegistryModel) -> str:
    """Same registry version, run, builder and conversion settings = the same export."""
    key = {
        "registered_name": model.registered_name,
        "version": model.version,
        "run_id": model.run_id,
        "uri": model.uri.raw if model.version is None else None,
        "builder_version": __version__,
        "opset": request.opset,
        # The ONNX model is the same whatever is built beside it (a plan has its own identity),
        # and this keeps the identities of ONNX-only exports what they always were.
        "formats": ["onnx"],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _parity_line(report: ParityReport) -> str:
    worst = max((o.max_abs_err for o in report.outputs), default=0.0)
    verdict = "pass" if report.passed else "FAIL"
    return f"{verdict}: {report.rows} rows ({report.source}), max abs err {worst:.2g}"


def _artifacts(
    request: ExportRequest,
    name: str,
    model: RegistryModel,
    inputs: ModelInputs,
    onnx_model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    parity: ParityReport,
    example_hash: str | None,
) -> list[ModelArtifact]:
    outputs = graph_tensors(onnx_model.graph.output)
    options = request.serving
    if options.max_batch_size > 0 and not all(t.batched for t in (*inputs.tensors, *outputs)):
        raise UsageError(
            f"{model.ref} has tensors without a variable batch dimension; export with --max-batch-size 0"
        )
    # Warm-up sends the first parity row (the input example's, when there is one) as raw bytes.
    warmup = {f"warmup/{t.name}": np.ascontiguousarray(feeds[t.name][:1]).tobytes() for t in inputs.tensors}
    client_params = serving_parameters(model, inputs)
    config = onnx_model_config(
        name,
        inputs.tensors,
        outputs,
        options,
        warmup_files={t.name: t.name for t in inputs.tensors} if options.warmup else None,
        parameters=client_params,
    )
    onnx_bytes = onnx_model.SerializeToString()
    identity = _identity(request, model)
    metadata = {
        "builder_version": __version__,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": {
            "uri": model.uri.raw,
            "tracking_uri": tracking_uri(),
            "registered_name": model.registered_name,
            "version": model.version,
            "run_id": model.run_id,
            "flavor": model.flavor,
        },
        "signature": {
            "inputs": [t.to_dict() for t in inputs.tensors],
            "outputs": [t.to_dict() for t in outputs],
            "feature_names": list(inputs.feature_names) if inputs.feature_names else None,
        },
        "input_example_sha256": example_hash,
        "parity": parity.to_dict(),
        "onnx": {"opset": _opset(onnx_model), "sha256": hashlib.sha256(onnx_bytes).hexdigest()},
        # Run and version tags carry what serving needs to know from training, e.g. the Feast
        # feature service and ordered feature list; MLflow's own bookkeeping tags are left out.
        "tags": {
            k: v for k, v in {**model.run_tags, **model.version_tags}.items() if not k.startswith("mlflow.")
        },
    }
    artifacts = [
        ModelArtifact(
            name=name,
            config=config,
            version_files={"model.onnx": onnx_bytes},
            model_files=warmup if options.warmup else {},
            metadata=metadata,
            identity=identity,
        )
    ]
    if request.ensemble:
        from builder.ensemble import ensemble_artifacts, load_spec

        spec = load_spec(model, request.ensemble_spec)
        extra = ensemble_artifacts(name, inputs.tensors, outputs, spec, options, parameters=client_params)
        for art in extra:
            art.metadata.update(
                {
                    "source": metadata["source"],
                    "ensemble_spec": spec.source,
                    "builder_version": __version__,
                }
            )
        artifacts += extra
    return artifacts
