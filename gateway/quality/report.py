"""The quality report: per answering version, labeled rows and metrics; and the label counts.

One shape for the live report (``GET``-able from the gateway, windowed by label arrival) and
the offline one (``gateway quality report --json``, over the payload log's time span), so the
release gate reads either the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.catalog import Kind
from gateway.quality.feedback import OUTCOMES, Outcome
from gateway.quality.metrics import ReliabilityBin

Role = Literal["champion", "challenger"]


@dataclass(frozen=True)
class VersionQuality:
    model: str  # the model that answered (a challenger may be another model)
    version: str
    role: Role
    rows: int  # labeled rows in the window
    metrics: dict[str, float | None]  # None: undefined on these rows (one class only, no rows)
    reliability: tuple[ReliabilityBin, ...] = ()  # binary with probabilities: the calibration plot

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "role": self.role,
            "rows": self.rows,
            "metrics": dict(self.metrics),
        }


@dataclass(frozen=True)
class QualityReport:
    model: str
    kind: Kind
    window: str  # live: the asked window ("1h"); offline: the log's span, ISO start/end
    window_seconds: int
    versions: tuple[VersionQuality, ...]
    feedback: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "kind": self.kind,
            "window": self.window,
            "window_seconds": self.window_seconds,
            "versions": [v.to_dict() for v in self.versions],
            "feedback": {o: int(self.feedback.get(o, 0)) for o in OUTCOMES},
        }
