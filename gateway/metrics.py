"""Prometheus metrics of the gateway (one registry per process, scraped at /metrics)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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


@contextmanager
def request(route: str, known_models: Collection[str]) -> Iterator[Call]:
    """The request metrics of one predict call, for both transports: in flight while the block
    runs, then its latency under (route, model, status). A model name that was not found and is
    not one the gateway serves is recorded as ``other``: unknown names would explode the label's
    cardinality."""
    call = Call(route)
    start = time.perf_counter()
    IN_FLIGHT.inc()
    try:
        yield call
    finally:
        IN_FLIGHT.dec()
        not_found = call.status in _NOT_FOUND  # no such model (or entity)
        known = call.model and (not not_found or call.model in known_models)
        label = call.model if known else "other"
        REQUEST_SECONDS.labels(route, label, call.status).observe(time.perf_counter() - start)


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
