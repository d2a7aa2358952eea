"""Which Triton model serves a gateway model, how to build its inputs and read its outputs.

Everything comes from Triton's model-config API, from the parameters ``builder export`` wrote
(docs/serving-contract.md): the input layout and typed columns, the model kind, its classes and
output roles, the Feast feature service, entity keys and request-time fields. The entity keys'
types come from Feast (the feature service's views), passed in by the caller. So the gateway
needs no access to the model repository's files, and a new model version brings its own
description. Everything is parsed and checked once, here; a config the gateway cannot serve is
a SpecError that says what is wrong.

Configs exported before ``serving.layout``/``serving.kind`` existed are read as the ``matrix``
layout (every column float32) with ``legacy`` outputs: a score, probabilities and label found
by tensor name, as the gateway always did.

Kinds and their roles (issue 19 added the last three shapes):
- ``binary``/``multiclass`` with ``probabilities`` (and usually ``label``);
- ``binary``/``multiclass`` without probabilities (LinearSVC, RidgeClassifier, ...): ``label``
  and optionally ``scores``, the decision function's values;
- ``regression``: ``value``, one column per target (``serving.targets``, default 1);
- ``outlier``: ``score`` (the decision function, read through ``serving.score``) and
  optionally ``label`` (1 inlier, -1 outlier);
- ``cluster``: ``label`` (the cluster id, ``0..serving.clusters-1``) and optionally
  ``distances`` (to each cluster centre, one column per cluster);
- ``other``: every output passed through.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, Literal

from gateway.errors import SpecError
from gateway.values import DTYPES, Dtype

__all__ = [
    "ClassLabel",
    "Column",
    "Kind",
    "ModelSpec",
    "OutlierScore",
    "OutputRoles",
    "SpecError",
    "spec_from_config",
]

Layout = Literal["matrix", "columns"]
Kind = Literal["binary", "multiclass", "regression", "outlier", "cluster", "other"]
ClassLabel = bool | int | float | str

_KINDS: Final = ("binary", "multiclass", "regression", "outlier", "cluster", "other")
_ROLES: Final = ("label", "probabilities", "scores", "value", "score", "distances")
_TRITON_TYPES: Final = {
    "float32": "TYPE_FP32",
    "int64": "TYPE_INT64",
    "bool": "TYPE_BOOL",
    "string": "TYPE_STRING",
}
_REQUIRED: Final = ("feast.feature_service", "feast.entity_keys", "feast.request_fields")


@dataclass(frozen=True)
class Column:
    name: str
    dtype: Dtype


@dataclass(frozen=True)
class OutputRoles:
    """Output tensor names by role (``serving.outputs``); None where the model has no such output."""

    label: str | None = None
    probabilities: str | None = None
    value: str | None = None
    score: str | None = None  # outlier: the decision function, one column
    scores: str | None = None  # classifiers without probabilities: decision-function values
    distances: str | None = None  # cluster: the distance to each cluster centre, one column each


@dataclass(frozen=True)
class OutlierScore:
    """``serving.score`` of an outlier detector: where its score comes from, and below which
    value a row is an outlier (read only when the model has no label output)."""

    source: str  # e.g. "decision_function": lower is more anomalous
    outlier_below: float


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the name clients use (the exported model's)
    triton_model: str  # what the gateway calls: NAME_ensemble when there is one, else NAME
    version: str
    layout: Layout
    input_name: str  # the matrix layout's one input; in the columns layout each column is an input
    columns: tuple[Column, ...]  # the model's columns, in training order, with their served dtypes
    feature_service: str
    entity_keys: tuple[Column, ...]  # Feast join keys with their types (int64 or string)
    request_fields: tuple[str, ...]
    kind: Kind
    classes: tuple[ClassLabel, ...] | None  # classifiers: probability-column order
    roles: OutputRoles
    outputs: tuple[str, ...]  # what to ask Triton for
    decision_threshold: float | None = None
    # regression: columns of the value output, one per target (serving.targets; 1 when absent)
    targets: int = 1
    outlier_score: OutlierScore | None = None  # kind outlier only
    # cluster: how many clusters (serving.clusters), the ids being 0..clusters-1; None: unknown
    clusters: int | None = None
    legacy: bool = False  # exported before serving.kind: outputs found by tensor name
    # Rows one Triton call may carry (the config's max_batch_size); 0: the model has no batch
    # axis and takes its tensors whole, so one call carries any number of rows.
    max_batch_size: int = 0
    # The version's reference statistics (config parameter drift.reference, docs/drift.md) as
    # JSON text; None when the export had none, and drift is off for this version.
    drift_reference: str | None = None
    # The version every call names (config parameter serving.champion_version, written by
    # ``builder export --keep-serving``): a challenger loaded beside it is Triton's newest, which
    # a call naming no version would get. "": the call names none (Triton's newest).
    pinned_version: str = ""
    # Set on the spec a model is served through while it is switched to its fallback
    # (gateway/fallback/): the model that answers instead ("" : the spec's own model answers).
    answered_by: str = ""

    # Derived views, computed once per spec: they are read for every row on the hot path.
    @cached_property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @cached_property
    def entity_key_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.entity_keys)

    @cached_property
    def online_features(self) -> tuple[str, ...]:
        """Columns read from the online store (the rest come with the request)."""
        return tuple(f for f in self.feature_names if f not in self.request_fields)

    @cached_property
    def dtypes(self) -> dict[str, Dtype]:
        """Column name -> its served dtype."""
        return {c.name: c.dtype for c in self.columns}

    def dtype(self, column: str) -> Dtype:
        return self.dtypes[column]


def _names(value: str) -> tuple[str, ...]:
    value = value.strip()
    if value.startswith("["):
        return tuple(str(v) for v in json.loads(value))
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _json(model: str, key: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"model {model!r}: {key} is not valid JSON ({exc.msg}): {text[:80]!r}") from exc


def feature_service_of(name: str, config: dict) -> str:
    """The config's Feast feature service (needed before the spec: it gives the key types)."""
    params = _params(config)
    if not params.get("feast.feature_service"):
        raise SpecError(_not_from_feast(name, ["feast.feature_service"]))
    return params["feast.feature_service"]


