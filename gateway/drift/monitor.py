"""The drift observer: counts what each model version serves, and reports windows against the reference.

``DriftMonitor.observe`` runs after each served batch (gateway/observe.py), on the event loop,
and only keeps the batch: counting waits until ``FLUSH_ROWS`` rows are waiting or ``FLUSH_S``
has passed, then every waiting batch of a (model, version) and minute is counted at once. It
keeps a sampled share of the rows (``GATEWAY_DRIFT_SAMPLE``; one vectorized draw per count),
bins them (gateway/stats/counts.py) and adds the counts to the version's one-minute slots.
Counting cost ~20 µs a time whatever the rows (a dozen numpy calls on tiny arrays), and a
gateway's batches are often one row: counted one by one, that was a tenth of a one-client
request's CPU (``make bench`` (c)); counted together it is ~1 µs a row. Per (model, version) the
reference is parsed once, on the version's first batch; a version without a usable one is
remembered as off (and warned about once, gateway/stats/reference.py).

Nothing reads counts that are still waiting: the report and the Prometheus collector count what
waits first (``flush``), so they see every batch served before they were asked, as when each
was counted at once. Counts are kept under the version whose spec assembled the batch (its
reference describes those columns), in the minute the batch was served. Reports and the
collector read them under a lock, so a scrape from another thread never sees half a batch.
Without a running event loop (a script, a test) each batch is counted at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from gateway.catalog import ModelSpec
from gateway.observe import Observation
from gateway.stats.counts import SLOT_S, Binner, Slots, window_seconds
from gateway.stats.measures import Drift, Thresholds, Verdict, drift_of, worst
from gateway.stats.reference import Reference, reference_of

FLUSH_ROWS: Final = 256  # waiting rows that are counted at once
FLUSH_S: Final = 0.1  # the longest a served batch waits to be counted


@dataclass
class VersionCounts:
    """One model version's counts (None binner: drift off for it, ``reason`` says why)."""

    model: str
    version: str
    reference: Reference | None
    binner: Binner | None
    slots: Slots | None
    reason: str = ""


@dataclass(frozen=True)
class VersionDrift:
    version: str
    rows: int
    verdict: Verdict
    features: tuple[Drift, ...] = ()
    prediction: Drift | None = None
    reason: str = ""  # why drift is off

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "drift": "off" if self.verdict == "off" else "on",
            "rows": self.rows,
            "verdict": self.verdict,
            "features": [f.to_dict() for f in self.features],
            "prediction": self.prediction.to_dict() if self.prediction else None,
        }
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class DriftReport:
    model: str
    window: str
    window_seconds: int
    thresholds: Thresholds
    sample: float
    versions: tuple[VersionDrift, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> Verdict:
        return worst([v.verdict for v in self.versions])

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "window": self.window,
            "window_seconds": self.window_seconds,
            "verdict": self.verdict,
            "sample": self.sample,
            "thresholds": {
                "psi_warn": self.thresholds.psi_warn,
                "psi_alert": self.thresholds.psi_alert,
                "min_rows": self.thresholds.min_rows,
            },
            "versions": [v.to_dict() for v in self.versions],
        }


