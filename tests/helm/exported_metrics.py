"""What the stack exports, which the chart's alerts, recording rules and dashboard may read: the
gateway's collectors (every module-level one in gateway/), the drift metrics docs/drift.md fixes,
the fallback metrics the fallback alerts read, Triton 2.51's families and DCGM's."""

from __future__ import annotations

import importlib
import re
from functools import cache

from prometheus_client.metrics import MetricWrapperBase

from tests.helm.chart_support import REPO_ROOT

# Every metric family Triton 2.51 (NGC 24.10, the chart's image) serves on :8002 for a loaded model
# on CPU, as its embedded server listed them; the GPU families (nv_gpu_*) come only with a GPU, and
# the dashboard reads GPU use from DCGM instead.
TRITON_METRICS = {
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_cpu_utilization",
    "nv_cpu_memory_total_bytes",
    "nv_cpu_memory_used_bytes",
}
# NVIDIA dcgm-exporter's field names (DCGM_FI_DEV_GPU_UTIL, ...).
DCGM_METRIC = re.compile(r"^DCGM_FI_[A-Z0-9_]+$")
_SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
}


# A module-level prometheus_client collector: `NAME = Counter(` (gateway/metrics.py,
# gateway/quality/prom.py, ...).
_COLLECTOR = re.compile(r"^[A-Z_][A-Z0-9_]*\s*=\s*(Counter|Gauge|Histogram)\(", re.MULTILINE)
# The metrics of the gateway's automatic fallback and shared store (the issue "one truth across
# replicas"), as the chart's fallback alerts read them: name -> (type, labels). Gauges come from
# the shared store, so every replica exports the same value. Being built in gateway/ alongside
# the chart: test_fallback_alerts.py::test_the_fallback_alerts_read_metrics_the_gateway_exports
# holds the two together.
FALLBACK_METRICS: dict[str, tuple[str, frozenset[str]]] = {
    "gateway_fallback_active": ("gauge", frozenset({"model", "fallback"})),
    "gateway_fallback_quality": ("gauge", frozenset({"model", "version", "metric"})),
    "gateway_fallback_margin": ("gauge", frozenset({"model", "metric"})),
    "gateway_fallback_labeled_rows": ("gauge", frozenset({"model"})),
    "gateway_fallback_switches_total": ("counter", frozenset({"model", "to"})),
    "gateway_evidence_lost_total": ("counter", frozenset({"model", "what"})),
}


def gateway_collectors() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every module-level collector in gateway/: family name -> (type, label names)."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for path in sorted((REPO_ROOT / "gateway").rglob("*.py")):
        if not _COLLECTOR.search(path.read_text()):
            continue
        module = importlib.import_module(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))
        for collector in vars(module).values():
            if isinstance(collector, MetricWrapperBase):
                for family in collector.describe():
                    found[family.name] = (family.type, tuple(collector._labelnames))
    return found


@cache
def gateway_metrics() -> frozenset[str]:
    """Series names the gateway exports: its modules' collectors (gateway/metrics.py,
    gateway/quality/prom.py, ...), the drift metrics docs/drift.md section 2 fixes (the table is
    the contract the drift code implements), and the fallback metrics above."""
    names: set[str] = set(FALLBACK_METRICS)
    for name, (kind, _) in gateway_collectors().items():
        names |= {name + s for s in _SAMPLE_SUFFIXES[kind]}
    doc = (REPO_ROOT / "docs" / "drift.md").read_text()
    section = doc.split("## 2.", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| `(gateway_\w+)` \| (counter|gauge) \|", section, re.MULTILINE)
    assert len(table) >= 5, "docs/drift.md section 2 lists the drift metrics"
    return frozenset(names | {name for name, _ in table})


def unknown_metrics(names: set[str]) -> set[str]:
    known = gateway_metrics() | TRITON_METRICS
    return {n for n in names if n not in known and not DCGM_METRIC.match(n)}


def gateway_error_causes() -> set[str]:
    """Every `cause` the gateway's code can put on gateway_errors_total."""
    source = "\n".join(p.read_text() for p in (REPO_ROOT / "gateway").glob("*.py"))
    return set(re.findall(r"""\bcause\s*=\s*"(\w+)\"""", source))
