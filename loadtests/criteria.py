"""Promotion criteria: what live evidence a challenger must show before it is promoted.

They sit in an SLA file's ``promotion:`` section, beside the latency ``endpoints`` (or alone, in
a criteria-only file such as ``loadtests/sla/promotion.yaml``)::

    promotion:
      model: fraud-detector      # optional: default the command's --model
      window: 1h                 # the gateway's evidence window (s, m, h, d)
      shadow:                    # from GET /v1/models/{model}/shadow
        min_rows: 1000           # rows both versions answered
        min_agreement: 0.98      # share of rows with the same label
        max_error_rate: 0.01     # the challenger's errors on mirrored rows
        max_score_psi: 0.1
        max_p99_difference: 0.05 # |champion score - challenger score|, p99
      quality:                   # from GET /v1/models/{model}/quality (labelled feedback)
        min_labels: 200          # labelled rows each version needs
        max_worse: {auc: 0.01, log_loss: 0.02}

Every criterion is optional; an absent one is not checked. A criterion that is present but
cannot be judged (the evidence lacks the figure, it is null, too few rows or labels, the shadow
is disabled) fails the gate: a release is never promoted on missing evidence.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# metric -> True when higher is better (the gateway's quality report, by model kind)
QUALITY_METRICS: dict[str, bool] = {
    "auc": True,
    "precision": True,
    "recall": True,
    "accuracy": True,
    "macro_f1": True,
    "log_loss": False,
    "ece": False,
    "mae": False,
    "rmse": False,
}
WINDOW = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def window_seconds(window: str) -> int:
    """``"1h"`` -> 3600; ValueError for anything else (the gateway's window syntax)."""
    match = WINDOW.match(window)
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"window {window!r} is not a duration like 30m, 1h or 1d")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class ShadowCriteria(BaseModel):
    """Limits on the shadow comparison of champion and challenger over the same live rows."""

    model_config = _STRICT

    min_rows: int | None = Field(default=None, ge=1)
    min_agreement: float | None = Field(default=None, ge=0, le=1)
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    max_score_psi: float | None = Field(default=None, ge=0)
    max_mean_difference: float | None = Field(default=None, ge=0)
    max_p99_difference: float | None = Field(default=None, ge=0)
    max_beyond_tolerance: float | None = Field(default=None, ge=0, le=1)
    max_challenger_p99_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _something(self) -> ShadowCriteria:
        if not self.given():
            raise ValueError("no criterion: give at least one of " + ", ".join(type(self).model_fields))
        return self

    def given(self) -> dict[str, float]:
        """The criteria this section sets, in the file format's order."""
        return {k: float(v) for k in type(self).model_fields if (v := getattr(self, k)) is not None}


class QualityCriteria(BaseModel):
    """The challenger's quality on labelled rows, against the champion's on the same window."""

    model_config = _STRICT

    min_labels: int | None = Field(default=None, ge=1)
    max_worse: dict[str, float] = Field(default_factory=dict)

    @field_validator("max_worse", mode="after")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        for metric, delta in value.items():
            if metric not in QUALITY_METRICS:
                raise ValueError(f"unknown metric {metric!r}: use " + ", ".join(QUALITY_METRICS))
            if delta < 0:
                raise ValueError(f"{metric}: a margin cannot be negative (got {delta!r})")
        return value

    @model_validator(mode="after")
    def _something(self) -> QualityCriteria:
        if self.min_labels is None and not self.max_worse:
            raise ValueError("no criterion: give min_labels and/or max_worse")
        return self


class PromotionCriteria(BaseModel):
    """The ``promotion:`` section of an SLA (or criteria) file."""

    model_config = _STRICT

    model: str | None = Field(default=None, min_length=1)
    window: str = "1h"
    shadow: ShadowCriteria | None = None
    quality: QualityCriteria | None = None

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        window_seconds(value)
        return value

    @model_validator(mode="after")
    def _something(self) -> PromotionCriteria:
        if self.shadow is None and self.quality is None:
            raise ValueError("no criteria: give a shadow and/or a quality section")
        return self
