"""A champion/challenger pair's comparison counts, kept in one-minute slots, and their report.

Everything a report needs sums over slots, so one float64 vector per slot holds it (the drift
monitor's ring, gateway/stats/counts.py, keeps int64 counts; a sum of differences needs
floats): row counts, agreement, the difference's sum and a log-spaced histogram (its p99 is
read from the histogram, to the bin: within 12 % of the value), both sides' prediction counts
in the PSI bins, and a histogram of the challenger's call latency. The largest difference
does not sum; it is kept per slot beside the vector (and caps the p99 read from the bins).

Across replicas: each process's ``PairCounts`` is a buffer. The evidence writer ``drain``s it
every second into the shared store, where the slots of every replica add up
(gateway/evidence/); a report ``load``s the window's slots from there into a fresh
``PairCounts`` and reads it, so every replica answers the same report.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from gateway.evidence.store import SlotCounts
from gateway.shadow.compare import Compared
from gateway.stats.measures import psi
from gateway.stats.reference import Binned

SLOT_S: Final = 60
SLOTS: Final = 24 * 60
# |difference| histogram: [0, 1e-6), then 240 log-spaced bins to 1e6 (each 12 % wider than the
# last), then [1e6, inf)
DIFF_EDGES: Final = np.logspace(-6, 6, 241)
# challenger latency in ms: [0, 0.1), 50 log-spaced bins to 10 s, then past it
LATENCY_EDGES_MS: Final = np.logspace(-1, 4, 51)

# fixed fields at the start of each slot's vector
COMPARED, LABELED, AGREE, ERRORS, DROPPED, MIRRORED, DIFFERED, BEYOND, DIFF_SUM = range(9)
_FIXED: Final = 9


@dataclass(frozen=True)
class Pair:
    """Who is compared: the champion's model and version, the challenger's."""

    model: str
    version: str
    challenger_model: str
    challenger_version: str

    @property
    def name(self) -> str:
        """The shared counts' name: per champion version and challenger model (a challenger
        version learnt from Triton's answer does not start them afresh)."""
        return f"shadow:{self.model}|{self.version}|{self.challenger_model}"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def of_json(cls, text: str) -> Pair:
        return cls(**json.loads(text))