def _params(config: dict) -> dict[str, str]:
    return {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def _not_from_feast(name: str, missing: list[str]) -> str:
    return (
        f"model {name!r} has no {', '.join(missing)} in its Triton config: export it from an "
        "MLflow run tagged with its Feast feature service"
    )


def spec_from_config(
    name: str, triton_model: str, version: str, config: dict, key_types: Mapping[str, str]
) -> ModelSpec:
    """Build a ModelSpec from a Triton model config (as JSON, tritonclient's ``as_json``) and the
    types of the feature service's join keys (name -> ``int64``/``string``, from Feast)."""
    params = _params(config)
    missing = [k for k in _REQUIRED if k not in params]
    if missing:
        raise SpecError(_not_from_feast(name, missing))
    layout = params.get("serving.layout", "matrix")
    if layout == "tensors":
        raise SpecError(
            f"model {name!r} takes tensors (serving.layout=tensors), not feature columns: the "
            "gateway assembles tabular inputs only; call Triton directly for this model"
        )
    if layout not in ("matrix", "columns"):
        raise SpecError(f"model {name!r}: unknown serving.layout {layout!r} (matrix, columns or tensors)")
    columns = _columns(name, layout, params)
    input_name = _check_inputs(name, layout, columns, config.get("input") or [])
    entity_keys = _names(params["feast.entity_keys"])
    request_fields = _names(params["feast.request_fields"])
    unknown = set(request_fields) - {c.name for c in columns}
    if unknown:
        raise SpecError(f"model {name!r}: request fields {sorted(unknown)} are not model inputs")
    config_outputs = tuple(o["name"] for o in config.get("output") or [])
    kind, classes, roles, threshold = _outputs(name, params, config_outputs)
    targets = _targets(name, kind, params, config.get("output") or [], roles, _max_batch_size(name, config))
    outlier_score = _outlier_score(name, params) if kind == "outlier" else None
    clusters = _clusters(name, kind, params, config.get("output") or [], roles, _max_batch_size(name, config))
    legacy = "serving.kind" not in params
    if legacy or kind == "other" or config.get("platform") == "ensemble":
        # A Triton ensemble (builder export --ensemble-mode steps) answers only once its last
        # step writes a requested output, with every requested one set: asked for a subset
        # (the probabilities alone), it fails with "unexpected deadlock". So all its outputs.
        requested = config_outputs
    else:
        # A binary model with a threshold gets its label from the gateway, not from the model.
        label = None if kind == "binary" and threshold is not None else roles.label
        wanted = (label, roles.probabilities, roles.scores, roles.value, roles.score, roles.distances)
        requested = tuple(dict.fromkeys(n for n in wanted if n))
    return ModelSpec(
        name=name,
        triton_model=triton_model,
        version=version,
        layout=layout,  # type: ignore[arg-type]  # checked above
        input_name=input_name,
        columns=columns,
        feature_service=params["feast.feature_service"],
        entity_keys=_entity_keys(name, params["feast.feature_service"], entity_keys, key_types),
        request_fields=request_fields,
        kind=kind,
        classes=classes,
        roles=roles,
        outputs=requested,
        decision_threshold=threshold,
        targets=targets,
        outlier_score=outlier_score,
        clusters=clusters,
        legacy=legacy,
        max_batch_size=_max_batch_size(name, config),
        drift_reference=params.get("drift.reference") or None,
        pinned_version=params.get("serving.champion_version", "").strip(),
    )


def _max_batch_size(name: str, config: dict) -> int:
    # proto3 JSON omits a zero, so an absent max_batch_size is 0, which Triton reads the same way
    raw = config.get("max_batch_size", 0)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise SpecError(f"model {name!r}: max_batch_size {raw!r} is not a whole number >= 0")
    return value


def _columns(name: str, layout: str, params: dict[str, str]) -> tuple[Column, ...]:
    if "serving.columns" not in params:
        if layout == "columns" or "serving.feature_names" not in params:
            key = "serving.columns" if layout == "columns" else "serving.feature_names"
            raise SpecError(_not_from_feast(name, [key]))
        # older exports: the matrix's column names only, every one float32
        return tuple(Column(n, "float32") for n in _names(params["serving.feature_names"]))
    raw = _json(name, "serving.columns", params["serving.columns"])
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"model {name!r}: serving.columns must be a non-empty JSON list of {{name, dtype}}")
    columns = []
    for item in raw:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and item.get("dtype") in DTYPES):
            raise SpecError(
                f"model {name!r}: serving.columns entry {item!r} is not {{name, dtype}} with dtype one "
                f"of {', '.join(DTYPES)}"
            )
        if layout == "matrix" and item["dtype"] != "float32":
            raise SpecError(
                f"model {name!r}: column {item['name']!r} is {item['dtype']} in the matrix layout, "
                "whose one input is float32"
            )
        columns.append(Column(item["name"], item["dtype"]))
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise SpecError(f"model {name!r}: serving.columns names a column twice: {names}")
    return tuple(columns)


