"""A gateway model as an OIP model: its inputs and outputs as tensors, requests and answers.

Inputs: the entity keys, then the request-time fields, each an ``[N, 1]`` tensor (``[N]`` is
taken too) of its column's datatype: float32 -> FP32 (FP64 accepted), int64 -> INT64 (INT32
accepted), bool -> BOOL, string -> BYTES. Element ``i`` of every input is row ``i``, so the
request becomes the same typed ``PredictRequest`` a JSON body of rows does, and the core checks
values (range, finiteness) as it always does, naming ``rows[i].field``.

Outputs, by kind (all FP64 numbers: the gateway's answers are Python floats, and FP64 carries
them exactly, so OIP and ``/v1`` agree to the bit): binary ``label``, ``probabilities``
``[N, C]``, ``score`` ``[N, 1]``; multiclass ``label``, ``probabilities``; classifiers without
probabilities ``label`` and (when the model has them) ``scores``; regression ``value``
``[N, targets]``; outlier ``label`` (INT64 -1/1), ``score``, ``outlier`` (BOOL); cluster ``label``
(INT64, the cluster id) and, when the model has them, ``distances`` ``[N, clusters]``; and for every
kind ``defaults_used`` (BOOL ``[N, 1]``). A label is BYTES when the classes are strings, INT64
when integers, BOOL or FP64 when those. Kind ``other`` passes untyped outputs through and has no
fixed tensors: it is refused here (use ``/v1/models/{m}/predict``).

A model exported with an explainer (``builder export --explain``) also lists ``explanations``
(BYTES ``[N, 1]``): per row, the reason codes as the JSON object ``/v1`` answers under
``explanation`` (docs/explain.md). It is computed only when a request names it among its
``outputs`` (a request naming none gets every other output), with the output's parameter
``explain`` (k, default: every column) checked like ``/v1``'s ``explain``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gateway.catalog import ModelSpec
from gateway.errors import BadRequest, ModelNotFound, NoExplainer, SpecError
from gateway.request import PredictRequest, Row
from gateway.responses import Prediction, PredictResult
from gateway.values import Scalar

DATATYPE: Final[dict[str, str]] = {"float32": "FP32", "int64": "INT64", "bool": "BOOL", "string": "BYTES"}
# What a column takes beyond its own datatype: widening costs nothing, the core checks the range.
ACCEPTED: Final[dict[str, tuple[str, ...]]] = {
    "float32": ("FP32", "FP64"),
    "int64": ("INT64", "INT32"),
    "bool": ("BOOL",),
    "string": ("BYTES",),
}


EXPLANATIONS: Final = "explanations"  # the reason codes' output, of models with an explainer


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor of a model's metadata: ``shape`` has -1 for the rows (and unknown widths)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True, slots=True)
class Tensor:
    """One decoded input: its values flat, one per row."""

    name: str
    datatype: str
    values: list[Scalar]


@dataclass(frozen=True, slots=True)
class Output:
    """One answered output: ``values`` flat, row-major, of ``shape``."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    values: list[Any]


@functools.lru_cache(maxsize=64)
def inputs(spec: ModelSpec) -> tuple[TensorSpec, ...]:
    """The model's input tensors: entity keys then request fields, each ``[-1, 1]``."""
    keys = [TensorSpec(k.name, DATATYPE[k.dtype], (-1, 1)) for k in spec.entity_keys]
    fields = [TensorSpec(n, DATATYPE[spec.dtype(n)], (-1, 1)) for n in spec.request_fields]
    return (*keys, *fields)


def check_version(spec: ModelSpec, version: str) -> None:
    """A version a client names must be the one the gateway serves (its spec's)."""
    if version and version != spec.version:
        raise ModelNotFound(
            f"model {spec.name!r} has no version {version!r} here; the gateway serves {spec.version}"
        )


def _dtype_of(spec: ModelSpec, name: str) -> str | None:
    for key in spec.entity_keys:
        if key.name == name:
            return key.dtype
    return spec.dtype(name) if name in spec.request_fields else None


