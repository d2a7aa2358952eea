"""Reading a contract from either written form, and checking what every client relies on: the
facts in the order a reader meets them (the inputs, then what the model answers), each refusal
a ``ContractError`` naming the key.

Two levels: every fact is decoded (valid JSON of the right shape, a known layout and kind, a
number where one is due), which any reader needs; ``check`` adds the rules between facts that a
client reading predictions by role relies on (matrix columns are float32, a classifier's
classes, the role its kind answers with, a threshold only on probabilities,
``targets``/``clusters`` only on their kinds, an outlier detector's score rule). A client that
only sends rows (the MLflow plugin, the load tests) reads without them, as it always did: the
gateway is the one to refuse such a model."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from serving_contract import keys
from serving_contract.types import (
    CLASSIFIERS,
    DTYPES,
    KINDS,
    LAYOUTS,
    ROLES,
    ClassLabel,
    Column,
    ContractError,
    Explainer,
    Kind,
    OutlierScore,
    OutputRoles,
    decode_json,
    names,
)


class Parameters:
    """Facts from config parameters: text, JSON inside text, numbers as text."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self.params = params

    def has(self, fact: str) -> bool:
        return keys.parameter(fact) in self.params

    def shown(self, fact: str) -> str:
        return repr(self.params[keys.parameter(fact)][:80])

    def text(self, fact: str) -> str:
        return self.params[keys.parameter(fact)]

    def json(self, fact: str) -> Any:
        return decode_json(keys.parameter(fact), self.text(fact))

    def names(self, fact: str) -> tuple[str, ...]:
        return names(self.text(fact), keys.parameter(fact))

    def whole(self, fact: str) -> int:
        """The number, or 0 when it is not a whole number."""
        try:
            return int(self.text(fact))
        except ValueError:
            return 0

    def number(self, fact: str) -> float:
        try:
            return float(self.text(fact))
        except ValueError:
            return math.nan

    def flag(self, fact: str) -> bool:
        return self.text(fact) == "true"


class Metadata:
    """Facts from metadata.json's ``serving`` section: JSON values."""

    def __init__(self, serving: Mapping[str, Any]) -> None:
        self.serving = serving

    def has(self, fact: str) -> bool:
        return self.serving.get(fact) is not None

    def shown(self, fact: str) -> str:
        return repr(self.serving[fact])

    def text(self, fact: str) -> str:
        value = self.serving[fact]
        if not isinstance(value, str):
            raise ContractError(f"{keys.parameter(fact)} must be text, got {value!r}")
        return value

    def json(self, fact: str) -> Any:
        return self.serving[fact]

    def names(self, fact: str) -> tuple[str, ...]:
        value = self.serving[fact]
        if isinstance(value, str):
            return names(value, keys.parameter(fact))
        if not isinstance(value, list):
            raise ContractError(f"{keys.parameter(fact)} must be a JSON list of names")
        return tuple(str(v) for v in value)

    def whole(self, fact: str) -> int:
        value = self.serving[fact]
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def number(self, fact: str) -> float:
        value = self.serving[fact]
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan

    def flag(self, fact: str) -> bool:
        return self.serving[fact] is True


_Source = Parameters | Metadata


