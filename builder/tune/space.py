"""The knobs ``builder tune`` varies, read from and written into a ``ModelConfig``.

Quick search (Triton Model Analyzer's quick mode): start from the current config and move one
knob at a time, so N candidates cost N measurements instead of a grid's product. Every
neighbour is kept inside Triton's rules: preferred batch sizes within 1..max_batch_size, a
queue delay >= 0, at least one instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from builder.repository.triton_config import ModelConfig

# Upper bounds keep a search on a laptop from proposing what only a large GPU node could use.
MAX_BATCH_CAP = 1024
MAX_INSTANCES = 8
MAX_DELAY_US = 100_000
# A delay of 0 has no "half": its first step up is this, then doubling.
FIRST_DELAY_US = 100

KNOBS = ("max_batch_size", "max_queue_delay_us", "instances", "preferred_batch_sizes")


@dataclass(frozen=True, order=True)
class Knobs:
    """One point of the search space: the fields of ``config.pbtxt`` that tune may change."""

    max_batch_size: int
    max_queue_delay_us: int
    instances: int
    preferred_batch_sizes: tuple[int, ...] = ()

    def label(self) -> str:
        pref = ",".join(map(str, self.preferred_batch_sizes)) or "-"
        return (
            f"mbs={self.max_batch_size} delay={self.max_queue_delay_us}us inst={self.instances} pref={pref}"
        )

    def export_flags(self) -> list[str]:
        """The ``builder export`` options that write this point again: a re-export writes the
        config from its options, so this is how a tuned config survives the next export."""
        flags = [
            f"--max-batch-size={self.max_batch_size}",
            f"--max-queue-delay-us={self.max_queue_delay_us}",
            f"--instances={self.instances}",
        ]
        return flags + [f"--preferred-batch-size={b}" for b in self.preferred_batch_sizes]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Knobs:
        """The inverse of ``to_dict`` (a report's JSON back to knobs)."""
        return cls(
            max_batch_size=int(data["max_batch_size"]),
            max_queue_delay_us=int(data["max_queue_delay_us"]),
            instances=int(data["instances"]),
            preferred_batch_sizes=tuple(int(b) for b in data["preferred_batch_sizes"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_batch_size": self.max_batch_size,
            "max_queue_delay_us": self.max_queue_delay_us,
            "instances": self.instances,
            "preferred_batch_sizes": list(self.preferred_batch_sizes),
        }


def knobs_of(config: ModelConfig) -> Knobs:
    """The current values of the tuned fields (what the search starts from)."""
    batching = config.dynamic_batching
    instances = sum(g.count or 1 for g in config.instance_group) if config.instance_group else 1
    return Knobs(
        max_batch_size=config.max_batch_size,
        max_queue_delay_us=int(batching.max_queue_delay_microseconds),
        instances=max(1, instances),
        preferred_batch_sizes=tuple(int(b) for b in batching.preferred_batch_size),
    )


def tunable(config: ModelConfig) -> tuple[str, ...]:
    """Knobs that make sense for this config.

    A model exported with ``max_batch_size: 0`` has tensors without a batch axis, so batching
    knobs cannot be turned on by a tuner; without ``dynamic_batching`` there is no queue to
    delay (adding a scheduler is an export decision, not a tuning step).
    """
    if config.max_batch_size == 0 or not config.HasField("dynamic_batching"):
        return ("instances",)
    return KNOBS


def _clip_preferred(sizes: tuple[int, ...], max_batch_size: int) -> tuple[int, ...]:
    return tuple(sorted({b for b in sizes if 1 <= b <= max_batch_size}))


def neighbours(knobs: Knobs, knob: str) -> list[Knobs]:
    """The candidates one step away from ``knobs`` along ``knob`` (up first, then down)."""
    out: list[Knobs] = []
    if knob == "max_batch_size":
        for mbs in (min(knobs.max_batch_size * 2, MAX_BATCH_CAP), knobs.max_batch_size // 2):
            if mbs >= 1 and mbs != knobs.max_batch_size:
                pref = _clip_preferred(knobs.preferred_batch_sizes, mbs)
                out.append(Knobs(mbs, knobs.max_queue_delay_us, knobs.instances, pref))
    elif knob == "max_queue_delay_us":
        delay = knobs.max_queue_delay_us
        ups = [FIRST_DELAY_US] if delay == 0 else [min(delay * 2, MAX_DELAY_US)]
        downs = [] if delay == 0 else [delay // 2 if delay // 2 >= FIRST_DELAY_US else 0]
        for d in (*ups, *downs):
            if d != delay:
                out.append(Knobs(knobs.max_batch_size, d, knobs.instances, knobs.preferred_batch_sizes))
    elif knob == "instances":
        for n in (min(knobs.instances + 1, MAX_INSTANCES), knobs.instances - 1):
            if n >= 1 and n != knobs.instances:
                out.append(
                    Knobs(knobs.max_batch_size, knobs.max_queue_delay_us, n, knobs.preferred_batch_sizes)
                )
    elif knob == "preferred_batch_sizes":
        # Preferred sizes mostly matter for TensorRT profiles; the one step tried is "batch to
        # the full max_batch_size" versus "no preference" (Triton's default).
        pref = () if knobs.preferred_batch_sizes else (knobs.max_batch_size,)
        out.append(Knobs(knobs.max_batch_size, knobs.max_queue_delay_us, knobs.instances, pref))
    else:
        raise ValueError(f"unknown knob {knob!r}")
    return out


def apply(config: ModelConfig, knobs: Knobs) -> ModelConfig:
    """A copy of ``config`` with only the tuned fields set to ``knobs``."""
    new = ModelConfig()
    new.CopyFrom(config)
    new.max_batch_size = knobs.max_batch_size
    if new.HasField("dynamic_batching"):
        new.dynamic_batching.max_queue_delay_microseconds = knobs.max_queue_delay_us
        del new.dynamic_batching.preferred_batch_size[:]
        new.dynamic_batching.preferred_batch_size.extend(knobs.preferred_batch_sizes)
    if len(new.instance_group) == 0:
        new.instance_group.add()
    # Several groups (e.g. per GPU) keep their own kinds; the count goes to the first and the
    # others keep theirs, so the total is what the candidate asked for when it can be.
    others = sum(g.count or 1 for g in new.instance_group[1:])
    new.instance_group[0].count = max(1, knobs.instances - others)
    return new