def rows_in(spec: ModelSpec, name: str, datatype: str, shape: Sequence[int]) -> int:
    """Rows of one input, after checking its name, datatype and shape against the model."""
    dtype = _dtype_of(spec, name)
    if dtype is None:
        allowed = ", ".join(t.name for t in inputs(spec))
        raise BadRequest(f"unknown input {name!r}; model {spec.name!r} takes {allowed}")
    if datatype not in ACCEPTED[dtype]:
        raise BadRequest(
            f"input {name!r} is {datatype}; model {spec.name!r} takes {' or '.join(ACCEPTED[dtype])}"
        )
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
        raise BadRequest(f"input {name!r} has shape {list(shape)}; it takes [N, 1] (or [N])")
    return int(shape[0])


def to_request(spec: ModelSpec, tensors: Sequence[Tensor]) -> PredictRequest:
    """The typed request of ``tensors`` (already checked one by one): every input once, equal rows."""
    by_name: dict[str, Tensor] = {}
    for tensor in tensors:
        if tensor.name in by_name:
            raise BadRequest(f"input {tensor.name!r} is given twice")
        by_name[tensor.name] = tensor
    missing = [t.name for t in inputs(spec) if t.name not in by_name]
    if missing:
        raise BadRequest(f"missing input {missing[0]!r}; model {spec.name!r} takes them all")
    counts = {len(t.values) for t in tensors}
    if len(counts) > 1:
        raise BadRequest(f"inputs have different row counts: {sorted(counts)}")
    n = counts.pop() if counts else 0
    rows = tuple(Row({t.name: t.values[i] for t in tensors}) for i in range(n))
    return PredictRequest(spec.name, rows)


def _label_type(spec: ModelSpec) -> str:
    classes = spec.classes or ()
    if spec.kind in ("outlier", "cluster") or not classes:
        return "INT64"
    if all(isinstance(c, bool) for c in classes):
        return "BOOL"
    if all(isinstance(c, int) and not isinstance(c, bool) for c in classes):
        return "INT64"
    if all(isinstance(c, int | float) and not isinstance(c, bool) for c in classes):
        return "FP64"
    return "BYTES"


@functools.lru_cache(maxsize=64)
def outputs(spec: ModelSpec) -> tuple[TensorSpec, ...]:
    """The model's output tensors, by kind (see the module docstring)."""
    if spec.kind == "other":
        raise SpecError(
            f"model {spec.name!r} is of kind other: its outputs pass through untyped, which OIP "
            f"metadata cannot describe; call /v1/models/{spec.name}/predict"
        )
    width = len(spec.classes) if spec.classes else -1
    label = TensorSpec("label", _label_type(spec), (-1, 1))
    if spec.kind == "regression":
        found = [TensorSpec("value", "FP64", (-1, spec.targets))]
    elif spec.kind == "outlier":
        found = [label, TensorSpec("score", "FP64", (-1, 1)), TensorSpec("outlier", "BOOL", (-1, 1))]
    elif spec.kind == "cluster":
        found = [label]
        if spec.roles.distances is not None:
            found.append(TensorSpec("distances", "FP64", (-1, spec.clusters or -1)))
    elif spec.roles.probabilities is None and not spec.legacy:  # the model's label, decision values
        found = [label]
        if spec.roles.scores is not None:
            found.append(TensorSpec("scores", "FP64", (-1, width if spec.kind == "multiclass" else -1)))
    elif spec.kind == "multiclass":
        found = [label, TensorSpec("probabilities", "FP64", (-1, width))]
    else:
        found = [
            label,
            TensorSpec("probabilities", "FP64", (-1, width)),
            TensorSpec("score", "FP64", (-1, 1)),
        ]
    found.append(TensorSpec("defaults_used", "BOOL", (-1, 1)))
    if spec.explainer is not None:
        found.append(TensorSpec(EXPLANATIONS, "BYTES", (-1, 1)))
    return tuple(found)


