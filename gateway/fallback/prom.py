"""The fallback switch for Prometheus (the chart's INFO/WARNING/CRITICAL alerts read these).

The gauges are the shared decision and the shared judged figure, read from the store by every
replica, so each replica exports the same value: aggregate them with ``max by (model)``, never
``sum``. The switch counter counts the switches *this* replica made (sum across replicas).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge

if TYPE_CHECKING:
    from gateway.fallback.switch import Decision, Judged
    from gateway.settings import FallbackRule

ACTIVE = Gauge(
    "gateway_fallback_active",
    "1 while the model is served by its fallback (the shared decision)",
    ["model", "fallback"],
)
QUALITY = Gauge(
    "gateway_fallback_quality",
    "The champion's metric over the rule's window, as last judged",
    ["model", "version", "metric"],
)
MARGIN = Gauge(
    "gateway_fallback_margin",
    "How far the judged metric is on the good side of the rule's threshold (negative: broken)",
    ["model", "metric"],
)
THRESHOLD = Gauge("gateway_fallback_threshold", "The rule's threshold", ["model", "metric"])
LABELED_ROWS = Gauge("gateway_fallback_labeled_rows", "Labeled rows behind the judged metric", ["model"])
SWITCHES = Counter(
    "gateway_fallback_switches", "Switches this replica made (to: fallback or champion)", ["model", "to"]
)


def export(model: str, rule: FallbackRule, decision: Decision | None, judged: Judged | None) -> None:
    THRESHOLD.labels(model, rule.metric).set(rule.threshold)
    target = (
        decision.fallback
        if decision is not None and decision.fallback
        else (f"{rule.model or model}:{rule.version or ''}")
    )
    # One live series per model: one that named another fallback goes to 0, not away (removing
    # a labelled series is not supported in prometheus_client's multiprocess mode).
    for labels in list(ACTIVE._metrics):
        if labels[0] == model and labels[1] != target:
            ACTIVE.labels(*labels).set(0)
    ACTIVE.labels(model, target).set(1 if decision is not None and decision.active else 0)
    if judged is None:
        return
    LABELED_ROWS.labels(model).set(judged.rows)
    if judged.value is not None:
        for labels in list(QUALITY._metrics):  # a former champion's figure is no longer judged
            if labels[0] == model and labels[1] != judged.version:
                QUALITY.labels(*labels).set(float("nan"))
        QUALITY.labels(model, judged.version, judged.metric).set(judged.value)
    if judged.margin is not None:
        MARGIN.labels(model, judged.metric).set(judged.margin)
