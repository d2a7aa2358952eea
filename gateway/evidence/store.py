"""What every gateway replica shares: the evidence a release is judged on, and the fallback decision.

The chart runs 2-10 gateway replicas and fraud labels arrive weeks after the prediction, so
nothing a label or a report needs may live in one process's memory (docs/quality.md,
"Across replicas"). An ``EvidenceStore`` keeps, for every replica alike:

- **predictions awaiting a label**, by prediction id: the model, the champion's compact answer
  and each challenger's, for ``ttl_s`` (30 days by default) — ``remember``;
- **labeled pairs** per answering version (the last ``cap`` per version), with the time the
  label arrived — ``label`` pairs them atomically, so a label sent twice to two replicas at
  once is accepted once;
- **counts in one-minute slots** (shadow comparisons, label outcomes), summed across replicas
  — ``add_counts``;
- **small named values**: the shadow pair, the fallback decision (``swap`` is compare-and-set)
  and a judge's lease (``claim``) so one replica judges a rule per period.

Two implementations, one contract (tests/gateway/test_evidence_store.py runs both):
gateway/evidence/redis_store.py (production: the chart's Redis, its own key prefix, TTLs) and
gateway/evidence/sqlite_store.py (one machine: a file every ``gateway serve --workers N``
process shares). Values are opaque text to the store: gateway/quality/ encodes answers and
labels, gateway/shadow/ its count fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from gateway.errors import Unavailable

DEFAULT_TTL_S: Final = 30 * 24 * 3600
SLOT_S: Final = 60  # the counts' resolution
SLOT_TTL_S: Final = 25 * 3600  # a slot outlives the longest report window (24 h)


class StoreUnavailable(Unavailable):
    """The shared store did not answer: the caller may retry (503 with Retry-After)."""

    retry_after = 5


@dataclass(frozen=True)
class Remembered:
    """Answers of one version to some prediction ids: the champion's (``role`` "champion",
    written with the model it belongs to) or a challenger's to the same ids."""

    model: str  # the model callers named (labels are sent to it)
    pair: str  # the answering version's key (gateway/quality/live.py ``pair_key``)
    champion: bool
    ids: Sequence[str]
    answers: Sequence[str]  # encoded compact answers, one per id


@dataclass(frozen=True)
class Found:
    """What the store knew of one labeled id: ``state`` is "accepted" (paired now), "missing"
    (no such id remembered), "other" (``value`` is the id's model) or "labeled" (``value`` is
    the label it already had)."""

    state: str
    value: str = ""


@dataclass(frozen=True)
class SlotCounts:
    """Deltas to add to one slot of a named count vector (``fields`` index -> amount), and a
    value the slot's maximum must be at least."""

    name: str
    slot: int  # epoch seconds // SLOT_S
    fields: Mapping[int, float]
    maximum: float = 0.0


class EvidenceStore(Protocol):
    ttl_s: int
    cap: int  # labeled pairs kept per answering version
    where: str  # for messages: "redis 10.0.0.5:6379" or "sqlite /tmp/..."

    async def remember(self, batches: Sequence[Remembered]) -> None:
        """Keep each answer by id for ``ttl_s``; an answer to an id that already has a label
        is paired at once (a challenger that answered after the label came)."""

    async def register(self, model: str, pair: str, info: str) -> None:
        """Say that ``pair`` answers ``model`` (``info``: how its answers read)."""

    async def pairs(self, model: str) -> dict[str, str]:
        """Every pair registered for ``model``, with its info."""

    async def label(self, model: str, items: Sequence[tuple[str, str]], at: float) -> list[Found]:
        """Give each ``(id, label)`` to its remembered answers, atomically per id: the first
        label of an id pairs it with every answer it has (each version keeps its last ``cap``
        pairs); a later one changes nothing."""

    async def labeled(self, pair: str, since: float) -> list[tuple[str, str]]:
        """``(label, answer)`` of ``pair`` whose label arrived at or after ``since``."""

    async def add_counts(self, updates: Sequence[SlotCounts]) -> None:
        """Add each update to its slot (kept ``SLOT_TTL_S``)."""

    async def counts(self, name: str, first: int, last: int) -> dict[int, tuple[dict[int, float], float]]:
        """The slots ``first`` to ``last`` of ``name`` that have counts: slot -> (fields, maximum)."""

    async def get(self, name: str) -> str | None: ...

    async def put(self, name: str, value: str) -> None: ...

    async def swap(self, name: str, expect: str | None, value: str) -> bool:
        """Set ``name`` to ``value`` if it is ``expect`` now (None: absent); whether it was."""

    async def claim(self, name: str, seconds: float) -> bool:
        """Take the lease ``name`` for ``seconds`` if nobody holds it."""

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


def slot_of(at: float) -> int:
    return int(at // SLOT_S)
