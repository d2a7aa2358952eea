"""Scoring candidates and the quick search itself (no servers here: measuring is injected).

The score, decided once: a candidate's score is the **sum of its throughput over the
concurrency levels whose p99 is within the budget**; a level over the budget adds nothing. A
candidate is *within budget* when at least one level is. Sum, not min: with the default
levels (1, 16, 64) almost any config overshoots a tight budget at 64 clients, and min would let
that one level veto every candidate; the sum still rewards a config that stays within budget
at more levels, and serves more there. Ties keep the earlier candidate, so the current config
(candidate 0) is kept unless another one is strictly better.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from builder.tune.space import Knobs, neighbours


@dataclass(frozen=True)
class Measurement:
    """One concurrency level of one candidate, client-side, closed loop."""

    concurrency: int
    throughput: float  # completed inferences per second in the measured window
    p50_ms: float
    p99_ms: float
    requests: int
    queue_us: float = 0.0  # server side, mean per request: the batcher's wait
    compute_us: float = 0.0  # server side, mean per request: the model's run (its batch's)

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "throughput": round(self.throughput, 2),
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "requests": self.requests,
            "server_queue_us": round(self.queue_us, 1),
            "server_compute_us": round(self.compute_us, 1),
        }


@dataclass(frozen=True)
class CandidateResult:
    """A candidate and what measuring it gave: measurements, or the reason it could not run."""

    index: int
    knobs: Knobs
    measurements: tuple[Measurement, ...] = ()
    error: str | None = None  # e.g. Triton refused to load this config
    score: float = 0.0
    within_budget: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "knobs": self.knobs.to_dict(),
            "measurements": [m.to_dict() for m in self.measurements],
            "error": self.error,
            "score": round(self.score, 2),
            "within_budget": self.within_budget,
        }


def scored(
    index: int, knobs: Knobs, measurements: Sequence[Measurement], budget_ms: float
) -> CandidateResult:
    """A CandidateResult with its score and budget verdict computed (see module docstring)."""
    within = [m for m in measurements if m.requests > 0 and m.p99_ms <= budget_ms]
    return CandidateResult(
        index=index,
        knobs=knobs,
        measurements=tuple(measurements),
        score=sum(m.throughput for m in within),
        within_budget=bool(within),
    )


def failed(index: int, knobs: Knobs, error: str) -> CandidateResult:
    return CandidateResult(index=index, knobs=knobs, error=error)


def better(a: CandidateResult, b: CandidateResult | None) -> bool:
    """Whether ``a`` beats ``b`` (None: nothing yet). Strict, so ties keep the earlier one."""
    if b is None:
        return a.error is None
    if a.error is not None:
        return False
    if a.within_budget != b.within_budget:
        return a.within_budget
    if a.within_budget:
        return a.score > b.score
    # Neither meets the budget: climb towards lower latency, so the search can still find
    # a point within it further along.
    return _lowest_p99(a) < _lowest_p99(b)


def _lowest_p99(r: CandidateResult) -> float:
    return min((m.p99_ms for m in r.measurements), default=float("inf"))


def pick_winner(results: Sequence[CandidateResult], min_gain: float = 0.0) -> CandidateResult | None:
    """The best candidate within budget, or None when no candidate meets the budget.

    ``results[0]`` is the current config. Another candidate replaces it only if its score is
    more than ``min_gain`` (a fraction) above the current one's: on a shared machine a few
    percent is noise, and rewriting a served config for noise is churn with no gain.
    """
    best: CandidateResult | None = None
    for result in results:
        if result.within_budget and result.error is None and (best is None or result.score > best.score):
            best = result
    if best is None or not results:
        return best
    current = results[0]
    if current.within_budget and current.error is None and best.score <= current.score * (1 + min_gain):
        return current
    return best


Measure = Callable[[int, Knobs], CandidateResult]


@dataclass
class QuickSearch:
    """Hill climb one knob at a time from ``start``, at most ``max_candidates`` measurements.

    ``measure(index, knobs)`` runs one candidate (the start is candidate 0); the best so far
    (``better``) is where the next knob's neighbours are taken from.
    """

    start: Knobs
    knobs: Sequence[str]
    max_candidates: int
    results: list[CandidateResult] = field(default_factory=list)

    def run(self, measure: Measure) -> list[CandidateResult]:
        seen = {self.start}
        best = measure(0, self.start)
        self.results.append(best)
        for knob in self.knobs:
            for cand in neighbours(best.knobs, knob):
                if len(self.results) >= self.max_candidates:
                    return self.results
                if cand in seen:
                    continue
                seen.add(cand)
                result = measure(len(self.results), cand)
                self.results.append(result)
                if better(result, best):
                    best = result
        return self.results


def plan(start: Knobs, knobs: Sequence[str], max_candidates: int) -> list[Knobs]:
    """The candidates a search would try if no neighbour ever beat the start (for --dry-run
    listings and tests): the start, then each knob's neighbours of the start."""
    out = [start]
    for knob in knobs:
        for cand in neighbours(start, knob):
            if cand not in out and len(out) < max_candidates:
                out.append(cand)
    return out
