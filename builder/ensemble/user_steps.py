"""Serving steps a training run logs itself: ``serving/steps/<step>/`` artifacts.

Each folder is one step of the run's ensemble (docs/user-steps.md has the full format):

- ``step.json``: where it runs (``"position": "pre"`` before the model, ``"post"`` after it;
  ``"order"`` among steps of one position), its typed inputs and outputs in Triton's
  conventions (``name``, ``data_type`` such as ``TYPE_FP32``, ``dims`` without the batch axis)
  with the ensemble tensor each reads (``from``) or writes (``to``), and optional config hints
  (``instance_count``, ``max_batch_size``, ``max_queue_delay_microseconds``, ``parameters``);
- ``model.py``: a Triton Python-backend model (``class TritonPythonModel``), copied with the
  folder's other files into the step's version folder; or, instead of code,
  ``"model": "models:/NAME@ALIAS"``, another registered model the builder exports itself.

This module reads and checks the format; ``builder/ensemble/wiring.py`` checks the tensor mapping.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import UsageError
from builder.registry.run_artifacts import Refusal, fetch_run_artifact
from builder.registry.uri import ModelURI, parse_model_uri
from builder.repository.validate import python_model_problem
from builder.tensors import dtype_from_triton

RUN_STEPS = "serving/steps"
STEP_FILE = "step.json"
CODE_FILE = "model.py"
POSITIONS = ("pre", "post")
# The generated steps' suffixes: a user step of that name would take their model folder.
RESERVED = {"preprocess", "postprocess", "ensemble", "trt"}
_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_CONFIG_KEYS = {"instance_count", "max_batch_size", "max_queue_delay_microseconds", "parameters"}
_STEP_KEYS = {"position", "order", "inputs", "outputs", "config", "model", "description"}
_HINT = f"see docs/user-steps.md for the {STEP_FILE} format"


@dataclass(frozen=True)
class StepPort:
    """One input or output of a step: the step model's tensor and the ensemble tensor it
    reads (an input's ``from``) or writes (an output's ``to``); both default to ``name``.
    ``data_type`` and ``dims`` may be left out for a registered-model step (its own are used)."""

    name: str
    tensor: str
    data_type: str | None = None  # Triton's TYPE_*
    dims: tuple[int, ...] | None = None  # without the batch axis when the step batches
    ensemble_input: bool = False  # a pre step's input the ensemble takes from the request


@dataclass(frozen=True)
class StepHints:
    instance_count: int = 1
    max_batch_size: int | None = None  # None: the ensemble's
    max_queue_delay_us: int = 0  # only the model waits for a batch (see step_serving_options)
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UserStep:
    """A step the run logged, parsed and checked (not yet wired)."""

    name: str
    position: str
    order: int
    inputs: tuple[StepPort, ...]
    outputs: tuple[StepPort, ...]
    hints: StepHints
    source: str  # where it came from, for messages and the metadata
    files: dict[str, bytes] = field(default_factory=dict)  # the version folder's files (Python step)
    model: ModelURI | None = None  # a registered-model step

    @property
    def label(self) -> str:
        return f"{self.position} step {self.name!r}"


def _fail(source: str, reason: str) -> UsageError:
    return UsageError(f"user step {source}: {reason}", hint=_HINT)


def _port(source: str, kind: str, raw: Any, typed: bool) -> StepPort:
    link = "from" if kind == "input" else "to"
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise _fail(source, f'every {kind} needs a "name"')
    name = raw["name"]
    unknown = set(raw) - {"name", "data_type", "dims", link, "ensemble_input"}
    if unknown:
        raise _fail(source, f"{kind} {name!r}: unknown key(s) {sorted(unknown)}")
    tensor = raw.get(link, name)
    if not isinstance(tensor, str) or not tensor:
        raise _fail(source, f'{kind} {name!r}: "{link}" must name an ensemble tensor')
    data_type, dims = raw.get("data_type"), raw.get("dims")
    if typed and (data_type is None or dims is None):
        raise _fail(source, f'{kind} {name!r} needs "data_type" and "dims" (Triton\'s, e.g. TYPE_FP32, [1])')
    if data_type is not None:
        try:
            dtype_from_triton(data_type)
        except (KeyError, TypeError):
            raise _fail(
                source, f"{kind} {name!r}: data_type {data_type!r} is not a Triton type (TYPE_FP32, ...)"
            ) from None
    if dims is not None and not (
        isinstance(dims, list)
        and dims
        and all(isinstance(d, int) and not isinstance(d, bool) and (d > 0 or d == -1) for d in dims)
    ):
        raise _fail(source, f"{kind} {name!r}: dims must be a non-empty list of sizes (-1: variable)")
    ensemble_input = raw.get("ensemble_input", False)
    if (kind == "output" and "ensemble_input" in raw) or not isinstance(ensemble_input, bool):
        raise _fail(source, f"{kind} {name!r}: ensemble_input is true/false, on inputs only")
    return StepPort(name, tensor, data_type, tuple(dims) if dims is not None else None, ensemble_input)


def _hints(source: str, raw: Any) -> StepHints:
    if raw is None:
        return StepHints()
    if not isinstance(raw, dict) or set(raw) - _CONFIG_KEYS:
        raise _fail(source, f'"config" takes {sorted(_CONFIG_KEYS)}')

    def count(key: str, default: int, low: int) -> int:
        value = raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise _fail(source, f"config.{key} must be an integer >= {low}")
        return value

    params = raw.get("parameters", {})
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        raise _fail(source, "config.parameters maps names to strings (Triton's string_value)")
    mbs = raw.get("max_batch_size")
    return StepHints(
        instance_count=count("instance_count", 1, 1),
        max_batch_size=None if mbs is None else count("max_batch_size", 0, 0),
        max_queue_delay_us=count("max_queue_delay_microseconds", 0, 0),
        parameters=dict(params),
    )


def parse_step(name: str, files: dict[str, bytes], source: str) -> UserStep:
    """One step from its folder's files (``step.json``, ``model.py``, ...); UsageError if the
    format is wrong, naming the step and the field."""
    if not _STEP_NAME.match(name) or name in RESERVED:
        raise _fail(source, f"step name {name!r} must be letters, digits, '_' or '-', not {sorted(RESERVED)}")
    if STEP_FILE not in files:
        raise _fail(source, f"no {STEP_FILE}")
    try:
        spec = json.loads(files[STEP_FILE])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(source, f"{STEP_FILE} is not JSON: {exc}") from exc
    if not isinstance(spec, dict) or set(spec) - _STEP_KEYS:
        raise _fail(source, f"{STEP_FILE} is an object with keys from {sorted(_STEP_KEYS)}")
    position = spec.get("position")
    if position not in POSITIONS:
        raise _fail(source, f'"position" is "pre" (before the model) or "post" (after it), not {position!r}')
    order = spec.get("order", 0)
    if not isinstance(order, int) or isinstance(order, bool):
        raise _fail(source, '"order" must be an integer')
    model = None
    if "model" in spec:
        if not isinstance(spec["model"], str):
            raise _fail(source, '"model" is a model URI such as models:/NAME@ALIAS')
        model = parse_model_uri(spec["model"])
        if not model.is_registry:
            raise _fail(source, '"model" must be a registered model (models:/NAME@ALIAS or /VERSION)')
        if CODE_FILE in files:
            raise _fail(source, f'has both "model" and {CODE_FILE}: a step is one or the other')
    elif CODE_FILE not in files:
        raise _fail(source, f'no {CODE_FILE} (a Triton Python-backend model) and no "model" URI')
    else:
        check_python_model(files[CODE_FILE], f"{source}/{CODE_FILE}")
    typed = model is None
    ports = {}
    for kind in ("input", "output"):
        raw = spec.get(f"{kind}s")
        if not isinstance(raw, list) or not raw:
            raise _fail(source, f'"{kind}s" must be a non-empty list')
        ports[kind] = tuple(_port(source, kind, p, typed) for p in raw)
        names = [p.name for p in ports[kind]]
        if len(set(names)) != len(names):
            raise _fail(source, f"{kind} names repeat: {names}")
    hints = _hints(source, spec.get("config"))
    if model is not None and hints.parameters:
        raise _fail(source, 'config.parameters are read by a model.py; a "model" step is an ONNX graph')
    written = [p.tensor for p in ports["output"]]
    if len(set(written)) != len(written):
        raise _fail(source, f"two outputs write the same ensemble tensor: {written}")
    return UserStep(
        name=name,
        position=position,
        order=order,
        inputs=ports["input"],
        outputs=ports["output"],
        hints=hints,
        source=source,
        files={k: v for k, v in files.items() if model is None},
        model=model,
    )


def check_python_model(code: bytes, where: str) -> None:
    """Raise a UsageError when ``code`` cannot be a Python-backend model (it does not parse,
    or defines no ``TritonPythonModel`` class): Triton would only say so at load time."""
    problem = python_model_problem(code)
    if problem is not None:
        raise UsageError(f"user step {where}: {problem}", hint=_HINT)


def read_step_dirs(root: Path, source: str) -> list[UserStep]:
    """Every ``<root>/<step>/`` folder as a step, pre steps first, by ``order`` then name."""
    steps = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = {
            str(f.relative_to(folder)): f.read_bytes()
            for f in sorted(folder.rglob("*"))
            if f.is_file() and "__pycache__" not in f.parts
        }
        steps.append(parse_step(folder.name, files, f"{source}/{folder.name}"))
    return sorted(steps, key=lambda s: (POSITIONS.index(s.position), s.order, s.name))


def load_run_steps(run_id: str, workdir: Path) -> list[UserStep]:
    """The run's ``serving/steps/*`` (none: an empty list), downloaded into the export's
    scratch folder ``workdir``."""
    source = f"runs:/{run_id}/{RUN_STEPS}"
    refusal = Refusal(
        f"cannot read the run's serving steps {source}",
        hint="check that the artifact store the registry points at is reachable",
    )
    path = fetch_run_artifact(run_id, RUN_STEPS, workdir / "user-steps", refusal, optional=True)
    return [] if path is None else read_step_dirs(path, source)
