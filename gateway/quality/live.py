"""Live model quality: every answer remembered by its id in the shared store, paired with labels.

``QualityMonitor.observe`` runs after each served batch (gateway/observe.py), on the event
loop: it encodes each row's compact answer (a score, a class index, a value;
gateway/quality/contract.py) and hands them to the evidence writer, which writes them to the
store every replica shares (gateway/evidence/), off the response path. A challenger's answer
to the same row (shadow traffic) goes to the same id through ``remember_challenger``.

``feedback`` pairs labels with the remembered answers, in the store, whichever replica served
the prediction and whichever takes the label. Each id takes one label: the same label again is
a ``duplicate`` (not counted twice, so a sender may retry a whole batch), another label
``conflicting`` (the first is kept: a truth that changes is a data problem to look at, not to
average). An id the store does not have is ``expired`` when its time (prediction ids are
time-ordered, gateway/batching.py) is older than the store's TTL, else ``unknown`` (never
served, or another model's). A store that does not answer makes feedback a 503 with
Retry-After: the sender retries, nothing is lost.

Each labeled pair is kept per answering version (the last ``cap``) with the time the label
arrived: windows are by label arrival. A report reads the window's pairs from the store and
computes the metrics off the event loop (milliseconds for 50,000 rows), so every replica
answers the same report.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from gateway.catalog import ModelSpec
from gateway.evidence.store import SLOT_S, EvidenceStore, Found, Remembered, SlotCounts, slot_of
from gateway.evidence.writer import EvidenceWriter
from gateway.observe import Observation
from gateway.quality import prom
from gateway.quality.contract import Contract, Truth, compact, evaluate, reliability, truth_of
from gateway.quality.feedback import OUTCOMES, FeedbackItem, FeedbackResult, Outcome, parse_feedback
from gateway.quality.report import QualityReport, Role, VersionQuality
from gateway.request_ids import issued_at
from gateway.responses import Prediction
from gateway.stats.counts import window_seconds

__all__ = ["ChallengerBatch", "FeedbackItem", "FeedbackResult", "QualityMonitor", "parse_feedback"]

PAIRS_PER_VERSION: Final = 50_000


@dataclass(frozen=True)
class VersionPairs:
    """One answering version of a model: whose labels it takes, who answered, and how."""

    model: str  # the champion's model: the one labels are sent to
    answered_by: str  # the model that answered (a challenger or a fallback may be another)
    version: str
    role: Role
    contract: Contract

    @functools.cached_property
    def key(self) -> str:
        """The pair's name in the store: short, since every remembered prediction carries it
        (the store's pair registry maps it back to model, role, answerer and version)."""
        name = f"{self.model}|{self.role}|{self.answered_by}|{self.version}"
        return hashlib.blake2b(name.encode(), digest_size=6).hexdigest()

    def info(self) -> str:
        return json.dumps(
            {
                "answered_by": self.answered_by,
                "version": self.version,
                "role": self.role,
                "contract": asdict(self.contract),
            }
        )

    @classmethod
    def of_info(cls, model: str, info: str) -> VersionPairs:
        raw = json.loads(info)
        c = raw["contract"]
        classes = tuple(c["classes"]) if c.get("classes") is not None else None
        contract = Contract(c["kind"], classes, c["threshold"], c["probabilities"], c.get("targets", 1))
        return cls(model, raw["answered_by"], raw["version"], raw["role"], contract)


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


def encode(value: Any) -> str:
    """A compact answer or a label as the store keeps it (one canonical text per value)."""
    if type(value) is float and math.isfinite(value):  # a score: the common case, 5x faster
        return repr(value)
    return json.dumps(value, separators=(",", ":"))


def decode(text: str) -> Any:
    value = json.loads(text)
    return tuple(value) if isinstance(value, list) else value


def answered_by(spec: ModelSpec) -> str:
    """The model Triton ran: the spec's own, or a fallback's (``ModelSpec.answered_by``)."""
    return spec.answered_by or spec.name


class QualityMonitor:
    """The Observer that remembers answers, the sink of labels, and the reader of quality."""

    def __init__(
        self,
        store: EvidenceStore,
        writer: EvidenceWriter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.writer = writer
        self.clock = clock
        self._known: dict[tuple[str, Role, str, ModelSpec, str], VersionPairs] = {}

    # -- remembering (on the event loop; the writer sends) ----------------------------------

    def _pairs(self, model: str, role: Role, by: str, spec: ModelSpec, version: str) -> VersionPairs:
        """The answering version (made, and registered in the store, once per process)."""
        cached = self._known.get((model, role, by, spec, version))
        if cached is not None:
            return cached
        pairs = VersionPairs(model, by, version, role, Contract.of_spec(spec))
        self._known[(model, role, by, spec, version)] = pairs
        self.writer.register(model, pairs.key, pairs.info())
        return pairs

    def observe(self, observation: Observation) -> None:
        """Hand the champion's answer to each row, by its prediction id, to the writer. A
        batch without ids (a path that does not hand them out) is skipped."""
        ids = observation.prediction_ids
        if not ids or len(ids) != observation.rows:
            return
        spec = observation.spec
        pairs = self._pairs(spec.name, "champion", answered_by(spec), spec, observation.version)
        answers = [encode(compact(pairs.contract, p)) for p in observation.predictions]
        self.writer.remember(Remembered(spec.name, pairs.key, True, ids, answers))

    def remember_challenger(self, batch: ChallengerBatch) -> None:
        """Hand a challenger's answers to rows the champion ``batch.model`` served, by the same
        ids (gateway/shadow/runner.py's ``ChallengerRows``); ``batch.spec`` is the challenger's."""
        if len(batch.ids) != len(batch.predictions):
            raise ValueError(f"{len(batch.ids)} ids for {len(batch.predictions)} predictions")
        pairs = self._pairs(
            batch.model, "challenger", batch.challenger_model, batch.spec, batch.challenger_version
        )
        answers = [encode(compact(pairs.contract, p)) for p in batch.predictions]
        self.writer.remember(Remembered(batch.model, pairs.key, False, batch.ids, answers))

    # -- labels -----------------------------------------------------------------------------

    async def feedback(self, spec: ModelSpec, items: Sequence[FeedbackItem]) -> FeedbackResult:
        """Pair each label with the remembered answers of its id (see the module doc). Labels
        are checked against ``spec`` (the champion's contract). Raises only StoreUnavailable
        (the store did not answer: nothing was recorded, the sender retries)."""
        contract = Contract.of_spec(spec)
        now = self.clock()
        outcomes: list[tuple[Outcome, str] | None] = []
        asked: list[tuple[str, str]] = []
        for index, item in enumerate(items):
            if index and not index % 500:  # 10,000 labels are ~50 ms of checks: let predictions in
                await asyncio.sleep(0)
            truth, why = truth_of(contract, item.label)
            if truth is None:
                outcomes.append(("invalid", why))
            else:
                outcomes.append(None)
                asked.append((item.id, encode(truth)))
        found = iter(zip(asked, await self.store.label(spec.name, asked, now), strict=True))
        result = FeedbackResult()
        for index, (item, refused) in enumerate(zip(items, outcomes, strict=True)):
            if refused is None:
                (_, label), known = next(found)
                refused = self._outcome(spec.name, item.id, label, known, now)
            result.add(index, str(item.id), *refused)
        counts = {OUTCOMES.index(o): float(c) for o, c in result.counts.items() if c}
        await self.store.add_counts([SlotCounts(f"feedback:{spec.name}", slot_of(now), counts)])
        for outcome, count in result.counts.items():
            if count:
                prom.FEEDBACK_LABELS.labels(spec.name, outcome).inc(count)
        return result

    def _outcome(self, model: str, item_id: str, asked: str, found: Found, now: float) -> tuple[Outcome, str]:
        if found.state == "accepted":
            prom.LABELED_ROWS.labels(model).inc()
            return "accepted", ""
        if found.state == "other":
            return "unknown", f"the id is a prediction of model {found.value!r}, not {model!r}"
        if found.state == "labeled":
            if found.value == asked:
                return "duplicate", "the id already has this label (counted once)"
            return "conflicting", f"the id already has another label ({decode(found.value)!r} kept)"
        issued = issued_at(item_id)
        if issued is not None and issued < now - self.store.ttl_s:
            days = self.store.ttl_s / 86400
            return "expired", (
                f"the prediction is older than the {days:g} days predictions wait for their label "
                "(GATEWAY_STATE_TTL_S); join it offline with `gateway quality report` from the payload log"
            )
        return "unknown", (
            "no prediction with this id is remembered: never served by this gateway (a mistyped id, "
            "another deployment's), or it was lost while the shared store was down; join such labels "
            "offline with `gateway quality report`"
        )

    # -- reading ----------------------------------------------------------------------------

    async def versions(self, model: str) -> list[VersionPairs]:
        found = await self.store.pairs(model)
        return [VersionPairs.of_info(model, info) for info in found.values()]

    async def quality(self, pairs: VersionPairs, since: float) -> VersionQuality:
        """One version's rows and metrics over labels that arrived at or after ``since``."""
        rows = await self.store.labeled(pairs.key, since)
        return await asyncio.to_thread(_scored, pairs, rows)

    async def report(self, spec: ModelSpec, window: str) -> QualityReport:
        """``spec``'s model over ``window`` (``5m`` … ``24h``; BadRequest otherwise): the
        champion versions with labeled rows in it (the spec's own always, newest first), then
        every challenger that shadowed the model, and the window's label outcomes."""
        seconds = window_seconds(window)
        since = self.clock() - seconds
        mine = await self.versions(spec.name)
        own = VersionPairs(spec.name, answered_by(spec), spec.version, "champion", Contract.of_spec(spec))
        if own.key not in {p.key for p in mine}:
            mine.append(own)
        champions = sorted(
            (p for p in mine if p.role == "champion"),
            key=lambda p: (p.answered_by == spec.name, len(p.version), p.version),
            reverse=True,
        )
        challengers = sorted(
            (p for p in mine if p.role == "challenger"), key=lambda p: (p.answered_by, p.version)
        )
        out = []
        for pairs in [*champions, *challengers]:
            quality = await self.quality(pairs, since)
            if quality.rows or pairs.role == "challenger" or pairs.key == own.key:
                out.append(quality)
        return QualityReport(
            spec.name, spec.kind, window, seconds, tuple(out), await self.outcomes(spec.name, seconds)
        )

    async def outcomes(self, model: str, seconds: int) -> dict[Outcome, int]:
        """The label outcomes of ``model`` over the last ``seconds`` (one-minute resolution)."""
        last = slot_of(self.clock())
        found = await self.store.counts(f"feedback:{model}", last - seconds // SLOT_S + 1, last)
        totals = dict.fromkeys(OUTCOMES, 0)
        for fields, _ in found.values():
            for index, count in fields.items():
                if 0 <= index < len(OUTCOMES):
                    totals[OUTCOMES[index]] += int(count)
        return totals


def _scored(pairs: VersionPairs, rows: list[tuple[str, str]]) -> VersionQuality:
    # an answer of null: the version answered nothing usable (kind other, a missing score)
    kept = [(decode(t), decode(a)) for t, a in rows if a != "null"]
    truths: list[Truth] = [t for t, _ in kept]
    answers = [a for _, a in kept]
    return VersionQuality(
        pairs.answered_by,
        pairs.version,
        pairs.role,
        len(truths),
        evaluate(pairs.contract, truths, answers),
        tuple(reliability(pairs.contract, truths, answers)),
    )