class PairCounts:
    """One pair's counts per slot for the last day (see the module doc)."""

    def __init__(self, pair: Pair, bins: Binned | None, tolerance: float) -> None:
        self.pair, self.bins, self.tolerance = pair, bins, tolerance
        self._k = bins.bins if bins is not None else 0
        self._diff = _FIXED
        self._champion = self._diff + len(DIFF_EDGES) + 1
        self._challenger = self._champion + self._k
        self._latency = self._challenger + self._k
        size = self._latency + len(LATENCY_EDGES_MS) + 1
        self._counts = np.zeros((SLOTS, size), dtype=np.float64)
        self._max = np.zeros(SLOTS, dtype=np.float64)
        self._ids = np.full(SLOTS, -1, dtype=np.int64)
        self._dirty: set[int] = set()
        self.last_error: str | None = None

    def _slot(self, at: float) -> int | None:
        slot = int(at // SLOT_S)
        i = slot % SLOTS
        if self._ids[i] != slot:
            if self._ids[i] > slot:
                return None  # older than the ring
            self._counts[i] = 0
            self._max[i] = 0
            self._ids[i] = slot
        self._dirty.add(i)
        return i

    def drain(self) -> list[SlotCounts]:
        """The slots counted since the last drain, as deltas for the shared store; zeroed here."""
        out = []
        for i in sorted(self._dirty):
            row = self._counts[i]
            fields = {int(f): float(row[f]) for f in np.flatnonzero(row)}
            if fields or self._max[i]:
                out.append(SlotCounts(self.pair.name, int(self._ids[i]), fields, float(self._max[i])))
            row[:] = 0
            self._max[i] = 0
        self._dirty.clear()
        return out

    def load(self, slot: int, fields: dict[int, float], maximum: float) -> None:
        """Add one slot's counts read from the shared store (fields past this pair's vector,
        from a replica with other PSI bins, are ignored)."""
        i = slot % SLOTS
        self._ids[i] = slot
        size = self._counts.shape[1]
        for f, value in fields.items():
            if 0 <= f < size:
                self._counts[i, f] += value
        self._max[i] = max(self._max[i], maximum)

    def add(self, at: float, rows: int, compared: Compared, latency_s: float) -> None:
        """``rows`` rows both answered, compared as ``compared``; the challenger took ``latency_s``."""
        i = self._slot(at)
        if i is None:
            return
        row = self._counts[i]
        row[COMPARED] += rows
        row[MIRRORED] += rows
        if compared.agree is not None:
            row[LABELED] += len(compared.agree)
            row[AGREE] += int(compared.agree.sum())
        if compared.difference is not None and len(compared.difference):
            d = compared.difference
            row[DIFFERED] += len(d)
            row[BEYOND] += int((d > self.tolerance).sum())
            row[DIFF_SUM] += float(d.sum())
            row[self._diff : self._champion] += np.bincount(
                np.searchsorted(DIFF_EDGES, d, side="right"), minlength=len(DIFF_EDGES) + 1
            )
            self._max[i] = max(self._max[i], float(d.max()))
        if compared.champion_bins is not None and compared.challenger_bins is not None:
            row[self._champion : self._challenger] += np.bincount(compared.champion_bins, minlength=self._k)
            row[self._challenger : self._latency] += np.bincount(compared.challenger_bins, minlength=self._k)
        latency_bin = int(np.searchsorted(LATENCY_EDGES_MS, latency_s * 1000, side="right"))
        row[self._latency + latency_bin] += 1

    def add_rows(self, at: float, field: int, rows: int, error: str | None = None) -> None:
        """Rows that were not compared: ``ERRORS`` (the challenger failed) or ``DROPPED``."""
        i = self._slot(at)
        if i is None:
            return
        self._counts[i, field] += rows
        if field == ERRORS:
            self._counts[i, MIRRORED] += rows
            self.last_error = error

    def report(self, now: float, seconds: int) -> dict[str, Any]:
        last = int(now // SLOT_S)
        live = (self._ids > last - seconds // SLOT_S) & (self._ids <= last)
        w = self._counts[live].sum(axis=0)
        compared, errors = int(w[COMPARED]), int(w[ERRORS])
        body: dict[str, Any] = {
            "champion": {"model": self.pair.model, "version": self.pair.version},
            "challenger": {"model": self.pair.challenger_model, "version": self.pair.challenger_version},
            "tolerance": self.tolerance,
            "rows": compared,
            "mirrored_rows": int(w[MIRRORED]),
            "dropped_rows": int(w[DROPPED]),
            "error_rows": errors,
            "error_rate": errors / (compared + errors) if compared + errors else None,
            "agreement": w[AGREE] / w[LABELED] if w[LABELED] else None,
            "difference": None,
            "score_psi": None,
            "challenger_latency_ms": _latency(w[self._latency :]),
            "last_error": self.last_error,
        }
        if w[DIFFERED]:
            largest = float(self._max[live].max())
            p99 = _quantile(w[self._diff : self._champion], 0.99, DIFF_EDGES)
            body["difference"] = {
                "mean": w[DIFF_SUM] / w[DIFFERED],
                "p99": min(p99, largest) if p99 is not None else None,
                "max": largest,
                "beyond_tolerance": w[BEYOND] / w[DIFFERED],
            }
        champion, challenger = w[self._champion : self._challenger], w[self._challenger : self._latency]
        if self._k and champion.sum() and challenger.sum():
            body["score_psi"] = psi(champion, challenger)
        return body


def _quantile(histogram: np.ndarray, q: float, edges: np.ndarray) -> float | None:
    """The upper edge of the bin where the ``q`` quantile falls (bin 0 is below ``edges[0]``)."""
    total = histogram.sum()
    if not total:
        return None
    i = int(np.searchsorted(np.cumsum(histogram), q * total))
    return float(edges[min(i, len(edges) - 1)])


def _latency(histogram: np.ndarray) -> dict[str, float | None] | None:
    if not histogram.sum():
        return None
    return {
        "p50": _quantile(histogram, 0.5, LATENCY_EDGES_MS),
        "p99": _quantile(histogram, 0.99, LATENCY_EDGES_MS),
    }
