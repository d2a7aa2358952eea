"""The payload log's observer and its writer thread.

On the event loop, ``observe`` only samples row indices and offers the batch to a bounded queue
(a few microseconds, never a wait): a full queue drops the batch's sampled rows and counts them
(``gateway_payload_log_rows_total{outcome="dropped"}``). A daemon thread takes what is queued
every ``flush_rows`` rows or ``flush_s`` seconds, builds the Arrow tables (gateway/payload_log/
layout.py) and writes one Parquet file per model and date. A write that fails counts its rows
as ``failed`` and drops them (retrying would only grow memory while the store is down); the
first failure of an episode is logged, the next success logs the recovery. ``close`` writes
what is queued within ``close_s`` seconds; whatever is left then is counted as dropped.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gateway import metrics
from gateway.catalog import ModelSpec
from gateway.observe import Observation
from gateway.payload_log.layout import log_date, to_table
from gateway.payload_log.sink import Sink

log = logging.getLogger("gateway.payload_log")


@dataclass(frozen=True)
class LogConfig:
    sample: float = 1.0
    queue_rows: int = 20_000
    flush_rows: int = 5_000
    flush_s: float = 10.0
    close_s: float = 5.0
    salt: bytes | None = None  # hash entity keys with it; None: keys as they are
    explanations: bool = False  # the reason codes asked for (layout.py's __explanation_* columns)


@dataclass(frozen=True)
class _Queued:
    observation: Observation
    rows: np.ndarray  # sampled row indices


class PayloadLog:
    """An Observer (gateway/observe.py) that writes sampled rows through ``sink``; ``views``
    gives a feature service's feature -> view map (called on the writer thread)."""

    def __init__(
        self,
        config: LogConfig,
        sink: Sink,
        views: Callable[[str], Mapping[str, str]],
        rng: np.random.Generator | None = None,
    ) -> None:
        self.config = config
        self.sink = sink
        self._views = views
        self._rng = rng or np.random.default_rng()
        self._queue: deque[_Queued] = deque()
        self._queued_rows = 0
        self._wake = threading.Condition()
        self._closing = False
        self._failing = False
        self._view_cache: dict[str, Mapping[str, str]] = {}
        self._thread = threading.Thread(target=self._run, name="payload-log", daemon=True)
        self._thread.start()

    # -- the event loop's side -------------------------------------------------------------
    def observe(self, observation: Observation) -> None:
        """Sample the batch's rows and queue them, or drop (and count) them when the queue is full."""
        n = observation.rows
        if self.config.sample >= 1.0:
            rows = np.arange(n)
        else:
            rows = np.flatnonzero(self._rng.random(n) < self.config.sample)
        if not len(rows):
            return
        with self._wake:
            if self._closing or self._queued_rows + len(rows) > self.config.queue_rows:
                metrics.PAYLOAD_LOG_ROWS.labels("dropped").inc(len(rows))
                return
            self._queue.append(_Queued(observation, rows))
            self._queued_rows += len(rows)
            if self._queued_rows >= self.config.flush_rows:
                self._wake.notify()

    def close(self) -> None:
        """Write what is queued (within ``close_s``), then stop; blocking, call it off the loop."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(self.config.close_s)
        with self._wake:
            left = self._queued_rows
            self._queue.clear()
            self._queued_rows = 0
        if left:
            metrics.PAYLOAD_LOG_ROWS.labels("dropped").inc(left)
            log.warning("payload log: %d rows still queued at shutdown were dropped", left)

    # -- the writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                deadline = time.monotonic() + self.config.flush_s
                while not self._closing and self._queued_rows < self.config.flush_rows:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
                batch = list(self._queue)
                self._queue.clear()
                self._queued_rows = 0
                closing = self._closing
            if batch:
                self._write(batch)
            if closing:
                with self._wake:
                    if not self._queue:
                        return

    def _write(self, batch: list[_Queued]) -> None:
        groups: dict[tuple[ModelSpec, dt.date], list[_Queued]] = {}
        for item in batch:
            day = log_date(item.observation.at)
            groups.setdefault((item.observation.spec, day), []).append(item)
        for (spec, day), items in groups.items():
            rows = sum(len(i.rows) for i in items)
            try:
                views = self._views_of(spec)
                salt, explained = self.config.salt, self.config.explanations
                tables = [to_table(i.observation, i.rows, views, salt, explained) for i in items]
                self.sink.write(spec.name, day, pa.concat_tables(tables))
            except Exception as exc:  # a log that cannot be written never takes the gateway down
                metrics.PAYLOAD_LOG_ROWS.labels("failed").inc(rows)
                if not self._failing:
                    self._failing = True
                    log.error(
                        "payload log: cannot write %s rows (%s: %s); counting rows as failed until "
                        "it can again",
                        spec.name,
                        type(exc).__name__,
                        exc,
                    )
                continue
            metrics.PAYLOAD_LOG_ROWS.labels("written").inc(rows)
            if self._failing:
                self._failing = False
                log.warning("payload log: writing again")

    def _views_of(self, spec: ModelSpec) -> Mapping[str, str]:
        views = self._view_cache.get(spec.feature_service)
        if views is None:
            views = self._view_cache[spec.feature_service] = self._views(spec.feature_service)
        return views