def _check_inputs(name: str, layout: str, columns: tuple[Column, ...], inputs: list[dict]) -> str:
    """The matrix layout's input name; in the columns layout, that every column is an input
    of its type (a mismatch would only surface as Triton's error on the first request)."""
    if layout == "matrix":
        if len(inputs) != 1:
            raise SpecError(f"model {name!r} has {len(inputs)} inputs; the matrix layout has one")
        return str(inputs[0]["name"])
    declared = {i["name"]: i.get("data_type", "") for i in inputs}
    for column in columns:
        if column.name not in declared:
            raise SpecError(f"model {name!r}: column {column.name!r} is not one of the model's inputs")
        if declared[column.name] != _TRITON_TYPES[column.dtype]:
            raise SpecError(
                f"model {name!r}: input {column.name!r} is {declared[column.name]}, but serving.columns "
                f"says {column.dtype}"
            )
    extra = sorted(set(declared) - {c.name for c in columns})
    if extra:
        raise SpecError(f"model {name!r}: inputs {extra} are not in serving.columns")
    return ""


def _entity_keys(
    name: str, service: str, keys: tuple[str, ...], key_types: Mapping[str, str]
) -> tuple[Column, ...]:
    out = []
    for key in keys:
        dtype = key_types.get(key)
        if dtype is None:
            raise SpecError(
                f"model {name!r}: entity key {key!r} is not a join key of feature service {service!r}"
            )
        if dtype not in ("int64", "string"):
            raise SpecError(
                f"model {name!r}: entity key {key!r} is {dtype} in Feast; the gateway takes INT64 or "
                "STRING join keys"
            )
        out.append(Column(key, dtype))  # type: ignore[arg-type]  # checked above
    return tuple(out)


