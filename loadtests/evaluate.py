"""Judging Locust's stats against an SLA: one ``Check`` per endpoint and metric.

A check says what was measured, the limit, whether it passed and by how much it missed, so the
report can say "infer [POST] p95 12 ms > 5 ms: missed by 7 ms (+140%)".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from loadtests.sla import AGGREGATED, EVERY_ENDPOINT, METRICS, EndpointSla, Sla
from loadtests.stats import EndpointStats


@dataclass(frozen=True)
class Check:
    """One SLA threshold applied to one endpoint."""

    endpoint: str  # the endpoint's label: "infer [POST]" or "Aggregated"
    metric: str  # an SLA key (p95_ms, max_error_rate, min_rps) or "requests"
    limit: float | None
    actual: float | None
    passed: bool
    miss_by: float | None  # how far past the limit, in the metric's unit; None when passed
    detail: str
    skipped: bool = False  # an optional line whose endpoint saw no requests

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if metric == "max_error_rate":
        return f"{value * 100:.2f}%"
    unit = METRICS[metric][2]
    return f"{value:g} {unit}".strip() if metric != "min_rps" else f"{value:.1f} {unit}"


def _check(endpoint: EndpointStats, metric: str, limit: float) -> Check:
    attr, bound, _ = METRICS[metric]
    actual = getattr(endpoint, attr)
    short = metric.removesuffix("_ms").removeprefix("max_").removeprefix("min_")
    if actual is None:
        return Check(endpoint.label, metric, limit, None, False, None, f"{short}: not measured (no requests)")
    passed = actual <= limit if bound == "max" else actual >= limit
    sign = "≤" if bound == "max" else "≥"
    if passed:
        detail = f"{short} {_fmt(metric, actual)} {sign} {_fmt(metric, limit)}"
        return Check(endpoint.label, metric, limit, actual, True, None, detail)
    miss = actual - limit if bound == "max" else limit - actual
    relative = f", {'+' if bound == 'max' else '-'}{miss / limit * 100:.0f}%" if limit else ""
    by = f"{miss * 100:.2f} points" if metric == "max_error_rate" else _fmt(metric, miss)
    wrong = ">" if bound == "max" else "<"
    detail = f"{short} {_fmt(metric, actual)} {wrong} {_fmt(metric, limit)}: missed by {by}{relative}"
    return Check(endpoint.label, metric, limit, actual, False, miss, detail)


def _matches(line: EndpointSla, endpoint: EndpointStats) -> bool:
    if line.type is not None and line.type.lower() != endpoint.type.lower():
        return False
    if line.name == EVERY_ENDPOINT:
        return not endpoint.is_aggregate
    if line.name == AGGREGATED:
        return endpoint.is_aggregate
    return endpoint.name == line.name and not endpoint.is_aggregate


def evaluate(sla: Sla, stats: list[EndpointStats]) -> list[Check]:
    """Every check of every SLA line; a required endpoint without requests is a miss."""
    checks: list[Check] = []
    for line in sla.endpoints:
        matched = [e for e in stats if _matches(line, e) and e.requests > 0]
        if not matched:
            seen = ", ".join(e.label for e in stats if not e.is_aggregate) or "none"
            why = " (optional line, skipped)" if line.optional else f"; endpoints seen: {seen}"
            checks.append(
                Check(
                    line.label,
                    "requests",
                    None,
                    0,
                    line.optional,
                    None,
                    "no requests recorded" + why,
                    line.optional,
                )
            )
            continue
        for endpoint in matched:
            checks += [_check(endpoint, metric, limit) for metric, limit in line.thresholds().items()]
    return checks


def passed(checks: list[Check]) -> bool:
    """The verdict: every check passed (an SLA with no checks cannot pass)."""
    return bool(checks) and all(c.passed for c in checks)