class DriftMonitor:
    """The Observer that counts, and the reader of its counts (endpoint, metrics)."""

    def __init__(
        self,
        sample: float = 1.0,
        thresholds: Thresholds | None = None,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
    ) -> None:
        self.sample = sample
        self.thresholds = thresholds or Thresholds()
        self.clock = clock
        # Only a sampling monitor draws (numpy.random is ~2 MiB a gateway need not load).
        self._rng = np.random.default_rng(seed) if sample < 1.0 else None
        self._versions: dict[tuple[str, str], VersionCounts] = {}
        self._lock = threading.Lock()
        self._waiting: list[Observation] = []  # served, not counted yet
        self._waiting_rows = 0
        self._waiting_lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one count at a time: a reader waits for it
        self._flush_due = False

    def observe(self, observation: Observation) -> None:
        """Keep ``observation`` to be counted with the next ones (see the module docstring)."""
        with self._waiting_lock:
            self._waiting.append(observation)
            self._waiting_rows += observation.rows
            rows = self._waiting_rows
        if rows >= FLUSH_ROWS:
            self.flush()
            return
        if self._flush_due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to count later on: count now
            self.flush()
            return
        self._flush_due = True
        loop.call_later(FLUSH_S, self._timed_flush)

    def _timed_flush(self) -> None:
        self._flush_due = False
        self.flush()

    def flush(self) -> None:
        """Count every waiting batch now: per (model, version) and minute, all at once."""
        with self._flush_lock:
            with self._waiting_lock:
                waiting, self._waiting, self._waiting_rows = self._waiting, [], 0
            groups: dict[tuple[str, str, int], list[Observation]] = {}
            for o in waiting:
                groups.setdefault((o.spec.name, o.spec.version, int(o.at // SLOT_S)), []).append(o)
            for group in groups.values():
                self._count(group[0] if len(group) == 1 else _joined(group))

    def _count(self, observation: Observation) -> None:
        """Count a sampled share of ``observation``'s rows (a few numpy calls per column)."""
        spec = observation.spec
        counts = self._versions.get((spec.name, spec.version))
        if counts is None:
            counts = self._open(spec)
        if counts.binner is None or counts.slots is None:
            return
        n = observation.rows
        keep = None
        if self._rng is not None:
            keep = np.flatnonzero(self._rng.random(n) < self.sample)
            n = len(keep)
            if n == 0:
                return
        binned = counts.binner.count(observation, keep)
        with self._lock:
            counts.slots.add(observation.at, binned, n)

    def _open(self, spec: ModelSpec) -> VersionCounts:
        reference = reference_of(spec)  # warns once when unusable: the answer is kept below
        if reference is None:
            reason = (
                "the version's export has no drift.reference"
                if spec.drift_reference is None
                else "its drift.reference is unusable (see the gateway's log)"
            )
            counts = VersionCounts(spec.name, spec.version, None, None, None, reason)
        else:
            binner = Binner(spec, reference)
            counts = VersionCounts(spec.name, spec.version, reference, binner, Slots(binner.size))
        with self._lock:
            return self._versions.setdefault((spec.name, spec.version), counts)

    def versions(self) -> list[VersionCounts]:
        self.flush()
        with self._lock:
            return list(self._versions.values())

    def totals(self, counts: VersionCounts) -> tuple[np.ndarray, int]:
        """The version's running totals per bin, and rows (the Prometheus counters)."""
        assert counts.slots is not None
        self.flush()
        with self._lock:
            return counts.slots.total.copy(), counts.slots.total_rows

    def version_drift(self, counts: VersionCounts, seconds: int) -> VersionDrift:
        """One version's drift over the last ``seconds``."""
        if counts.binner is None or counts.slots is None or counts.reference is None:
            return VersionDrift(counts.version, 0, "off", reason=counts.reason)
        self.flush()
        with self._lock:
            window, rows = counts.slots.window(self.clock(), seconds)
        drifts = [
            drift_of(binned, window[offset : offset + binned.bins], self.thresholds)
            for binned, offset in zip(counts.reference.binned, counts.binner.offsets, strict=True)
        ]
        if rows < self.thresholds.min_rows:  # whatever PSI says on so few rows
            drifts = [_insufficient(d) for d in drifts]
        has_prediction = counts.reference.prediction is not None
        features = tuple(drifts[:-1] if has_prediction else drifts)
        prediction = drifts[-1] if has_prediction else None
        return VersionDrift(counts.version, rows, worst([d.verdict for d in drifts]), features, prediction)

    def report(self, spec: ModelSpec, window: str) -> DriftReport:
        """``spec``'s model over ``window``: each version with rows in it (newest first), and the
        spec's own version even before its first batch."""
        seconds = window_seconds(window)
        self.flush()
        if (spec.name, spec.version) not in self._versions:
            self._open(spec)
        mine = [c for c in self.versions() if c.model == spec.name]
        mine.sort(key=lambda c: (len(c.version), c.version), reverse=True)  # numeric order
        drifts = tuple(self.version_drift(c, seconds) for c in mine)
        # older versions only while they still have rows in the window
        drifts = tuple(d for d in drifts if d.rows or d.version == spec.version)
        return DriftReport(spec.name, window, seconds, self.thresholds, self.sample, drifts)


def _joined(group: Sequence[Observation]) -> Observation:
    """Batches of one (model, version) and minute as one, rows in order: what the binner reads
    (the inputs as sent, the predictions)."""
    first = group[0]
    inputs = {name: np.concatenate([o.inputs[name] for o in group]) for name in first.inputs}
    predictions = [p for o in group for p in o.predictions]
    return Observation(first.spec, first.version, inputs, predictions, (), first.at)


def off_report(spec: ModelSpec, window: str, seconds: int, reason: str) -> DriftReport:
    """The report of a gateway that counts nothing (``GATEWAY_DRIFT_SAMPLE=0``)."""
    return DriftReport(
        spec.name, window, seconds, Thresholds(), 0.0, (VersionDrift(spec.version, 0, "off", reason=reason),)
    )


def _insufficient(drift: Drift) -> Drift:
    return replace(drift, verdict="insufficient")
