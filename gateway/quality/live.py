"""Live model quality: remember what each version answered, pair it with labels as they come back.

``QualityMonitor.observe`` runs after each served batch (gateway/observe.py), on the event loop:
per row, one dict insert of the prediction's id and its compact answer (a score, a class index,
a value; gateway/quality/contract.py). At most ``capacity`` ids are kept; the oldest is
evicted first, so memory is bounded whatever the traffic (measured: ~170 bytes an id besides
the id's own string, so 200,000 ids of 40 characters ≈ 50 MB). A challenger's answer to the
same row (shadow traffic) is attached to the same id by ``remember_challenger``, before or
after the champion's.

``feedback`` pairs labels with the remembered answers. Each id takes one label: the same label
again is a ``duplicate`` (not counted twice, so a sender may retry a whole batch), another label
``conflicting`` (the first is kept: a truth that changes is a data problem to look at, not to
average). An id this process does not remember is ``unknown``: never served here, served by
another replica, or older than the last ``capacity`` predictions; the payload log and
``gateway quality report`` join those offline. Each labeled pair is kept per answering version
(the last ``pairs_per_version``), with the time the label arrived: windows are by label arrival.

A report computes the metrics over the window's pairs on demand (milliseconds for 50,000 rows);
nothing is computed on the request path. The lock makes a scrape from another thread see whole
batches.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np

from gateway.catalog import ModelSpec
from gateway.drift.counts import Slots
from gateway.drift.monitor import window_seconds
from gateway.observe import Observation
from gateway.quality import prom
from gateway.quality.contract import Compact, Contract, Truth, compact, evaluate, reliability, truth_of
from gateway.quality.feedback import OUTCOMES, FeedbackItem, FeedbackResult, Outcome, parse_feedback
from gateway.quality.report import QualityReport, Role, VersionQuality
from gateway.responses import Prediction

__all__ = ["ChallengerBatch", "FeedbackItem", "FeedbackResult", "QualityMonitor", "parse_feedback"]

CAPACITY: Final = 200_000
PAIRS_PER_VERSION: Final = 50_000
_UNLABELED: Final = object()


@dataclass
class VersionPairs:
    """One answering version's labeled pairs (the last ``maxlen``) and its running count."""

    model: str  # the champion's model: the one labels are sent to
    answered_by: str  # the model that answered (a challenger may be another)
    version: str
    role: Role
    contract: Contract
    pairs: deque[tuple[float, Truth, Compact]]
    total: int = 0  # labeled rows ever (the Prometheus counter)

    def window(self, since: float) -> tuple[list[Truth], list[Compact]]:
        picked = [(t, p) for at, t, p in self.pairs if at >= since]
        return [t for t, _ in picked], [p for _, p in picked]


class ChallengerBatch(Protocol):
    """A challenger's answers to some of a champion model's rows (gateway/shadow/runner.py
    ``ChallengerRows`` has these fields)."""

    @property
    def model(self) -> str: ...  # the champion's: the model labels are sent to
    @property
    def challenger_model(self) -> str: ...
    @property
    def challenger_version(self) -> str: ...
    @property
    def spec(self) -> ModelSpec: ...  # the challenger's
    @property
    def ids(self) -> Sequence[str]: ...
    @property
    def predictions(self) -> Sequence[Prediction]: ...
    @property
    def at(self) -> float: ...


class _Entry:
    """What one prediction id remembers (slots: there are ``capacity`` of these)."""

    __slots__ = ("challengers", "champion", "label", "labeled_at", "model", "prediction")

    def __init__(self, model: str) -> None:
        self.model = model
        self.champion: VersionPairs | None = None
        self.prediction: Compact = None
        self.challengers: list[tuple[VersionPairs, Compact]] | None = None
        self.label: Any = _UNLABELED
        self.labeled_at = 0.0


@dataclass
class _Feedback:
    slots: Slots = field(default_factory=lambda: Slots(len(OUTCOMES)))


