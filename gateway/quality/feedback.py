"""Labels sent back for earlier predictions: the request body, its items, and what became of each.

``POST /v1/models/{model}/feedback`` takes ``{"labels": [{"id": "...", "label": 1}, ...]}``.
The body's *shape* is checked here (``parse_feedback``), before any label is looked at: a body
that is not an object is a BadRequest (400); a missing or mistyped field an InvalidInput (422)
naming it (``labels[3].id``); more than ``MAX_ITEMS`` labels TooLarge (413). Whether a label
fits the model (a class, a finite number) is per item and never fails the request: that is an
``invalid`` outcome in the result (gateway/quality/live.py), so one bad row in a batch of
10,000 does not make the sender retry the other 9,999.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gateway.errors import BadRequest, InvalidInput, TooLarge, Unavailable

MAX_ITEMS: Final = 10_000
MAX_ERRORS: Final = 20  # the result lists this many refused items; the counts have them all
Outcome = Literal["accepted", "duplicate", "conflicting", "unknown", "invalid", "expired"]
# the order is the shared store's count fields (gateway/quality/live.py): only ever append
OUTCOMES: Final[tuple[Outcome, ...]] = (
    "accepted",
    "duplicate",
    "conflicting",
    "unknown",
    "invalid",
    "expired",
)

LabelValue = bool | int | float | str | list[Any] | None


@dataclass(frozen=True)
class FeedbackItem:
    id: str  # the prediction id the gateway answered with
    label: LabelValue  # the truth; a list for a multi-target regressor; None is refused as invalid


@dataclass
class FeedbackResult:
    """Counts per outcome, and the first ``MAX_ERRORS`` items that were not accepted."""

    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    errors: list[dict[str, Any]] = field(default_factory=list)

    def add(self, index: int, item_id: str, outcome: Outcome, reason: str = "") -> None:
        self.counts[outcome] += 1
        if outcome != "accepted" and len(self.errors) < MAX_ERRORS:
            shown = item_id if len(item_id) <= 100 else item_id[:100] + "…"
            self.errors.append({"index": index, "id": shown, "outcome": outcome, "reason": reason})

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {outcome: count for outcome, count in self.counts.items()}
        body["errors"] = list(self.errors)
        return body


def parse_feedback(body: Any) -> list[FeedbackItem]:
    """The items of a feedback body (see the module doc); raises the gateway's input errors."""
    if not isinstance(body, dict):
        raise BadRequest('the body must be a JSON object {"labels": [{"id": ..., "label": ...}, ...]}')
    extra = sorted(set(body) - {"labels"})
    if extra:
        raise InvalidInput(f"unknown field {extra[0]!r}: the body has only labels", field=extra[0])
    labels = body.get("labels")
    if not isinstance(labels, list):
        raise InvalidInput("labels must be a list of {id, label} objects", field="labels")
    if len(labels) > MAX_ITEMS:
        raise TooLarge(f"{len(labels)} labels in one request; at most {MAX_ITEMS}", field="labels")
    return [_item(i, raw) for i, raw in enumerate(labels)]


def _item(index: int, raw: Any) -> FeedbackItem:
    where = f"labels[{index}]"
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where} must be an object {{id, label}}", field=where)
    extra = sorted(set(raw) - {"id", "label"})
    if extra:
        raise InvalidInput(
            f"{where} has an unknown field {extra[0]!r} (id, label)", field=f"{where}.{extra[0]}"
        )
    item_id = raw.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise InvalidInput(
            f"{where}.id must be the prediction's id (a non-empty string)", field=f"{where}.id"
        )
    if "label" not in raw:
        raise InvalidInput(f"{where}.label is missing", field=f"{where}.label")
    label = raw["label"]
    if isinstance(label, dict):
        raise InvalidInput(
            f"{where}.label must be a number, text, true/false or a list of numbers", field=f"{where}.label"
        )
    return FeedbackItem(item_id, label)


class LabelsBusy(Unavailable):
    """More label requests are waiting than the gateway takes at once: send again shortly."""

    retry_after = 1


class LabelGate:
    """Predictions come first: label requests are taken one at a time per process, each
    followed by a pause as long as it took, and past ``max_waiting`` waiting ones the next is a
    503 with Retry-After before its body is read. So a label flood (a backfill, a retrying
    sender) gets at most half of a process's time, one batch at a time, and its senders wait
    instead of spinning. A sender that retries on 503, as it must for any outage, loses nothing."""

    def __init__(self, max_waiting: int = 16, pause: float = 1.0) -> None:
        self.max_waiting = max_waiting
        self.pause = pause  # after a batch that took t, the next waits t * pause: labels get at most
        self._waiting = 0  # 1 / (1 + pause) of the process's time, predictions the rest
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        if self._waiting >= self.max_waiting:
            raise LabelsBusy(
                f"{self._waiting} label requests are already waiting on this replica; send again in a second",
                cause="labels_busy",
            )
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        start = time.perf_counter()
        try:
            yield
        finally:  # the caller is answered now; the next batch waits out the pause
            spent = time.perf_counter() - start
            asyncio.get_running_loop().call_later(spent * self.pause, self._lock.release)