def wanted(spec: ModelSpec, names: Sequence[str]) -> tuple[TensorSpec, ...]:
    """The outputs a request asks for (all when it names none); an unknown name is refused."""
    every = outputs(spec)
    if not names:  # reason codes cost an explainer call: only for requests that name them
        return tuple(t for t in every if t.name != EXPLANATIONS)
    known = {t.name: t for t in every}
    if EXPLANATIONS in names and EXPLANATIONS not in known:
        raise NoExplainer(
            f"model {spec.name!r} has no explainer, so no {EXPLANATIONS!r} output: export it with "
            f"`builder export --explain` (it writes {spec.name}_explain beside the model)",
            field="outputs",
        )
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadRequest(f"unknown output {unknown[0]!r}; model {spec.name!r} answers {', '.join(known)}")
    return tuple(known[n] for n in dict.fromkeys(names))


_FIELDS: Final[Mapping[str, str]] = {"label": "label", "score": "score", "outlier": "outlier"}


def explain_asked(spec: ModelSpec, tensors: Sequence[TensorSpec], parameter: Scalar | None) -> Scalar | None:
    """The ``explain`` of a request answering ``tensors``: None unless ``explanations`` is among
    them, then the output's ``explain`` parameter (checked by the core), else every column."""
    if not any(t.name == EXPLANATIONS for t in tensors):
        return None
    return len(spec.columns) if parameter is None else parameter


def _row(name: str, p: Prediction) -> list[Any]:
    if name == EXPLANATIONS:
        explained = p.explanation.to_dict() if p.explanation is not None else None
        return [json.dumps(explained, ensure_ascii=False, allow_nan=False, separators=(",", ":"))]
    if name == "probabilities":
        return list(p.probabilities)
    if name == "scores":
        return list(p.scores or ())
    if name == "distances":
        return list(p.distances or ())
    if name == "value":
        return list(p.values) if p.values is not None else [p.value]
    if name == "defaults_used":
        return [p.defaults_used]
    return [getattr(p, _FIELDS[name])]


def answer(result: PredictResult, tensors: Sequence[TensorSpec]) -> list[Output]:
    """The result as output tensors, flat row-major; a width is the answer's own (e.g. classes)."""
    out = []
    n = len(result.predictions)
    for tensor in tensors:
        rows = [_row(tensor.name, p) for p in result.predictions]
        width = len(rows[0]) if rows else max(tensor.shape[1], 0)
        values = [v for row in rows for v in row]
        if tensor.datatype == "BYTES":
            values = [str(v) for v in values]
        out.append(Output(tensor.name, tensor.datatype, (n, width), values))
    return out


SERVER: Final = "triton-stack-gateway"
# The protocol's extensions the gateway implements (Triton's names). Binary tensor data is read
# in requests only, so it is not claimed.
EXTENSIONS: Final = ("model_configuration",)


def server_metadata() -> dict[str, Any]:
    """``GET /v2`` / ServerMetadata: the gateway's name and version, its extensions."""
    try:
        version = importlib.metadata.version("triton-stack")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without an install
        version = "0"
    return {"name": SERVER, "version": version, "extensions": list(EXTENSIONS)}


def model_metadata(spec: ModelSpec) -> dict[str, Any]:
    """``GET /v2/models/{m}`` / ModelMetadata: exactly the tensors infer takes and answers."""
    return {
        "name": spec.name,
        "versions": [spec.version],
        "platform": SERVER,
        "inputs": [t.to_dict() for t in inputs(spec)],
        "outputs": [t.to_dict() for t in outputs(spec)],
    }


def _config_tensor(tensor: TensorSpec) -> dict[str, Any]:
    data_type = "TYPE_STRING" if tensor.datatype == "BYTES" else f"TYPE_{tensor.datatype}"
    return {"name": tensor.name, "data_type": data_type, "dims": list(tensor.shape[1:])}


def model_config(spec: ModelSpec, max_batch_rows: int) -> dict[str, Any]:
    """The model as a Triton model config (JSON form), for clients that size requests from it
    (perf_analyzer): a batching model of ``max_batch_rows`` (the gateway's limit), so the rows
    axis is the batch axis and the dims are the rest of each tensor's shape."""
    return {
        "name": spec.name,
        "platform": SERVER,
        "max_batch_size": max_batch_rows,
        "input": [_config_tensor(t) for t in inputs(spec)],
        "output": [_config_tensor(t) for t in outputs(spec)],
    }
