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
import re
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from gateway.catalog import ModelSpec
from gateway.errors import BadRequest
from gateway.observe import Observation
from gateway.responses import Prediction
from gateway.stats.reference import Binned, Reference

SLOT_S: Final = 60
SLOTS: Final = 24 * 60  # a day of one-minute slots
MAX_WINDOW_S: Final = SLOT_S * SLOTS
_WINDOW = re.compile(r"(\d{1,5})([mhd])")
_UNIT_S: Final = {"m": 60, "h": 3600, "d": 86400}


def window_seconds(text: str) -> int:
    """``5m``, ``1h``, ``24h``, ``1d`` as seconds; BadRequest (400) for anything else."""
    match = _WINDOW.fullmatch(text.strip())
    seconds = int(match[1]) * _UNIT_S[match[2]] if match else 0
    if not SLOT_S <= seconds <= MAX_WINDOW_S:
        raise BadRequest(
            f"window {text!r} is not a duration from 1m to 24h: a number and m, h or d (5m, 1h, 24h)"
        )
    return seconds


def numeric_bins(binned: Binned, values: np.ndarray) -> np.ndarray:
    """Bin index per value: the reference's numeric bins, NaN in the null bin (the last). The
    plain form of what ``Binner`` does for every numeric column of a batch at once; the payload
    log's report (gateway/payload_log/report.py) bins logged rows with it."""
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
    """Counts one served batch of a model version into the flat bin vector of its reference.

    Every numeric distribution (the numeric columns and a numeric prediction) is binned at once:
    the batch's ``[N, k]`` values against a ``[k, 9]`` matrix of edges (padded with +inf), a bin
    being the number of edges <= the value, which is ``searchsorted(edges, x, side="right")``.
    Per-column numpy calls cost ~1 µs each whatever the batch size, and a batch is often one row.
    """

    def __init__(self, spec: ModelSpec, reference: Reference) -> None:
        self.reference = reference
        self.spec = spec
        binned = reference.binned
        sizes = [b.bins for b in binned]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.intp)
        self.size = int(sum(sizes))
        numeric = [i for i, b in enumerate(binned) if b.kind == "numeric"]
        self._numeric_names = [binned[i].name for i in numeric if i < len(reference.features)]
        self._score = reference.prediction is not None and reference.prediction.kind == "numeric"
        width = max([len(binned[i].edges) for i in numeric] or [0])
        self._edges = np.full((1, len(numeric), max(width, 1)), np.inf)
        for j, i in enumerate(numeric):
            self._edges[0, j, : len(binned[i].edges)] = binned[i].edges
        self._numeric_offsets = self.offsets[numeric]
        self._null = self.offsets[numeric] + [binned[i].bins - 1 for i in numeric]
        self._top = self._null - 1  # the last non-null bin (+inf is there, not in the padding)
        if spec.layout == "matrix":
            self._matrix_idx = [spec.feature_names.index(n) for n in self._numeric_names]
        self._columns: list[tuple[int, Column]] = []
        for i, b in enumerate(reference.features):
            if b.kind == "categorical":
                self._columns.append((int(self.offsets[i]), self._categorical(spec, b)))
        if reference.prediction is not None and reference.prediction.kind == "categorical":
            self._columns.append((int(self.offsets[-1]), self._label(reference.prediction)))
        # binary (with probabilities) and outlier compare their score, a regressor its value
        self._read_score = (lambda p: p.value) if spec.kind == "regression" else (lambda p: p.score)

    def count(self, observation: Observation, keep: np.ndarray | None = None) -> np.ndarray:
        """Counts per flat bin of ``observation``'s rows (only the ``keep`` indices, when given)."""
        parts = [offset + column(observation, keep) for offset, column in self._columns]
        if len(self._numeric_offsets):
            parts.append(self._numeric(observation, keep).reshape(-1))
        return np.bincount(np.concatenate(parts) if len(parts) > 1 else parts[0], minlength=self.size)

    def _numeric(self, observation: Observation, keep: np.ndarray | None) -> np.ndarray:
        """Flat bin per (row, numeric distribution), as an ``[N, k]`` array."""
        if self.spec.layout == "matrix":
            x = observation.inputs[self.spec.input_name][:, self._matrix_idx]
        else:
            x = np.hstack([observation.inputs[n] for n in self._numeric_names])
        if self._score:
            read = self._read_score
            rows = observation.predictions
            scores = np.fromiter(
                (np.nan if (v := read(p)) is None else v for p in rows), np.float64, len(rows)
            )
            x = np.hstack([x, scores[:, None]]) if len(self._numeric_names) else scores[:, None]
        if keep is not None:
            x = x[keep]
        bins = np.minimum((x[:, :, None] >= self._edges).sum(axis=2) + self._numeric_offsets, self._top)
        return np.where(np.isnan(x), self._null, bins)

    @staticmethod
    def _categorical(spec: ModelSpec, binned: Binned) -> Column:
        name = binned.name

        def values(observation: Observation, keep: np.ndarray | None) -> np.ndarray:
            column = observation.column(name)
            return column if keep is None else column[keep]

        if spec.dtype(name) == "bool":
            return lambda o, keep: _bool_bins(binned, values(o, keep))
        lookup, other = categorical_lookup(binned, string=True), len(binned.categories)
        return lambda o, keep: categorical_bins(lookup, other, values(o, keep))

    @staticmethod
    def _label(binned: Binned) -> Column:
        """Multiclass, binary without probabilities, and cluster: the predicted label, over
        ``serving.classes`` (a clusterer's: its cluster ids)."""
        lookup, other = categorical_lookup(binned, string=False), len(binned.categories)

        def labels(observation: Observation, keep: np.ndarray | None) -> np.ndarray:
            rows = observation.predictions
            chosen: Sequence[Prediction] = rows if keep is None else [rows[i] for i in keep]
            return categorical_bins(lookup, other, [p.label for p in chosen])

        return labels


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
