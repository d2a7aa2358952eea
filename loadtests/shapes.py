"""Locust load shapes: steady, step, spike (``loadtests.profiles`` does the arithmetic).

Each reads ``--users``, ``--spawn-rate`` and ``--run-time`` from the run (``use_common_options``),
so switching shape keeps the same numbers. Locust runs the first shape class it finds in a
locustfile, so the locustfile exposes exactly one: ``selected_shape()``, chosen by the
``LOADTESTS_SHAPE`` environment variable (the gate's ``--shape``) before Locust parses options.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from locust import LoadTestShape

from loadtests.profiles import PROFILES, Profile
from loadtests.settings import SHAPE_ENV

DEFAULT_RUN_TIME_S = 60.0


class OptionsShape(LoadTestShape):
    """A profile scaled by the run's common options."""

    abstract = True
    use_common_options = True
    profile: ClassVar[Profile]

    def tick(self) -> Any:
        assert self.runner is not None
        options = self.runner.environment.parsed_options
        users = int(getattr(options, "num_users", None) or 1)
        spawn_rate = float(getattr(options, "spawn_rate", None) or users)
        run_time = float(getattr(options, "run_time", None) or DEFAULT_RUN_TIME_S)
        return type(self).profile(self.get_run_time(), users=users, spawn_rate=spawn_rate, run_time=run_time)


class SteadyShape(OptionsShape):
    """``--users`` for the whole ``--run-time``."""

    profile = staticmethod(PROFILES["steady"])


class StepShape(OptionsShape):
    """Four stairs up to ``--users``."""

    profile = staticmethod(PROFILES["step"])


class SpikeShape(OptionsShape):
    """A fifth of ``--users``, a burst to all of them in the middle fifth of the run, and back."""

    profile = staticmethod(PROFILES["spike"])


SHAPES: dict[str, type[OptionsShape]] = {"steady": SteadyShape, "step": StepShape, "spike": SpikeShape}


def selected_shape(name: str | None = None) -> type[OptionsShape]:
    """The shape named by ``name`` or ``$LOADTESTS_SHAPE`` (default steady)."""
    chosen = name or os.environ.get(SHAPE_ENV) or "steady"
    if chosen not in SHAPES:
        raise ValueError(f"{SHAPE_ENV}={chosen!r}: choose one of {', '.join(SHAPES)}")
    return SHAPES[chosen]
