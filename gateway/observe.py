"""What the predict path hands to its watchers (drift counting, the payload log) after it answered.

Each served batch becomes one ``Observation``: the model inputs exactly as sent to Triton, the
predictions as answered, the entity keys, and the version that ran. Watchers are called after
every request of the batch has its answer (``loop.call_soon``, queued behind the callers'
wake-ups), so watching never delays a response; it still runs on the event loop, so a watcher
must be cheap (vectorized numpy per batch, a bounded queue) and must never block. A watcher that
raises is logged and counted (``gateway_observer_errors_total``), never fails anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gateway import metrics
from gateway.catalog import ModelSpec
from gateway.request import EntityRow
from gateway.responses import Prediction

log = logging.getLogger("gateway")


@dataclass(frozen=True)
class ChallengerAnswer:
    """What a shadowed batch's challenger answered (gateway/shadow/), row by row."""

    spec: ModelSpec  # how its answers read (its kind and outputs)
    version: str
    predictions: Sequence[Prediction | None]  # one per row; None: not mirrored, dropped or failed


@dataclass(frozen=True)
class Observation:
    spec: ModelSpec
    version: str  # what Triton ran (the spec's version when Triton did not say)
    inputs: Mapping[str, np.ndarray]  # as sent to Triton: layout "matrix" one [N, F], "columns" [N, 1] each
    predictions: Sequence[Prediction]
    entity_rows: Sequence[EntityRow]
    at: float = field(default_factory=time.time)  # epoch seconds
    # Rows of each request the batch served, in order (they sum to ``rows``); empty: one request.
    request_rows: tuple[int, ...] = ()
    # Online feature -> per row, the event time (epoch s) of the value the store had, or None.
    feature_times: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    # One id per row, as returned to the caller with its prediction; feedback (labels) names it.
    prediction_ids: Sequence[str] = ()
    # Set by the shadow runner, for the payload log, once the challenger answered (or did not).
    challenger: ChallengerAnswer | None = None

    @property
    def rows(self) -> int:
        return len(self.predictions)

    def column(self, name: str) -> np.ndarray:
        """One model column's N values, as served (a view, not a copy, in the matrix layout)."""
        if self.spec.layout == "matrix":
            return self.inputs[self.spec.input_name][:, self.spec.feature_names.index(name)]
        return self.inputs[name].reshape(-1)


class Observer(Protocol):
    def observe(self, observation: Observation) -> None:
        """Take one served batch; cheap, non-blocking, on the event loop."""


def notify(observers: Sequence[Observer], observation: Observation) -> None:
    for observer in observers:
        try:
            observer.observe(observation)
        except Exception:
            metrics.OBSERVER_ERRORS.labels(type(observer).__name__).inc()
            log.exception("observer %s failed (the request was answered)", type(observer).__name__)