def read(src: _Source, feast: dict[str, str], check: bool) -> dict[str, Any]:
    """The fields of the contract ``src`` holds (``ServingContract``'s), decoded (and checked)."""
    layout = src.text(keys.LAYOUT) if src.has(keys.LAYOUT) else "matrix"
    if layout not in LAYOUTS:
        raise ContractError(f"unknown {keys.parameter(keys.LAYOUT)} {layout!r} (matrix, columns or tensors)")
    columns = _columns(src, layout, check) if src.has(keys.COLUMNS) else None
    feature_names = src.names(keys.FEATURE_NAMES) if src.has(keys.FEATURE_NAMES) else None
    for key in (keys.ENTITY_KEYS, keys.REQUEST_FIELDS):
        names(feast.get(key, ""), key)  # refused here rather than on first use
    kind = _kind(src)
    outputs = _outputs(src) if kind is not None else {}
    roles = OutputRoles(**{r: outputs.get(r) for r in ROLES})
    classes = _classes(src, kind, check) if kind in CLASSIFIERS else None
    if check:
        _check_roles(kind, roles)
    threshold = _threshold(src, roles, check) if kind == "binary" else None
    # a legacy export is a binary classifier
    targets = _count(src, keys.TARGETS, kind or "binary", "regression", check)
    score = _outlier_score(src, check) if kind == "outlier" else None
    clusters = _count(src, keys.CLUSTERS, kind or "binary", "cluster", check)
    return dict(
        layout=layout,
        columns=columns,
        feature_names=feature_names,
        kind=kind,
        classes=classes,
        outputs=outputs,
        targets=targets,
        score=score,
        clusters=clusters,
        decision_threshold=threshold,
        string_ops=src.flag(keys.STRING_OPS) if src.has(keys.STRING_OPS) else False,
        feast=feast,
        explainer=_explainer(src) if src.has(keys.EXPLAINER) else None,
    )


def _columns(src: _Source, layout: str, check: bool) -> tuple[Column, ...]:
    key = keys.parameter(keys.COLUMNS)
    raw = src.json(keys.COLUMNS)
    if not isinstance(raw, list) or not raw:
        raise ContractError(f"{key} must be a non-empty JSON list of {{name, dtype}}")
    columns = []
    for item in raw:
        entry = item if isinstance(item, dict) else {}
        name, dtype = entry.get(keys.COLUMN_NAME), entry.get(keys.COLUMN_DTYPE)
        if not isinstance(name, str) or dtype not in DTYPES:
            raise ContractError(
                f"{key} entry {item!r} is not {{name, dtype}} with dtype one of {', '.join(DTYPES)}"
            )
        if check and layout == "matrix" and dtype != "float32":
            raise ContractError(
                f"column {name!r} is {dtype} in the matrix layout, whose one input is float32"
            )
        columns.append(Column(name, dtype))
    found = [c.name for c in columns]
    if len(set(found)) != len(found):
        raise ContractError(f"{key} names a column twice: {found}")
    return tuple(columns)


def _kind(src: _Source) -> Kind | None:
    if not src.has(keys.KIND):
        return None
    kind = src.text(keys.KIND)
    if kind not in KINDS:
        raise ContractError(f"unknown {keys.parameter(keys.KIND)} {kind!r} ({', '.join(KINDS)})")
    return kind  # type: ignore[return-value]  # checked above