def _outputs(
    name: str, params: dict[str, str], config_outputs: tuple[str, ...]
) -> tuple[Kind, tuple[ClassLabel, ...] | None, OutputRoles, float | None]:
    kind = params.get("serving.kind")
    if kind is None:  # older exports: a binary classifier whose outputs are found by name
        return "binary", None, OutputRoles(), None
    if kind not in _KINDS:
        raise SpecError(f"model {name!r}: unknown serving.kind {kind!r} ({', '.join(_KINDS)})")
    raw_roles = _json(name, "serving.outputs", params.get("serving.outputs", "{}"))
    if not isinstance(raw_roles, dict) or not all(isinstance(v, str) for v in raw_roles.values()):
        raise SpecError(f"model {name!r}: serving.outputs must be a JSON object of role -> output name")
    for role, tensor in raw_roles.items():
        if role in _ROLES and tensor not in config_outputs:
            raise SpecError(
                f"model {name!r}: serving.outputs {role} is {tensor!r}, not one of {config_outputs}"
            )
    roles = OutputRoles(**{r: raw_roles.get(r) for r in _ROLES})
    classes = None
    if kind in ("binary", "multiclass"):
        classes = _classes(name, kind, params)
        # Without probabilities (LinearSVC, RidgeClassifier, ...) the label is the model's own:
        # nothing else says which class a row is.
        if roles.probabilities is None and roles.label is None:
            raise SpecError(
                f"model {name!r}: a {kind} model needs a probabilities or a label output in serving.outputs"
            )
    if kind == "regression" and roles.value is None:
        raise SpecError(f"model {name!r}: a regression model needs a value output in serving.outputs")
    if kind == "outlier" and roles.score is None:
        raise SpecError(f"model {name!r}: an outlier model needs a score output in serving.outputs")
    if kind == "cluster" and roles.label is None:
        raise SpecError(f"model {name!r}: a cluster model needs a label output in serving.outputs")
    threshold = None
    if kind == "binary" and "serving.decision_threshold" in params:
        if roles.probabilities is None:
            raise SpecError(
                f"model {name!r}: serving.decision_threshold applies to probabilities, and the model "
                "has none (its scores are decision-function values)"
            )
        text = params["serving.decision_threshold"]
        try:
            threshold = float(text)
        except ValueError:
            threshold = math.nan
        if not 0.0 <= threshold <= 1.0:  # also refuses NaN
            raise SpecError(f"model {name!r}: serving.decision_threshold {text!r} is not a number in [0, 1]")
    return kind, classes, roles, threshold  # type: ignore[return-value]  # kind checked above


def _targets(
    name: str, kind: str, params: dict[str, str], outputs: list[dict], roles: OutputRoles, max_batch: int
) -> int:
    """``serving.targets`` (regression: the value output's columns), checked against the value
    output's declared dims where they are fixed, so a mismatch is refused before any request."""
    text = params.get("serving.targets")
    if text is None:
        targets = 1
    else:
        if kind != "regression":
            raise SpecError(f"model {name!r}: serving.targets applies to regression models, not {kind}")
        try:
            targets = int(text)
        except ValueError:
            targets = 0
        if targets < 1:
            raise SpecError(f"model {name!r}: serving.targets {text!r} is not a whole number >= 1")
    if kind != "regression":
        return targets
    dims = next((o.get("dims") for o in outputs if o.get("name") == roles.value), None)
    try:
        # A batching model's dims leave out the batch axis; one without (max_batch_size 0) has it first.
        row = [int(d) for d in (dims or [])][0 if max_batch else 1 :]
    except (TypeError, ValueError):
        row = []
    if row and all(d > 0 for d in row) and math.prod(row) != targets:
        raise SpecError(
            f"model {name!r}: its value output {roles.value!r} has {math.prod(row)} column(s) per row, "
            f"but serving.targets is {targets}{'' if text is not None else ' (absent)'}"
        )
    return targets