class QualityMonitor:
    """The Observer that remembers answers, the sink of labels, and the reader of quality."""

    def __init__(
        self,
        capacity: int = CAPACITY,
        pairs_per_version: int = PAIRS_PER_VERSION,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if capacity < 1 or pairs_per_version < 1:
            raise ValueError("capacity and pairs_per_version must be at least 1")
        self.capacity = capacity
        self.pairs_per_version = pairs_per_version
        self.clock = clock
        self.evicted = 0  # ids forgotten for room, ever
        self._ids: OrderedDict[str, _Entry] = OrderedDict()
        self._versions: dict[tuple[str, Role, str, str], VersionPairs] = {}
        self._feedback: dict[str, _Feedback] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    # -- remembering ------------------------------------------------------------------------

    def _pairs(self, model: str, role: Role, answered_by: str, spec: ModelSpec, version: str) -> VersionPairs:
        key = (model, role, answered_by, version)
        found = self._versions.get(key)
        if found is None:
            found = VersionPairs(
                model,
                answered_by,
                version,
                role,
                Contract.of_spec(spec),
                deque(maxlen=self.pairs_per_version),
            )
            self._versions[key] = found
        return found

    def _entry(self, item_id: str, model: str) -> _Entry:
        entry = self._ids.get(item_id)
        if entry is None:
            entry = self._ids[item_id] = _Entry(model)
            while len(self._ids) > self.capacity:
                self._ids.popitem(last=False)
                self.evicted += 1
        return entry

    def observe(self, observation: Observation) -> None:
        """Remember the champion's answer to each row by its prediction id (one dict insert a
        row). A batch without ids (a path that does not hand them out) is skipped."""
        ids = observation.prediction_ids
        if not ids or len(ids) != observation.rows:
            return
        spec = observation.spec
        with self._lock:
            pairs = self._pairs(spec.name, "champion", spec.name, spec, observation.version)
            answers = [compact(pairs.contract, p) for p in observation.predictions]
            for item_id, answer in zip(ids, answers, strict=True):
                entry = self._entry(item_id, spec.name)
                entry.champion, entry.prediction = pairs, answer
                if entry.label is not _UNLABELED:  # labeled before its answer arrived
                    self._add(pairs, entry.labeled_at, entry.label, answer)

    def remember_challenger(self, batch: ChallengerBatch) -> None:
        """Remember a challenger's answers to rows the champion ``batch.model`` served, by the
        same ids (gateway/shadow/runner.py's ``ChallengerRows``). ``batch.spec`` is the
        challenger's (how its answers read). Remembering the same version's answer to an id
        again replaces the first."""
        if len(batch.ids) != len(batch.predictions):
            raise ValueError(f"{len(batch.ids)} ids for {len(batch.predictions)} predictions")
        with self._lock:
            pairs = self._pairs(
                batch.model, "challenger", batch.challenger_model, batch.spec, batch.challenger_version
            )
            for item_id, prediction in zip(batch.ids, batch.predictions, strict=True):
                answer = compact(pairs.contract, prediction)
                entry = self._entry(item_id, batch.model)
                kept = [(p, a) for p, a in entry.challengers or () if p is not pairs]
                if entry.label is not _UNLABELED and len(kept) == len(entry.challengers or ()):
                    self._add(pairs, entry.labeled_at, entry.label, answer)  # labeled before it answered
                entry.challengers = [*kept, (pairs, answer)]

    def _add(self, pairs: VersionPairs, at: float, truth: Truth, answer: Compact) -> None:
        if answer is None:  # the version answered nothing usable (kind other, a missing score)
            return
        pairs.pairs.append((at, truth, answer))
        pairs.total += 1

    # -- labels -----------------------------------------------------------------------------

    def feedback(self, spec: ModelSpec, items: Sequence[FeedbackItem]) -> FeedbackResult:
        """Pair each label with the remembered answers of its id (see the module doc). Labels
        are checked against ``spec`` (the champion's contract). Never raises for an item."""
        contract = Contract.of_spec(spec)
        result = FeedbackResult()
        now = self.clock()
        with self._lock:
            for index, item in enumerate(items):
                outcome, reason = self._label(spec.name, contract, item, now)
                result.add(index, str(item.id), outcome, reason)
            counts = np.array([result.counts[o] for o in OUTCOMES], dtype=np.int64)
            self._feedback.setdefault(spec.name, _Feedback()).slots.add(now, counts, len(items))
        for outcome, count in result.counts.items():
            if count:
                prom.FEEDBACK_LABELS.labels(spec.name, outcome).inc(count)
        return result

    def _label(self, model: str, contract: Contract, item: FeedbackItem, now: float) -> tuple[Outcome, str]:
        truth, why = truth_of(contract, item.label)
        if truth is None:
            return "invalid", why
        entry = self._ids.get(item.id) if isinstance(item.id, str) else None
        if entry is None:
            return "unknown", self._unknown_reason()
        if entry.model != model:
            return "unknown", f"the id is a prediction of model {entry.model!r}, not {model!r}"
        if entry.label is not _UNLABELED:
            if entry.label == truth:
                return "duplicate", "the id already has this label (counted once)"
            return "conflicting", f"the id already has another label ({entry.label!r} kept)"
        entry.label, entry.labeled_at = truth, now
        if entry.champion is not None:
            self._add(entry.champion, now, truth, entry.prediction)
        for pairs, answer in entry.challengers or ():
            self._add(pairs, now, truth, answer)
        return "accepted", ""

    def _unknown_reason(self) -> str:
        evicted = (
            f"; {self.evicted} older ids were evicted for room" if self.evicted else ""
        )  # say so: an old id is the usual cause once the memory is full
        return (
            f"no prediction with this id is remembered: never served by this gateway process, or "
            f"older than the last {self.capacity} predictions it keeps{evicted}; join such labels "
            "offline with `gateway quality report`"
        )

    # -- reading ----------------------------------------------------------------------------

    def versions(self) -> list[VersionPairs]:
        with self._lock:
            return list(self._versions.values())

    def quality(self, pairs: VersionPairs, seconds: int) -> VersionQuality:
        """One version's rows and metrics over labels that arrived in the last ``seconds``."""
        with self._lock:
            truths, answers = pairs.window(self.clock() - seconds)
        return VersionQuality(
            pairs.answered_by,
            pairs.version,
            pairs.role,
            len(truths),
            evaluate(pairs.contract, truths, answers),
            tuple(reliability(pairs.contract, truths, answers)),
        )

    def report(self, spec: ModelSpec, window: str) -> QualityReport:
        """``spec``'s model over ``window`` (``5m`` … ``24h``; BadRequest otherwise): the
        champion versions with labeled rows in it (the spec's own always, newest first), then
        every challenger that shadowed the model, and the window's label outcomes."""
        seconds = window_seconds(window)
        with self._lock:
            self._pairs(spec.name, "champion", spec.name, spec, spec.version)
        mine = [p for p in self.versions() if p.model == spec.name]
        mine.sort(key=lambda p: (p.role != "champion", p.answered_by, -len(p.version), p.version))
        champions = sorted(
            (p for p in mine if p.role == "champion"), key=lambda p: (len(p.version), p.version), reverse=True
        )
        challengers = [p for p in mine if p.role == "challenger"]
        out = []
        for pairs in [*champions, *challengers]:
            quality = self.quality(pairs, seconds)
            if quality.rows or pairs.role == "challenger" or pairs.version == spec.version:
                out.append(quality)
        return QualityReport(
            spec.name, spec.kind, window, seconds, tuple(out), self.outcomes(spec.name, seconds)
        )

    def outcomes(self, model: str, seconds: int) -> dict[Outcome, int]:
        """The label outcomes of ``model`` over the last ``seconds`` (one-minute resolution)."""
        with self._lock:
            found = self._feedback.get(model)
            if found is None:
                return dict.fromkeys(OUTCOMES, 0)
            counts, _ = found.slots.window(self.clock(), seconds)
        return {o: int(c) for o, c in zip(OUTCOMES, counts, strict=True)}