def _outputs(src: _Source) -> dict[str, str]:
    raw = src.json(keys.OUTPUTS) if src.has(keys.OUTPUTS) else {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ContractError(f"{keys.parameter(keys.OUTPUTS)} must be a JSON object of role -> output name")
    return raw


def _check_roles(kind: Kind | None, roles: OutputRoles) -> None:
    """That the outputs have the role the kind answers with."""
    key = keys.parameter(keys.OUTPUTS)
    # Without probabilities (LinearSVC, RidgeClassifier, ...) the label is the model's own:
    # nothing else says which class a row is.
    if kind in CLASSIFIERS and roles.probabilities is None and roles.label is None:
        raise ContractError(f"a {kind} model needs a probabilities or a label output in {key}")
    if kind == "regression" and roles.value is None:
        raise ContractError(f"a regression model needs a value output in {key}")
    if kind == "outlier" and roles.score is None:
        raise ContractError(f"an outlier model needs a score output in {key}")
    if kind == "cluster" and roles.label is None:
        raise ContractError(f"a cluster model needs a label output in {key}")


def _classes(src: _Source, kind: str, check: bool) -> tuple[ClassLabel, ...] | None:
    key = keys.parameter(keys.CLASSES)
    if not src.has(keys.CLASSES):
        if check:
            raise ContractError(f"a {kind} model needs {key}")
        return None
    raw = src.json(keys.CLASSES)
    if not isinstance(raw, list) or not all(isinstance(c, bool | int | float | str) for c in raw):
        raise ContractError(f"{key} must be a JSON list of numbers or strings")
    if not check:
        return tuple(raw)
    if len(set(raw)) != len(raw):
        raise ContractError(f"{key} has duplicates: {raw}")
    if kind == "binary" and len(raw) != 2:
        raise ContractError(f"a binary model has 2 classes, {key} has {len(raw)}")
    if kind == "multiclass" and len(raw) < 2:
        raise ContractError(f"a multiclass model needs at least 2 classes, got {raw}")
    return tuple(raw)


def _threshold(src: _Source, roles: OutputRoles, check: bool) -> float | None:
    key = keys.parameter(keys.DECISION_THRESHOLD)
    if not src.has(keys.DECISION_THRESHOLD):
        return None
    if check and roles.probabilities is None:
        raise ContractError(
            f"{key} applies to probabilities, and the model has none (its scores are "
            "decision-function values)"
        )
    threshold = src.number(keys.DECISION_THRESHOLD)
    if not 0.0 <= threshold <= 1.0:  # also refuses NaN
        raise ContractError(f"{key} {src.shown(keys.DECISION_THRESHOLD)} is not a number in [0, 1]")
    return threshold


def _count(src: _Source, fact: str, kind: str, applies_to: str, check: bool) -> int | None:
    """``targets`` (regression) or ``clusters`` (cluster): a whole number >= 1, or None."""
    if not src.has(fact):
        return None
    key = keys.parameter(fact)
    if kind != applies_to:
        if check:
            raise ContractError(f"{key} applies to {applies_to} models, not {kind}")
        return None
    count = src.whole(fact)
    if count < 1:
        raise ContractError(f"{key} {src.shown(fact)} is not a whole number >= 1")
    return count


def _outlier_score(src: _Source, check: bool) -> OutlierScore | None:
    key = keys.parameter(keys.SCORE)
    if not src.has(keys.SCORE):
        if check:
            raise ContractError(f"an outlier model needs {key} ({{source, outlier_below}})")
        return None
    raw = src.json(keys.SCORE)
    source = raw.get(keys.SCORE_SOURCE) if isinstance(raw, dict) else None
    below = raw.get(keys.SCORE_OUTLIER_BELOW) if isinstance(raw, dict) else None
    if not (
        isinstance(source, str)
        and isinstance(below, int | float)
        and not isinstance(below, bool)
        and math.isfinite(below)
    ):
        raise ContractError(
            f"{key} must be a JSON object with a source (text) and a finite outlier_below, "
            f"got {src.shown(keys.SCORE)}"
        )
    return OutlierScore(source, float(below))


def _explainer(src: _Source) -> Explainer:
    key = keys.parameter(keys.EXPLAINER)
    raw = src.json(keys.EXPLAINER)
    fields = (
        keys.EXPLAINER_MODEL,
        keys.EXPLAINER_METHOD,
        keys.EXPLAINER_UNITS,
        keys.EXPLAINER_CONTRIBUTIONS,
        keys.EXPLAINER_BASE_VALUE,
    )
    outputs = raw.get(keys.EXPLAINER_OUTPUTS) if isinstance(raw, dict) else None
    if (
        not isinstance(raw, dict)
        or not all(isinstance(raw.get(f), str) and raw.get(f) for f in fields)
        or not isinstance(outputs, list)
        or not outputs
        or not all(isinstance(o, bool | int | float | str) for o in outputs)
    ):
        raise ContractError(
            f"{key} must be a JSON object with {', '.join(fields)} (text) and "
            f"{keys.EXPLAINER_OUTPUTS} (a non-empty list), got {src.shown(keys.EXPLAINER)}"
        )
    return Explainer(
        model=raw[keys.EXPLAINER_MODEL],
        method=raw[keys.EXPLAINER_METHOD],
        units=raw[keys.EXPLAINER_UNITS],
        outputs=tuple(outputs),
        contributions=raw[keys.EXPLAINER_CONTRIBUTIONS],
        base_value=raw[keys.EXPLAINER_BASE_VALUE],
    )
