"""Prometheus metrics of the gateway (one registry per process, scraped at /metrics)."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

# Buckets for a path whose whole budget is a few milliseconds.
_FAST = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

REQUEST_SECONDS = Histogram(
    "gateway_request_seconds",
    "Request latency by route, model and status",
    ["route", "model", "status"],
    buckets=_FAST,
)
FEATURE_SECONDS = Histogram(
    "gateway_feature_fetch_seconds", "Online feature read latency", ["model"], buckets=_FAST
)
TRITON_SECONDS = Histogram(
    "gateway_triton_seconds", "Triton inference call latency", ["model"], buckets=_FAST
)
ERRORS = Counter("gateway_errors_total", "Errors by cause", ["cause"])
IN_FLIGHT = Gauge("gateway_requests_in_flight", "Requests being served")
OBSERVER_ERRORS = Counter(
    "gateway_observer_errors_total", "Watchers (drift, payload log) that raised on a batch", ["observer"]
)
PAYLOAD_LOG_ROWS = Counter(
    "gateway_payload_log_rows", "Payload log rows by outcome (written, dropped, failed)", ["outcome"]
)
for _outcome in ("written", "dropped", "failed"):  # exported at 0 from the start, so rates work
    PAYLOAD_LOG_ROWS.labels(_outcome)


def count_error(cause: str) -> None:
    """One error, by the cause the error tree gives it (gateway/errors.py)."""
    ERRORS.labels(cause).inc()


_NOT_FOUND = frozenset({"404", "NOT_FOUND"})  # the HTTP and the gRPC status


@dataclass
class Call:
    """What a transport tells ``request`` about one predict call while it serves it."""

    route: str
    model: str = ""  # "" until known (a gRPC message that did not decode)
    status: str = ""  # the transport's status: "200", "404"; "OK", "NOT_FOUND"


class request:  # lower case: used as ``with metrics.request(...)``, like the function it was
    """The request metrics of one predict call, for both transports: in flight while the block
    runs, then its latency under (route, model, status). A model name that was not found and is
    not one the gateway serves is recorded as ``other``: unknown names would explode the label's
    cardinality.

    A class, not a generator context manager, and each label set's histogram child kept once
    (``prometheus_client`` looks it up under a lock on every ``labels`` call): it runs for every
    request, and the two cost ~3.5 µs where this costs ~1.5 (same series, same values)."""

    __slots__ = ("_known", "_start", "call")

    def __init__(self, route: str, known_models: Collection[str]) -> None:
        self.call = Call(route)
        self._known = known_models
        self._start = 0.0

    def __enter__(self) -> Call:
        IN_FLIGHT.inc()
        self._start = time.perf_counter()
        return self.call

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self._start
        IN_FLIGHT.dec()
        call = self.call
        not_found = call.status in _NOT_FOUND  # no such model (or entity)
        known = call.model and (not not_found or call.model in self._known)
        _request_seconds(call.route, call.model if known else "other", call.status).observe(elapsed)


_CHILDREN: dict[tuple[str, ...], Any] = {}


def _request_seconds(route: str, model: str, status: str) -> Any:
    key = (route, model, status)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = REQUEST_SECONDS.labels(route, model, status)
    return child


_PER_MODEL: dict[tuple[Histogram, str], Any] = {}


def per_model(histogram: Histogram, model: str) -> Any:
    """``histogram.labels(model)``, kept once per (histogram, model): the per-batch observations."""
    child = _PER_MODEL.get((histogram, model))
    if child is None:
        child = _PER_MODEL[(histogram, model)] = histogram.labels(model)
    return child


SHADOW_ROWS = Counter(
    "gateway_shadow_rows_total",
    "Rows mirrored to a model's challenger, by outcome: compared, dropped (challenger calls all busy), error",
    ["model", "outcome"],
)
SHADOW_SECONDS = Histogram(
    "gateway_shadow_seconds", "The challenger's Triton call, per mirrored batch", ["model"], buckets=_FAST
)
EVIDENCE_LOST = Counter(
    "gateway_evidence_lost",
    "Evidence this replica could not write to the shared store (what: prediction, challenger, "
    "shadow); the predictions were served, labels for them will be unknown",
    ["model", "what"],
)
