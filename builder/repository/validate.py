"""``builder validate``: check a model repository without starting Triton.

Every model folder: its config parses against the schema and names the folder; at least one
numeric version folder holds the file its backend loads (a Python-backend ``model.py`` that
parses and defines ``TritonPythonModel``); ONNX graphs agree with the config's
tensors; warm-up files exist; and ensemble steps name models that exist, with input/output maps
that use those models' real tensor names, chain in order, and agree in dtype and dims.
Every problem is listed; the caller exits non-zero if there is any. Warnings (a model that
loads only where the container is set up for it) are listed too, without failing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from google.protobuf import text_format

from builder.repository.triton_config import ModelConfig, parse_pbtxt
from builder.repository.validate_explain import check_explainers
from builder.repository.write import (
    EXPORT_PARAMETER,
    STAGING_PREFIX,
    config_identity,
    export_label,
    leftover_temp_files,
    loaded_versions,
    read_metadata,
)
from builder.tensors import dtype_from_triton, graph_tensors

_BACKEND_FILES = {"onnxruntime": "model.onnx", "python": "model.py"}


@dataclass(frozen=True)
class Tensor:
    dtype: str  # Triton TYPE_*
    dims: tuple[int, ...]


@dataclass
class ModelEntry:
    name: str
    config: ModelConfig
    versions: list[int]
    warnings: list[str] = field(default_factory=list)


def validate_repository(repo: Path) -> tuple[list[ModelEntry], list[str]]:
    """Return the models that parsed and every problem found (empty when the repo is sound)."""
    problems: list[str] = []
    if not repo.is_dir():
        return [], [f"{repo}: not a directory"]
    entries: dict[str, ModelEntry] = {}
    for model_dir in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
        entry = _check_model(model_dir, problems)
        if entry is not None:
            entries[entry.name] = entry
    if not entries and not problems:
        problems.append(f"{repo}: no models found")
    for entry in entries.values():
        if entry.config.platform == "ensemble":
            _check_ensemble(entry, entries, problems)
            _check_one_export(repo, entry, entries, problems)
    check_explainers(entries, problems)
    return list(entries.values()), problems


def _check_one_export(
    repo: Path, entry: ModelEntry, entries: dict[str, ModelEntry], problems: list[str]
) -> None:
    """An ensemble and the step versions it runs must come from one export: a mix is what an
    export killed half-way leaves (or a hand edit), and Triton would serve it."""
    name = entry.name
    hint = "an interrupted `builder export`? re-run it"
    served = loaded_versions(entry.config, entry.versions)
    unserved = [v for v in entry.versions if v > max(served, default=0)]
    if unserved:
        problems.append(f"{name}: version {unserved[-1]} is not served (its config loads {served}): {hint}")
    sources = {f"{name}/{v}": _source(repo / name / str(v)) for v in served[-1:]}
    for step in entry.config.ensemble_scheduling.step:
        target = entries.get(step.model_name)
        pinned = step.model_version
        if target is None or pinned <= 0:
            continue
        where = f"{name}: step {step.model_name} pins version {pinned}"
        if pinned not in target.versions:
            problems.append(f"{where}, which does not exist: a mixed ensemble ({hint})")
            continue
        if pinned not in loaded_versions(target.config, target.versions):
            problems.append(f"{where}, which its config does not load: a mixed ensemble ({hint})")
        latest = target.versions[-1]
        if latest != pinned:
            problems.append(
                f"{where}, but its latest version is {latest}, which Triton serves on its own: "
                f"a mixed ensemble ({hint})"
            )
        sources[f"{step.model_name}/{pinned}"] = _source(repo / step.model_name / str(pinned))
    known = {k: v for k, v in sources.items() if v is not None}
    if len(set(known.values())) > 1:
        listed = ", ".join(f"{k} from {v}" for k, v in sorted(known.items()))
        problems.append(f"{name}: a mixed ensemble, its versions come from different exports: {listed}")


def _source(version_dir: Path) -> str | None:
    return export_label(read_metadata(version_dir) or {})


def _check_served_config(model_dir: Path, entry: ModelEntry, problems: list[str]) -> None:
    """The newest version Triton loads must come from the export that wrote the config: a new
    version folder beside the old config (or the reverse) is what an interrupted export of an
    older builder, or a hand copy, leaves, and Triton would serve it with the other export's
    parameters (threshold, drift reference). Older versions a ``latest:N``/``all`` policy
    keeps loaded run under the newest config by design (Triton has one config per model)."""
    config_id = config_identity(entry.config)
    served = loaded_versions(entry.config, entry.versions)
    if config_id is None or not served:
        return
    config_export = entry.config.parameters[EXPORT_PARAMETER].string_value or f"identity {config_id[:12]}"
    for v in reversed(served):
        metadata = read_metadata(model_dir / str(v)) or {}
        identity = metadata.get("identity")
        if identity is None or identity == config_id:
            continue
        version_export = export_label(metadata) or f"identity {str(identity)[:12]}"
        if v == served[-1]:
            problems.append(
                f"{entry.name}: Triton would serve version {v} (exported from {version_export}) with "
                f"a config.pbtxt written by another export ({config_export}): a mix an interrupted "
                "export leaves; re-run that `builder export`, which rolls forward"
            )
        else:
            entry.warnings.append(
                f"{entry.name}: version {v} (from {version_export}) is kept loaded by the version "
                f"policy and runs under the newest export's config ({config_export})"
            )


def _check_model(model_dir: Path, problems: list[str]) -> ModelEntry | None:
    name = model_dir.name
    config_path = model_dir / "config.pbtxt"
    if not config_path.is_file():
        problems.append(f"{name}: no config.pbtxt")
        return None
    try:
        config = parse_pbtxt(config_path.read_text())
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        problems.append(f"{name}: config.pbtxt does not parse: {exc}")
        return None
    if config.name and config.name != name:
        problems.append(f"{name}: config names the model {config.name!r}, but its folder is {name!r}")
    stale = [p.name for p in model_dir.glob(f"{STAGING_PREFIX}*")]
    if stale:
        problems.append(f"{name}: leftover staging folder(s) from an interrupted export: {', '.join(stale)}")
    temps = [str(p.relative_to(model_dir)) for p in leftover_temp_files(model_dir)]
    if temps:
        problems.append(
            f"{name}: leftover temp file(s) from an interrupted write: {', '.join(temps)} "
            "(the next `builder export` removes them)"
        )
    versions = sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        problems.append(f"{name}: no version folders (numeric subfolders such as 1/)")
    for tensor in [*config.input, *config.output]:
        if len(tensor.dims) == 0 and not tensor.HasField("reshape"):
            problems.append(f"{name}: tensor {tensor.name!r} has no dims")
    required = config.default_model_filename or _BACKEND_FILES.get(config.backend)
    if config.platform != "ensemble" and required:
        for v in versions:
            if not (model_dir / str(v) / required).is_file():
                problems.append(f"{name}/{v}: missing {required} (needed by backend {config.backend!r})")
    if config.backend == "python" and required:
        for v in versions:
            code = model_dir / str(v) / required
            problem = python_model_problem(code.read_bytes()) if code.is_file() else None
            if problem is not None:
                problems.append(f"{name}/{v}: {required} {problem}")
    entry = ModelEntry(name=name, config=config, versions=versions)
    _check_served_config(model_dir, entry, problems)
    if config.backend == "onnxruntime" and versions:
        graph = _check_onnx(
            name, model_dir / str(versions[-1]) / (required or "model.onnx"), config, problems
        )
        if graph is not None:
            entry.warnings += string_op_warnings(name, graph)
    for warmup in config.model_warmup:
        for input_name, spec in warmup.inputs.items():
            if spec.input_data_file and not (model_dir / "warmup" / spec.input_data_file).is_file():
                problems.append(
                    f"{name}: warm-up file warmup/{spec.input_data_file} for {input_name!r} is missing"
                )
    return entry


def string_op_warnings(name: str, graph: onnx.GraphProto) -> list[str]:
    """onnxruntime's StringNormalizer builds a ``<locale>.UTF-8`` C++ locale when the model
    loads, and the load fails where the container lacks it (onnxruntime_backend issue 153)."""
    locales = sorted(
        {
            next((a.s.decode() for a in node.attribute if a.name == "locale"), "en_US")
            for node in graph.node
            if node.op_type == "StringNormalizer"
        }
    )
    warnings = []
    for locale in locales:
        if locale in ("C", ""):
            warnings.append(
                f"{name}: uses ONNX string operators (StringNormalizer): Triton needs the C.UTF-8 "
                "locale in its container (NGC images have it; the Helm chart sets LANG=C.UTF-8)"
            )
        else:
            warnings.append(
                f"{name}: its StringNormalizer asks for the {locale}.UTF-8 locale, which NGC Triton "
                f"images lack (the model will not load there); re-export it with `builder export`, "
                "which sets locale C, or install that locale in the Triton image"
            )
    return warnings


def _check_onnx(name: str, path: Path, config: ModelConfig, problems: list[str]) -> onnx.GraphProto | None:
    if not path.is_file():
        return None
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # a truncated or foreign file: protobuf raises DecodeError and others
        problems.append(f"{name}: {path.name} is not a readable ONNX model: {type(exc).__name__}")
        return None
    batch = 1 if config.max_batch_size > 0 else 0
    for kind, declared, actual in (
        ("input", config.input, graph_tensors(graph.input)),
        ("output", config.output, graph_tensors(graph.output)),
    ):
        by_name = {t.name: t for t in actual}
        for tensor in declared:
            real = by_name.get(tensor.name)
            if real is None:
                problems.append(
                    f"{name}: config {kind} {tensor.name!r} is not in the ONNX graph {sorted(by_name)}"
                )
                continue
            declared_dtype = dtype_from_triton(model_config_type_name(tensor.data_type))
            if declared_dtype != real.dtype:
                problems.append(
                    f"{name}: {kind} {tensor.name!r} is {real.dtype} in ONNX, {declared_dtype} in config"
                )
            if not _dims_agree(tuple(tensor.dims), real.shape[batch:]):
                problems.append(
                    f"{name}: {kind} {tensor.name!r} has dims {list(tensor.dims)} in config, "
                    f"{list(real.shape[batch:])} in ONNX"
                )
    return graph


def model_config_type_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2.DataType.Name(value)


def _dims_agree(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _tensors(config: ModelConfig, kind: str) -> dict[str, Tensor]:
    items = config.input if kind == "input" else config.output
    return {t.name: Tensor(model_config_type_name(t.data_type), tuple(t.dims)) for t in items}


def _check_ensemble(entry: ModelEntry, entries: dict[str, ModelEntry], problems: list[str]) -> None:
    name, config = entry.name, entry.config
    steps = config.ensemble_scheduling.step
    if not steps:
        problems.append(f"{name}: ensemble has no steps")
        return
    # Tensors available so far: the ensemble's inputs, then each step's mapped outputs.
    available: dict[str, Tensor | None] = dict(_tensors(config, "input"))
    for i, step in enumerate(steps, start=1):
        where = f"{name}: step {i} ({step.model_name})"
        target = entries.get(step.model_name)
        if target is None:
            problems.append(f"{where}: no model {step.model_name!r} in the repository")
            for ens_tensor in step.output_map.values():
                available[ens_tensor] = None  # unknown type; don't cascade errors
            continue
        if config.max_batch_size > target.config.max_batch_size:
            problems.append(
                f"{where}: ensemble max_batch_size {config.max_batch_size} exceeds the step's "
                f"{target.config.max_batch_size}"
            )
        inputs, outputs = _tensors(target.config, "input"), _tensors(target.config, "output")
        for model_input, ens_tensor in step.input_map.items():
            if model_input not in inputs:
                problems.append(
                    f"{where}: input_map key {model_input!r} is not an input of "
                    f"{step.model_name} {sorted(inputs)}"
                )
                continue
            if ens_tensor not in available:
                problems.append(
                    f"{where}: input {model_input!r} reads {ens_tensor!r}, "
                    "which no earlier step or ensemble input provides"
                )
                continue
            _agree(
                where,
                f"{ens_tensor!r} -> {model_input!r}",
                available[ens_tensor],
                inputs[model_input],
                problems,
            )
        for missing in sorted(set(inputs) - set(step.input_map)):
            problems.append(f"{where}: model input {missing!r} is not mapped")
        for model_output, ens_tensor in step.output_map.items():
            if model_output not in outputs:
                problems.append(
                    f"{where}: output_map key {model_output!r} is not an output of "
                    f"{step.model_name} {sorted(outputs)}"
                )
                available[ens_tensor] = None
            else:
                available[ens_tensor] = outputs[model_output]
    for out_name, tensor in _tensors(config, "output").items():
        if out_name not in available:
            problems.append(f"{name}: ensemble output {out_name!r} is produced by no step")
        else:
            _agree(name, f"output {out_name!r}", available[out_name], tensor, problems)


def _agree(where: str, what: str, produced: Tensor | None, consumed: Tensor, problems: list[str]) -> None:
    if produced is None:
        return
    if produced.dtype != consumed.dtype:
        problems.append(f"{where}: {what}: dtype {produced.dtype} meets {consumed.dtype}")
    elif not _dims_agree(produced.dims, consumed.dims):
        problems.append(f"{where}: {what}: dims {list(produced.dims)} meet {list(consumed.dims)}")


def python_model_problem(code: bytes) -> str | None:
    """The reason ``code`` is no Triton Python-backend model, or None (shared with validate)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        return f"does not parse: line {getattr(exc, 'lineno', '?')}: {getattr(exc, 'msg', exc)}"
    if not any(isinstance(n, ast.ClassDef) and n.name == "TritonPythonModel" for n in tree.body):
        return "defines no class TritonPythonModel (what the Python backend loads)"
    return None