def _clusters(
    name: str, kind: str, params: dict[str, str], outputs: list[dict], roles: OutputRoles, max_batch: int
) -> int | None:
    """``serving.clusters`` (cluster: how many; absent when unknown), checked against the
    distances output's declared columns where they are fixed."""
    text = params.get("serving.clusters")
    if text is None:
        return None
    if kind != "cluster":
        raise SpecError(f"model {name!r}: serving.clusters applies to cluster models, not {kind}")
    try:
        clusters = int(text)
    except ValueError:
        clusters = 0
    if clusters < 1:
        raise SpecError(f"model {name!r}: serving.clusters {text!r} is not a whole number >= 1")
    dims = next((o.get("dims") for o in outputs if o.get("name") == roles.distances), None)
    try:
        row = [int(d) for d in (dims or [])][0 if max_batch else 1 :]
    except (TypeError, ValueError):
        row = []
    if row and all(d > 0 for d in row) and math.prod(row) != clusters:
        raise SpecError(
            f"model {name!r}: its distances output {roles.distances!r} has {math.prod(row)} column(s) "
            f"per row, but serving.clusters is {clusters}"
        )
    return clusters


def _outlier_score(name: str, params: dict[str, str]) -> OutlierScore:
    if "serving.score" not in params:
        raise SpecError(f"model {name!r}: an outlier model needs serving.score ({{source, outlier_below}})")
    raw = _json(name, "serving.score", params["serving.score"])
    below = raw.get("outlier_below") if isinstance(raw, dict) else None
    if not (
        isinstance(raw, dict)
        and isinstance(raw.get("source"), str)
        and isinstance(below, int | float)
        and not isinstance(below, bool)
        and math.isfinite(below)
    ):
        raise SpecError(
            f"model {name!r}: serving.score must be a JSON object with a source (text) and a finite "
            f"outlier_below, got {params['serving.score'][:80]!r}"
        )
    return OutlierScore(raw["source"], float(below))


def _classes(name: str, kind: str, params: dict[str, str]) -> tuple[ClassLabel, ...]:
    if "serving.classes" not in params:
        raise SpecError(f"model {name!r}: a {kind} model needs serving.classes")
    raw = _json(name, "serving.classes", params["serving.classes"])
    if not isinstance(raw, list) or not all(isinstance(c, bool | int | float | str) for c in raw):
        raise SpecError(f"model {name!r}: serving.classes must be a JSON list of numbers or strings")
    if len(set(raw)) != len(raw):
        raise SpecError(f"model {name!r}: serving.classes has duplicates: {raw}")
    if kind == "binary" and len(raw) != 2:
        raise SpecError(f"model {name!r}: a binary model has 2 classes, serving.classes has {len(raw)}")
    if kind == "multiclass" and len(raw) < 2:
        raise SpecError(f"model {name!r}: a multiclass model needs at least 2 classes, got {raw}")
    return tuple(raw)


def incompatible(champion: ModelSpec, challenger: ModelSpec) -> str | None:
    """Why ``challenger`` cannot answer the champion's inputs comparably (the same inputs,
    kind and classes), or None: a shadowing challenger and a fallback must pass this."""
    name = challenger.name
    if (challenger.layout, challenger.input_name, challenger.columns) != (
        champion.layout,
        champion.input_name,
        champion.columns,
    ):
        return f"challenger {name!r} takes other inputs than {champion.name!r} (columns, dtypes or layout)"
    if challenger.kind != champion.kind:
        return f"challenger {name!r} is a {challenger.kind} model; {champion.name!r} is {champion.kind}"
    if challenger.classes != champion.classes:
        theirs, ours = challenger.classes, champion.classes
        return f"challenger {name!r} has the classes {theirs}; {champion.name!r} has {ours}"
    if challenger.clusters != champion.clusters:
        theirs_k, ours_k = challenger.clusters, champion.clusters
        return f"challenger {name!r} has {theirs_k} clusters; {champion.name!r} has {ours_k}"
    return None
