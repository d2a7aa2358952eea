"""A version's reference statistics (config parameter ``drift.reference``, docs/drift.md §1), typed.

Parsed once per model version and checked against the version's spec: every model column, in
signature order, of the kind its served dtype implies (``string``/``bool`` categorical, else
numeric), and the prediction the model's kind implies. A reference that fails any check is not
half-used: drift is off for that version, with one warning in the log (``reference_of``), and
predictions are served as always.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

from gateway.catalog import ModelSpec

log = logging.getLogger("gateway")

FORMAT = 1
PREDICTION = "__prediction__"  # the ``feature`` label of the prediction (docs/drift.md §2)


def prediction_of(spec: ModelSpec) -> tuple[str, Literal["numeric", "categorical"]] | None:
    """The reference's ``prediction`` entry a model's kind implies: its name and kind (a
    clusterer's, like a label-only classifier's, is its predicted label), or None
    when there is none to compare (kind ``other``, legacy exports, and multi-target regressors,
    whose K values have no one distribution; their drift covers the inputs only)."""
    if spec.legacy:
        return None
    if spec.kind == "binary" and spec.roles.probabilities is not None:
        return "score", "numeric"  # the probability of classes[1]
    if spec.kind in ("binary", "multiclass"):
        # Decision-function scores have no scale shared across models or retrains: the
        # predicted label, over the classes, is what is compared.
        return "label", "categorical"
    if spec.kind == "regression":
        return ("value", "numeric") if spec.targets == 1 else None
    if spec.kind == "outlier":
        return "score", "numeric"  # the decision function, binned like a regression value
    if spec.kind == "cluster":
        return "label", "categorical"  # the cluster id, over the clusters
    return None


Category = str | bool | int | float


class ReferenceError(ValueError):
    """The reference cannot be used; the message says why (one line)."""


@dataclass(frozen=True)
class Binned:
    """One column's (or the prediction's) reference bins.

    Bin layout, shared with the counts: ``0 .. len(counts)-1`` are the reference's own bins (for a
    categorical, the categories then "other"), and one more, the last, is the null bin.
    """

    name: str
    kind: Literal["numeric", "categorical"]
    counts: tuple[int, ...]
    nulls: int
    edges: tuple[float, ...] = ()  # numeric
    categories: tuple[Category, ...] = ()  # categorical

    @property
    def bins(self) -> int:
        """Bins counted, the null bin included."""
        return len(self.counts) + 1

    @cached_property
    def expected(self) -> np.ndarray:
        """The reference's counts per bin, the null bin last (float64, for the statistics)."""
        return np.array([*self.counts, self.nulls], dtype=np.float64)

    @cached_property
    def edge_array(self) -> np.ndarray:
        return np.array(self.edges, dtype=np.float64)

    def labels(self) -> list[str]:
        """The metric's ``bin`` label per bin: the index, ``other`` or ``null``."""
        if self.kind == "numeric":
            return [*(str(i) for i in range(len(self.counts))), "null"]
        return [*(str(i) for i in range(len(self.categories))), "other", "null"]


@dataclass(frozen=True)
class Reference:
    rows: int
    source: str
    features: tuple[Binned, ...]  # the model's columns, in signature order
    prediction: Binned | None  # None when prediction_of(spec) is (kind "other", K targets)

    @property
    def binned(self) -> tuple[Binned, ...]:
        """Every counted distribution: the features, then the prediction."""
        return self.features if self.prediction is None else (*self.features, self.prediction)


def _counts(where: str, raw: Any, want: int) -> tuple[int, ...]:
    if not (
        isinstance(raw, list) and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in raw)
    ):
        raise ReferenceError(f"{where}: counts must be a list of whole numbers >= 0")
    if len(raw) != want:
        raise ReferenceError(f"{where}: {len(raw)} counts, expected {want}")
    return tuple(raw)


def _binned(where: str, raw: Any, kind: str) -> Binned:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ReferenceError(f"{where}: not an object with a name")
    if raw.get("kind") != kind:
        raise ReferenceError(f"{where} ({raw['name']!r}): kind {raw.get('kind')!r}, expected {kind!r}")
    nulls = raw.get("nulls", 0)
    if not isinstance(nulls, int) or isinstance(nulls, bool) or nulls < 0:
        raise ReferenceError(f"{where} ({raw['name']!r}): nulls must be a whole number >= 0")
    if kind == "numeric":
        edges = raw.get("edges")
        if not (
            isinstance(edges, list)
            and all(isinstance(e, int | float) and not isinstance(e, bool) for e in edges)
        ):
            raise ReferenceError(f"{where} ({raw['name']!r}): edges must be a list of numbers")
        if not all(math.isfinite(e) for e in edges) or any(b <= a for a, b in itertools.pairwise(edges)):
            raise ReferenceError(f"{where} ({raw['name']!r}): edges must be finite and strictly ascending")
        counts = _counts(f"{where} ({raw['name']!r})", raw.get("counts"), len(edges) + 1)
        return Binned(raw["name"], "numeric", counts, nulls, edges=tuple(float(e) for e in edges))
    categories = raw.get("categories")
    if not (
        isinstance(categories, list) and all(isinstance(c, str | bool | int | float) for c in categories)
    ):
        raise ReferenceError(f"{where} ({raw['name']!r}): categories must be a list of values")
    if len(set(categories)) != len(categories):
        raise ReferenceError(f"{where} ({raw['name']!r}): categories has duplicates")
    counts = _counts(f"{where} ({raw['name']!r})", raw.get("counts"), len(categories) + 1)
    return Binned(raw["name"], "categorical", counts, nulls, categories=tuple(categories))


def parse_reference(text: str, spec: ModelSpec) -> Reference:
    """The reference JSON of ``spec``'s version, checked against the spec; ReferenceError if unusable."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReferenceError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise ReferenceError("not a JSON object")
    if raw.get("format") != FORMAT:
        raise ReferenceError(f"format {raw.get('format')!r}, this gateway reads format {FORMAT}")
    features = raw.get("features")
    if not isinstance(features, list):
        raise ReferenceError("features must be a list")
    names = [f.get("name") if isinstance(f, dict) else None for f in features]
    if tuple(names) != spec.feature_names:
        raise ReferenceError(f"features {names} are not the model's columns {list(spec.feature_names)}")
    parsed = tuple(
        _binned(
            f"features[{i}]", f, "categorical" if spec.dtype(f["name"]) in ("string", "bool") else "numeric"
        )
        for i, f in enumerate(features)
    )
    prediction = None
    expected = prediction_of(spec)
    if expected is not None:
        name, kind = expected
        prediction = _binned("prediction", raw.get("prediction"), kind)
        if prediction.name != name:
            raise ReferenceError(f"prediction is {prediction.name!r}; a {spec.kind} model's is {name!r}")
    rows = raw.get("rows", 0)
    return Reference(
        rows=rows if isinstance(rows, int) else 0,
        source=str(raw.get("source", "")),
        features=parsed,
        prediction=prediction,
    )


def reference_of(spec: ModelSpec) -> Reference | None:
    """``spec``'s reference, or None (drift off for the version): none was exported, or it is
    unusable, which is logged once per spec (the caller caches the answer per version)."""
    if spec.drift_reference is None:
        return None
    try:
        return parse_reference(spec.drift_reference, spec)
    except ReferenceError as exc:
        log.warning(
            "drift is off for %s version %s: its drift.reference is unusable: %s",
            spec.name,
            spec.version,
            exc,
        )
        return None
