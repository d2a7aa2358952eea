"""The drift metrics (docs/drift.md §2), computed at scrape time from the monitor's counts.

Nothing is incremented on the request path: a scrape reads each version's running totals (the
counters, which Prometheus sums across replicas) and its last hour (the gauges). The reference's
share per bin is exported too, so Prometheus can compute PSI from the counters summed across
replicas (the chart's recording rules) instead of trusting any one replica's share of traffic.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.drift.monitor import DriftMonitor
from gateway.stats.measures import STATUS
from gateway.stats.reference import PREDICTION

GAUGE_WINDOW = "1h"
_GAUGE_WINDOW_S = 3600


def _families() -> tuple[
    CounterMetricFamily, CounterMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily
]:
    return (
        CounterMetricFamily(
            "gateway_drift_rows_total", "Rows counted for drift (after sampling)", labels=["model", "version"]
        ),
        CounterMetricFamily(
            "gateway_drift_bin_total",
            "Rows per reference bin (the bin index, other or null)",
            labels=["model", "version", "feature", "bin"],
        ),
        GaugeMetricFamily(
            "gateway_drift_psi",
            "PSI of the window against the reference",
            labels=["model", "version", "feature", "window"],
        ),
        GaugeMetricFamily(
            "gateway_drift_status",
            "-1 not enough rows, 0 ok, 1 warn, 2 alert",
            labels=["model", "version", "feature", "window"],
        ),
        GaugeMetricFamily(
            "gateway_drift_reference_share",
            "The reference's share of its non-null rows per bin (the null bin apart, as in PSI)",
            labels=["model", "version", "feature", "bin"],
        ),
    )


class DriftCollector(Collector):
    """A prometheus_client collector over one DriftMonitor."""

    def __init__(self, monitor: DriftMonitor) -> None:
        self.monitor = monitor

    def describe(self) -> Iterator[Metric]:
        # the names alone, so the registry refuses a second collector of the same metrics
        yield from _families()

    def collect(self) -> Iterator[Metric]:
        rows, bins, psi, status, reference = _families()
        for counts in self.monitor.versions():
            if counts.binner is None or counts.reference is None:
                continue
            model, version = counts.model, counts.version
            total, total_rows = self.monitor.totals(counts)
            rows.add_metric([model, version], total_rows)
            window = self.monitor.version_drift(counts, _GAUGE_WINDOW_S)
            drifts = [*window.features, *([window.prediction] if window.prediction else [])]
            for binned, offset, drift in zip(
                counts.reference.binned, counts.binner.offsets, drifts, strict=True
            ):
                feature = PREDICTION if binned is counts.reference.prediction else binned.name
                for i, label in enumerate(binned.labels()):
                    bins.add_metric([model, version, feature, label], int(total[offset + i]))
                present = sum(binned.counts)
                for label, count in zip(binned.labels(), binned.counts, strict=False):
                    # the null bin (last label) has no count here: zip stops before it
                    share = count / present if present else 0.0
                    reference.add_metric([model, version, feature, label], share)
                if drift.psi is not None:
                    psi.add_metric([model, version, feature, GAUGE_WINDOW], drift.psi)
                status.add_metric([model, version, feature, GAUGE_WINDOW], STATUS[drift.verdict])
        yield from (rows, bins, psi, status, reference)
