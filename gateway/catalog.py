"""Which Triton model serves a gateway model, how to build its inputs and read its outputs.

Everything comes from Triton's model-config API, from the parameters ``builder export`` wrote
(docs/serving-contract.md), read through ``serving_contract``: the input layout and typed
columns, the model kind, its classes and output roles, the Feast feature service, entity keys
and request-time fields. The entity keys' types come from Feast (the feature service's views),
passed in by the caller. So the gateway needs no access to the model repository's files, and a
new model version brings its own description. Everything is parsed and checked once: the
contract's own rules in serving_contract, the config's tensors against it here; a config the
gateway cannot serve is a SpecError that says what is wrong.

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

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Final, Literal

from gateway.errors import SpecError
from gateway.values import Dtype
from serving_contract import (
    ROLES,
    ClassLabel,
    Column,
    ContractError,
    Explainer,
    Kind,
    OutlierScore,
    OutputRoles,
    ServingContract,
    keys,
)

__all__ = [
    "ClassLabel",
    "Column",
    "Explainer",
    "Kind",
    "ModelSpec",
    "OutlierScore",
    "OutputRoles",
    "SpecError",
    "spec_from_config",
]

Layout = Literal["matrix", "columns"]

_TRITON_TYPES: Final = {
    "float32": "TYPE_FP32",
    "int64": "TYPE_INT64",
    "bool": "TYPE_BOOL",
    "string": "TYPE_STRING",
}
_COLUMNS: Final = keys.parameter(keys.COLUMNS)


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
    # The model that explains this one (serving.explainer, docs/explain.md): asked only when a
    # request wants reason codes; None: exported without ``--explain``.
    explainer: Explainer | None = None

    # Derived views, computed once per spec: they are read for every row on the hot path.
    @cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))

    def __hash__(self) -> int:
        # Kept once: a spec keys the batchers (gateway/core.py), and hashing its ~20 fields (the
        # columns, each a dataclass) anew cost ~5 µs a request. Equal specs hash equal, as before.
        return self._hash

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


def feature_service_of(name: str, config: dict) -> str:
    """The config's Feast feature service (needed before the spec: it gives the key types)."""
    service = _params(config).get(keys.FEATURE_SERVICE)
    if not service:
        raise SpecError(_not_from_feast(name, [keys.FEATURE_SERVICE]))
    return service


def _params(config: dict) -> dict[str, str]:
    return {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def _not_from_feast(name: str, missing: list[str]) -> str:
    return (
        f"model {name!r} has no {', '.join(missing)} in its Triton config: export it from an "
        "MLflow run tagged with its Feast feature service"
    )


def _contract(name: str, params: dict[str, str]) -> ServingContract:
    try:
        return ServingContract.from_parameters(params)
    except ContractError as exc:
        raise SpecError(f"model {name!r}: {exc}") from exc


def spec_from_config(
    name: str, triton_model: str, version: str, config: dict, key_types: Mapping[str, str]
) -> ModelSpec:
    """Build a ModelSpec from a Triton model config (as JSON, tritonclient's ``as_json``) and the
    types of the feature service's join keys (name -> ``int64``/``string``, from Feast)."""
    params = _params(config)
    missing = [k for k in keys.FEAST_KEYS if k not in params]
    if missing:
        raise SpecError(_not_from_feast(name, missing))
    contract = _contract(name, params)
    layout = contract.layout
    if layout == "tensors":
        raise SpecError(
            f"model {name!r} takes tensors ({keys.parameter(keys.LAYOUT)}=tensors), not feature columns: "
            "the gateway assembles tabular inputs only; call Triton directly for this model"
        )
    columns = contract.input_columns
    if columns is None:  # older matrix exports have the feature names only
        key = _COLUMNS if layout == "columns" else keys.parameter(keys.FEATURE_NAMES)
        raise SpecError(_not_from_feast(name, [key]))
    input_name = _check_inputs(name, layout, columns, config.get("input") or [])
    request_fields = contract.request_fields
    unknown = set(request_fields) - {c.name for c in columns}
    if unknown:
        raise SpecError(f"model {name!r}: request fields {sorted(unknown)} are not model inputs")
    outputs = config.get("output") or []
    config_outputs = tuple(o["name"] for o in outputs)
    for role, tensor in contract.outputs.items():
        if role in ROLES and tensor not in config_outputs:
            raise SpecError(
                f"model {name!r}: {keys.parameter(keys.OUTPUTS)} {role} is {tensor!r}, not one of "
                f"{config_outputs}"
            )
    kind: Kind = contract.kind or "binary"  # older exports: a binary classifier, outputs by name
    roles, threshold = contract.roles, contract.decision_threshold
    max_batch = _max_batch_size(name, config)
    _check_widths(name, contract, outputs, max_batch)
    if contract.legacy or kind == "other" or config.get("platform") == "ensemble":
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
        layout=layout,
        input_name=input_name,
        columns=columns,
        feature_service=params[keys.FEATURE_SERVICE],
        entity_keys=_entity_keys(name, params[keys.FEATURE_SERVICE], contract.entity_keys, key_types),
        request_fields=request_fields,
        kind=kind,
        classes=contract.classes,
        roles=roles,
        outputs=requested,
        decision_threshold=threshold,
        targets=contract.targets or 1,
        outlier_score=contract.score,
        clusters=contract.clusters,
        legacy=contract.legacy,
        max_batch_size=max_batch,
        drift_reference=params.get(keys.DRIFT_REFERENCE) or None,
        pinned_version=params.get(keys.CHAMPION_VERSION, "").strip(),
        explainer=contract.explainer,
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


def _check_widths(name: str, contract: ServingContract, outputs: list[dict], max_batch: int) -> None:
    """A regressor's value output has ``targets`` columns (1 when absent) and a clusterer's
    distances output ``clusters``, where their declared dims are fixed: a mismatch is refused
    before any request."""
    checks = []
    if contract.kind == "regression":
        absent = " (absent)" if contract.targets is None else ""
        checks.append(("value", contract.roles.value, keys.TARGETS, contract.targets or 1, absent))
    if contract.clusters is not None:
        checks.append(("distances", contract.roles.distances, keys.CLUSTERS, contract.clusters, ""))
    for role, tensor, fact, count, note in checks:
        dims = next((o.get("dims") for o in outputs if o.get("name") == tensor), None)
        try:
            # A batching model's dims leave out the batch axis; one without (max_batch_size 0)
            # has it first.
            row = [int(d) for d in (dims or [])][0 if max_batch else 1 :]
        except (TypeError, ValueError):
            row = []
        if row and all(d > 0 for d in row) and math.prod(row) != count:
            raise SpecError(
                f"model {name!r}: its {role} output {tensor!r} has {math.prod(row)} column(s) per row, "
                f"but {keys.parameter(fact)} is {count}{note}"
            )


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
                f"model {name!r}: input {column.name!r} is {declared[column.name]}, but {_COLUMNS} "
                f"says {column.dtype}"
            )
    extra = sorted(set(declared) - {c.name for c in columns})
    if extra:
        raise SpecError(f"model {name!r}: inputs {extra} are not in {_COLUMNS}")
    return ""


def _entity_keys(
    name: str, service: str, join_keys: tuple[str, ...], key_types: Mapping[str, str]
) -> tuple[Column, ...]:
    out = []
    for key in join_keys:
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
