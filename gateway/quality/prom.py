"""The quality figures for Prometheus: the label counter, and labeled rows per answering version.

The counter is incremented once per feedback request and outcome (not per label). The
collector reads the monitor's pairs: labeled rows ever per answering version (a counter
Prometheus can sum across replicas). The metrics themselves (AUC, log loss, ...) are not
exported here: computing them over up to 50,000 pairs takes ~75 ms per version, which a scrape
would spend on the event loop every 15 s, stalling requests; ``GET /v1/models/{m}/quality``
computes them on demand, off the loop (docs/quality.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gateway.quality.live import QualityMonitor

FEEDBACK_LABELS = Counter(
    "gateway_feedback_labels",
    "Labels sent back, by outcome (accepted, duplicate, conflicting, unknown, invalid)",
    ["model", "outcome"],
)


def _rows() -> CounterMetricFamily:
    return CounterMetricFamily(
        "gateway_quality_labeled_rows_total",
        "Predictions paired with a label, per answering version (champion or challenger)",
        labels=["model", "answered_by", "version", "role"],
    )


class QualityCollector(Collector):
    """A prometheus_client collector over one QualityMonitor."""

    def __init__(self, monitor: QualityMonitor) -> None:
        self.monitor = monitor

    def describe(self) -> Iterator[Metric]:
        yield _rows()  # the name alone: the registry refuses a second such collector

    def collect(self) -> Iterator[Metric]:
        rows = _rows()
        for pairs in self.monitor.versions():
            rows.add_metric([pairs.model, pairs.answered_by, pairs.version, pairs.role], pairs.total)
        yield rows
