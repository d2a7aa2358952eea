"""Load profiles as plain functions of elapsed time: ``(users, spawn_rate)`` or None to stop.

``loadtests.shapes`` wraps them in Locust ``LoadTestShape`` classes; keeping the arithmetic here
lets it be tested without importing Locust. Every profile is scaled by the run's ``--users``,
``--spawn-rate`` and ``--run-time``, so one SLA run can switch shape without new numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

Tick = tuple[int, float] | None
Profile = Callable[..., Tick]


def steady(t: float, *, users: int, spawn_rate: float, run_time: float) -> Tick:
    """``users`` for the whole run (ramped at ``spawn_rate``)."""
    return None if t >= run_time else (users, spawn_rate)


def step(t: float, *, users: int, spawn_rate: float, run_time: float, steps: int = 4) -> Tick:
    """Climb to ``users`` in ``steps`` equal stairs, one per ``run_time / steps``: where latency
    bends shows the capacity."""
    if t >= run_time:
        return None
    stair = min(steps, int(t / (run_time / steps)) + 1)
    return max(1, math.ceil(users * stair / steps)), spawn_rate


def spike(
    t: float,
    *,
    users: int,
    spawn_rate: float,
    run_time: float,
    base_fraction: float = 0.2,
    start: float = 0.4,
    length: float = 0.2,
) -> Tick:
    """A base load of ``base_fraction * users``, a burst to ``users`` from ``start`` for
    ``length`` (fractions of the run), then the base again: does the tail recover?"""
    if t >= run_time:
        return None
    base = max(1, round(users * base_fraction))
    # The burst arrives within a second, whatever --spawn-rate says: that is what makes it a spike.
    rate = max(spawn_rate, float(users))
    in_spike = start * run_time <= t < (start + length) * run_time
    return (users if in_spike else base), rate


PROFILES: dict[str, Profile] = {"steady": steady, "step": step, "spike": spike}
