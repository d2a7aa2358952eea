"""The contract's vocabulary: layouts, kinds, dtypes, output roles, and the typed parts of a
contract (a column, the output roles, an outlier detector's score rule)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, get_args

from serving_contract import keys

Layout = Literal["matrix", "columns", "tensors"]
Kind = Literal["binary", "multiclass", "regression", "outlier", "cluster", "other"]
Dtype = Literal["float32", "int64", "bool", "string"]
ClassLabel = bool | int | float | str

LAYOUTS: tuple[str, ...] = get_args(Layout)
KINDS: tuple[str, ...] = get_args(Kind)
DTYPES: tuple[str, ...] = get_args(Dtype)
ROLES = ("label", "probabilities", "scores", "value", "score", "distances")
CLASSIFIERS = ("binary", "multiclass")


class ContractError(ValueError):
    """A contract a client cannot read: the message names the key and what is wrong (callers
    put the model's name in front)."""


@dataclass(frozen=True)
class Column:
    """One input column and the dtype it is served as."""

    name: str
    dtype: Dtype

    def to_dict(self) -> dict[str, str]:
        return {keys.COLUMN_NAME: self.name, keys.COLUMN_DTYPE: self.dtype}


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

    def to_dict(self) -> dict[str, Any]:
        return {keys.SCORE_SOURCE: self.source, keys.SCORE_OUTLIER_BELOW: self.outlier_below}


@dataclass(frozen=True)
class Explainer:
    """``serving.explainer``: the model that explains this one (docs/explain.md). Its
    ``contributions`` output is rows x columns x outputs (the contract's ``columns``, in order;
    ``outputs`` says what each explains: a class label, or ``"prediction"``), its
    ``base_value`` output rows x outputs; contributions plus base value are the raw score."""

    model: str
    method: str  # tree_path_dependent | linear_interventional
    units: str  # log_odds | probability | raw
    outputs: tuple[ClassLabel, ...]
    contributions: str = "contributions"
    base_value: str = "base_value"

    def to_dict(self) -> dict[str, Any]:
        return {
            keys.EXPLAINER_MODEL: self.model,
            keys.EXPLAINER_METHOD: self.method,
            keys.EXPLAINER_UNITS: self.units,
            keys.EXPLAINER_OUTPUTS: list(self.outputs),
            keys.EXPLAINER_CONTRIBUTIONS: self.contributions,
            keys.EXPLAINER_BASE_VALUE: self.base_value,
        }


def names(text: str, key: str) -> tuple[str, ...]:
    """A list of names as a tag holds it: JSON (``["a", "b"]``) or comma-separated (``a,b``)."""
    text = text.strip()
    if not text.startswith("["):
        return tuple(v.strip() for v in text.split(",") if v.strip())
    raw = decode_json(key, text)
    if not isinstance(raw, list):
        raise ContractError(f"{key} must be a JSON list of names")
    return tuple(str(v) for v in raw)


def decode_json(key: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ContractError(f"{key} is not valid JSON ({exc.msg}): {text[:80]!r}") from exc
