"""Binning a served batch into its reference's bins, and the time slots the counts are kept in.

**Bins.** Every counted distribution (each model column, then the prediction) gets its
reference's bins plus a null bin, laid end to end in one flat vector (``Binner.offsets``), so a
batch is counted with one ``numpy.bincount``: each value becomes ``offset + bin``. Numeric:
``searchsorted(edges, x, side="right")``, NaN to the null bin (docs/drift.md §1). Categorical:
one dict lookup per value (strings have no vectorized hash in numpy; a bool column is two
``where``\\ s), unknown values to "other", ``None`` and, in a string column, ``""`` to null.

**Windows.** Counts go into fixed one-minute slots (``SLOT_S``), 1,440 of them kept in a ring
(24 h). A window of ``k`` minutes is the sum of the last ``k`` slots, the current (partial) one
included, so ``5m`` covers between 4 and 5 minutes of traffic and ``24h`` the whole ring. A
running total beside the ring never forgets (the Prometheus counters).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from gateway.catalog import ModelSpec
from gateway.drift.reference import Binned, Reference
from gateway.observe import Observation
from gateway.responses import Prediction

SLOT_S: Final = 60
SLOTS: Final = 24 * 60  # a day of one-minute slots


def numeric_bins(binned: Binned, values: np.ndarray) -> np.ndarray:
    """Bin index per value: the reference's numeric bins, NaN in the null bin (the last)."""
    x = values.astype(np.float64, copy=False)
    bins = np.searchsorted(binned.edge_array, x, side="right")
    nulls = np.isnan(x)
    if nulls.any():
        bins[nulls] = binned.bins - 1
    return bins


def categorical_lookup(binned: Binned, string: bool) -> dict[object, int]:
    """Value -> bin for a categorical: its categories, ``None`` (and ``""`` for a string) null."""
    lookup: dict[object, int] = {c: i for i, c in enumerate(binned.categories)}
    lookup[None] = binned.bins - 1
    if string:
        lookup[""] = binned.bins - 1
    return lookup


def categorical_bins(
    lookup: dict[object, int], other: int, values: Sequence[object] | np.ndarray
) -> np.ndarray:
    """Bin index per value through ``lookup``; values not in it go to ``other``."""
    return np.fromiter(map(lookup.get, values, itertools.repeat(other)), dtype=np.intp, count=len(values))


def _bool_bins(binned: Binned, values: np.ndarray) -> np.ndarray:
    other = len(binned.categories)
    where = {c: i for i, c in enumerate(binned.categories) if isinstance(c, bool)}
    return np.where(values.astype(bool), where.get(True, other), where.get(False, other))


Column = Callable[[Observation, np.ndarray | None], np.ndarray]


class Binner:
    """Counts one served batch of a model version into the flat bin vector of its reference."""

    def __init__(self, spec: ModelSpec, reference: Reference) -> None:
        self.reference = reference
        sizes = [b.bins for b in reference.binned]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.intp)
        self.size = int(sum(sizes))
        self._columns: list[Column] = [self._feature(spec, b) for b in reference.features]
        if reference.prediction is not None:
            self._columns.append(self._prediction(spec, reference.prediction))

    def count(self, observation: Observation, keep: np.ndarray | None = None) -> np.ndarray:
        """Counts per flat bin of ``observation``'s rows (only the ``keep`` indices, when given)."""
        parts = [
            offset + column(observation, keep)
            for offset, column in zip(self.offsets, self._columns, strict=True)
        ]
        return np.bincount(np.concatenate(parts), minlength=self.size)

    def _feature(self, spec: ModelSpec, binned: Binned) -> Column:
        name = binned.name
        dtype = spec.dtype(name)

        def values(observation: Observation, keep: np.ndarray | None) -> np.ndarray:
            column = observation.column(name)
            return column if keep is None else column[keep]

        if binned.kind == "numeric":
            return lambda o, keep: numeric_bins(binned, values(o, keep))
        if dtype == "bool":
            return lambda o, keep: _bool_bins(binned, values(o, keep))
        lookup, other = categorical_lookup(binned, string=True), len(binned.categories)
        return lambda o, keep: categorical_bins(lookup, other, values(o, keep))

    @staticmethod
    def _prediction(spec: ModelSpec, binned: Binned) -> Column:
        def chosen(observation: Observation, keep: np.ndarray | None) -> Sequence[Prediction]:
            rows = observation.predictions
            return rows if keep is None else [rows[i] for i in keep]

        if binned.kind == "categorical":  # multiclass: the label, over serving.classes
            lookup, other = categorical_lookup(binned, string=False), len(binned.categories)
            return lambda o, keep: categorical_bins(lookup, other, [p.label for p in chosen(o, keep)])
        read: Callable[[Prediction], float | None] = (
            (lambda p: p.score) if spec.kind == "binary" else (lambda p: p.value)
        )

        def numeric(observation: Observation, keep: np.ndarray | None) -> np.ndarray:
            rows = chosen(observation, keep)
            x = np.fromiter(
                (v if (v := read(p)) is not None else np.nan for p in rows), np.float64, len(rows)
            )
            return numeric_bins(binned, x)

        return numeric


class Slots:
    """Counts per one-minute slot for the last day, and a running total (see the module doc)."""

    def __init__(self, size: int, slot_s: int = SLOT_S, keep: int = SLOTS) -> None:
        self.slot_s, self.keep = slot_s, keep
        self._counts = np.zeros((keep, size), dtype=np.int64)
        self._rows = np.zeros(keep, dtype=np.int64)
        self._ids = np.full(keep, -1, dtype=np.int64)  # the absolute slot each ring entry holds
        self.total = np.zeros(size, dtype=np.int64)
        self.total_rows = 0

    def add(self, at: float, counts: np.ndarray, rows: int) -> None:
        """Add a batch counted at ``at`` (epoch seconds)."""
        self.total += counts
        self.total_rows += rows
        slot = int(at // self.slot_s)
        i = slot % self.keep
        if self._ids[i] != slot:
            if self._ids[i] > slot:  # a batch older than the ring: in the totals only
                return
            self._counts[i] = 0
            self._rows[i] = 0
            self._ids[i] = slot
        self._counts[i] += counts
        self._rows[i] += rows

    def window(self, now: float, seconds: int) -> tuple[np.ndarray, int]:
        """Counts per bin and rows of the last ``seconds // slot_s`` slots up to ``now``'s."""
        last = int(now // self.slot_s)
        live = (self._ids > last - seconds // self.slot_s) & (self._ids <= last)
        return self._counts[live].sum(axis=0), int(self._rows[live].sum())
