"""The drift observer: counts what each model version serves, and reports windows against the reference.

``DriftMonitor.observe`` runs after each served batch (gateway/observe.py), on the event loop:
it keeps a sampled share of the rows (``GATEWAY_DRIFT_SAMPLE``; one vectorized draw per batch),
bins them (gateway/stats/counts.py) and adds the counts to the version's one-minute slots. Per
(model, version) the reference is parsed once, on the version's first batch; a version without
a usable one is remembered as off (and warned about once, gateway/stats/reference.py).

Counts are kept under the version whose spec assembled the batch (its reference describes those
columns). Reports and the Prometheus collector read them under a lock, so a scrape from another
thread never sees half a batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gateway.catalog import ModelSpec
from gateway.observe import Observation
from gateway.stats.counts import Binner, Slots, window_seconds
from gateway.stats.measures import Drift, Thresholds, Verdict, drift_of, worst
from gateway.stats.reference import Reference, reference_of


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
        self._rng = np.random.default_rng(seed)
        self._versions: dict[tuple[str, str], VersionCounts] = {}
        self._lock = threading.Lock()

    def observe(self, observation: Observation) -> None:
        """Count a sampled share of ``observation``'s rows (cheap: a few numpy calls per column)."""
        spec = observation.spec
        counts = self._versions.get((spec.name, spec.version))
        if counts is None:
            counts = self._open(spec)
        if counts.binner is None or counts.slots is None:
            return
        n = observation.rows
        keep = None
        if self.sample < 1.0:
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
        with self._lock:
            return list(self._versions.values())

    def totals(self, counts: VersionCounts) -> tuple[np.ndarray, int]:
        """The version's running totals per bin, and rows (the Prometheus counters)."""
        assert counts.slots is not None
        with self._lock:
            return counts.slots.total.copy(), counts.slots.total_rows

    def version_drift(self, counts: VersionCounts, seconds: int) -> VersionDrift:
        """One version's drift over the last ``seconds``."""
        if counts.binner is None or counts.slots is None or counts.reference is None:
            return VersionDrift(counts.version, 0, "off", reason=counts.reason)
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
        if (spec.name, spec.version) not in self._versions:
            self._open(spec)
        mine = [c for c in self.versions() if c.model == spec.name]
        mine.sort(key=lambda c: (len(c.version), c.version), reverse=True)  # numeric order
        drifts = tuple(self.version_drift(c, seconds) for c in mine)
        # older versions only while they still have rows in the window
        drifts = tuple(d for d in drifts if d.rows or d.version == spec.version)
        return DriftReport(spec.name, window, seconds, self.thresholds, self.sample, drifts)


def off_report(spec: ModelSpec, window: str, seconds: int, reason: str) -> DriftReport:
    """The report of a gateway that counts nothing (``GATEWAY_DRIFT_SAMPLE=0``)."""
    return DriftReport(
        spec.name, window, seconds, Thresholds(), 0.0, (VersionDrift(spec.version, 0, "off", reason=reason),)
    )


def _insufficient(drift: Drift) -> Drift:
    return replace(drift, verdict="insufficient")
