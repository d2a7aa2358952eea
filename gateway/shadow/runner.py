"""Shadow traffic: a challenger answers a share of a model's live requests, off the response path.

The runner is an Observer (gateway/observe.py): it is handed each served batch after every
caller has its answer, so the challenger never delays or fails a caller. For a shadowed model it
picks the batch's mirrored requests (``share``, per request), sends their inputs, exactly as the
champion got them, to the challenger in one Triton call (split at its ``max_batch_size``), reads
the answer through the challenger's own spec and compares it with the champion's
(gateway/shadow/compare.py). At most ``in_flight`` challenger calls run at once; a batch that
finds them all busy is dropped and counted, never queued, so a slow or dead challenger costs
nothing but its own counts. A challenger that fails is counted with its reason.

Who the challenger is (settings ``GATEWAY_SHADOW``): another version of the same model (loaded
beside the champion, ``builder export --keep-serving``; the champion is pinned by its config's
``serving.champion_version``), or another model with the same inputs. It is resolved at most
every ``spec_ttl_s`` seconds; a challenger that cannot be compared (not loaded, other inputs,
another kind) is reported as the reason its rows failed.

The payload log is handed the batch by the runner once the challenger answered (or did not), so
that each logged row carries the challenger's answer beside the champion's; for models without
a challenger it is handed the batch at once.

The counts are summed across replicas in the shared store (gateway/shadow/stats.py says how):
``report`` reads them from there, so every replica answers the same comparison.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from gateway import metrics
from gateway.batching import join_rows, split_rows
from gateway.catalog import ModelSpec, incompatible
from gateway.clients.triton import Triton
from gateway.errors import GatewayError, ModelNotFound
from gateway.evidence.store import SLOT_S, SlotCounts, slot_of
from gateway.evidence.writer import EvidenceWriter
from gateway.observe import ChallengerAnswer, Observation, Observer
from gateway.responses import Prediction, predictions
from gateway.settings import ShadowTarget
from gateway.shadow.compare import compare, psi_bins
from gateway.shadow.stats import DROPPED, ERRORS, Pair, PairCounts
from gateway.stats.counts import window_seconds
from gateway.stats.reference import Binned

log = logging.getLogger("gateway.shadow")


@dataclass(frozen=True)
class ChallengerRows:
    """The challenger's answers to some of a champion model's predictions, by prediction id."""

    model: str  # the champion's (the model callers name)
    challenger_model: str
    challenger_version: str
    spec: ModelSpec  # the challenger's: how its answers read
    ids: Sequence[str]
    predictions: Sequence[Prediction]
    at: float  # epoch seconds the champion answered


class ChallengerWatcher(Protocol):
    """Told the challenger's answers (the quality monitor: labels score both versions)."""

    def remember_challenger(self, rows: ChallengerRows) -> None: ...


@dataclass(frozen=True)
class Plan:
    """The challenger of one champion spec, as resolved: its spec, the version calls pin ("":
    Triton's newest) and the PSI bins; or why it cannot be compared."""

    spec: ModelSpec
    version: str
    bins: Binned | None
    problem: str | None = None


@dataclass(frozen=True)
class Watchers:
    """Who hears of a shadowed batch after the challenger: the payload log, the quality monitor."""

    log: Observer | None = None
    quality: ChallengerWatcher | None = None


class ShadowRunner:
    def __init__(
        self,
        targets: Mapping[str, ShadowTarget],
        in_flight: int,
        triton: Triton,
        resolve: Callable[[str], Awaitable[ModelSpec]],
        watchers: Watchers,
        writer: EvidenceWriter,  # its store holds the counts every replica adds to
        spec_ttl_s: float = 30.0,
    ) -> None:
        self.targets = dict(targets)
        self.store = writer.store
        self.writer = writer
        for model in self.targets:
            writer.counts_from(model, functools.partial(self.drain, model))
        self.in_flight = in_flight
        self.triton = triton
        self.resolve = resolve  # another model's spec (Predictor.spec)
        self.watchers = watchers
        self.spec_ttl_s = spec_ttl_s
        self._plans: dict[ModelSpec, tuple[Plan, float]] = {}
        self._counts: dict[str, PairCounts] = {}  # buffers, drained into the shared store
        self._retired: list[SlotCounts] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._rng = np.random.default_rng()

    # -- on the event loop, after the callers were answered ---------------------------------

    def observe(self, observation: Observation) -> None:
        spec = observation.spec
        target = self.targets.get(spec.name)
        if target is None:
            self._log(observation)
            return
        rows = self._mirrored(observation, target.share)
        if not len(rows):
            self._log(observation, self._unanswered(observation))
            return
        if len(self._tasks) >= self.in_flight:
            self._count(spec, observation.version, target).add_rows(observation.at, DROPPED, len(rows))
            metrics.SHADOW_ROWS.labels(spec.name, "dropped").inc(len(rows))
            self._log(observation, self._unanswered(observation))
            return
        task = asyncio.get_running_loop().create_task(self._mirror(observation, rows, target))
        self._tasks.add(task)  # keep a reference: the loop holds tasks weakly
        task.add_done_callback(self._tasks.discard)

    def _mirrored(self, observation: Observation, share: float) -> np.ndarray:
        """Row indices of the requests mirrored: each request with probability ``share``."""
        if share >= 1.0:
            return np.arange(observation.rows)
        sizes = observation.request_rows or (observation.rows,)
        chosen = self._rng.random(len(sizes)) < share
        return np.flatnonzero(np.repeat(chosen, sizes))

    # -- the challenger's call, a task of its own ---------------------------------------------

    async def _mirror(self, observation: Observation, rows: np.ndarray, target: ShadowTarget) -> None:
        champion = observation.spec
        answers: list[Prediction | None] = [None] * observation.rows
        plan: Plan | None = None
        try:
            plan = await self._plan(champion, target)
            if plan.problem is not None:
                raise _Incomparable(plan.problem)
            inputs = {name: array[rows] for name, array in observation.inputs.items()}
            start = time.perf_counter()
            out, ran = await self._infer(plan, inputs)
            took = time.perf_counter() - start
            metrics.SHADOW_SECONDS.labels(champion.name).observe(took)
            defaults = [observation.predictions[i].defaults_used for i in rows]
            theirs = predictions(plan.spec, out, defaults)
        except Exception as exc:
            if isinstance(exc, ModelNotFound):
                self._plans.pop(champion, None)
            reason = exc.message if isinstance(exc, GatewayError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, GatewayError | _Incomparable):
                log.exception("shadow call for %s failed", champion.name)
            counts = self._count(champion, observation.version, target, plan)
            counts.add_rows(observation.at, ERRORS, len(rows), reason)
            self.writer.put(f"shadow-error:{counts.pair.name}", reason)
            metrics.SHADOW_ROWS.labels(champion.name, "error").inc(len(rows))
            self._log(observation, self._unanswered(observation, plan))
            return
        version = ran or plan.version or plan.spec.version
        ours = [observation.predictions[i] for i in rows]
        counts = self._count(champion, observation.version, target, plan, version)
        counts.add(observation.at, len(rows), compare(champion, ours, theirs, plan.bins), took)
        metrics.SHADOW_ROWS.labels(champion.name, "compared").inc(len(rows))
        for i, answer in zip(rows, theirs, strict=True):
            answers[i] = answer
        if self.watchers.quality is not None and observation.prediction_ids:
            ids = [observation.prediction_ids[i] for i in rows]
            mine = ChallengerRows(
                champion.name, plan.spec.name, version, plan.spec, ids, theirs, observation.at
            )
            self.watchers.quality.remember_challenger(mine)
        self._log(observation, ChallengerAnswer(plan.spec, version, answers))

    async def _infer(self, plan: Plan, inputs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
        spec = plan.spec
        pieces = split_rows(inputs, spec.max_batch_size)
        calls = [self.triton.infer(spec.triton_model, p, spec.outputs, plan.version) for p in pieces]
        done = await asyncio.gather(*calls)
        return join_rows([out for out, _ in done]), done[-1][1]

    async def _plan(self, champion: ModelSpec, target: ShadowTarget) -> Plan:
        cached = self._plans.get(champion)
        if cached is not None and time.monotonic() - cached[1] < self.spec_ttl_s:
            return cached[0]
        plan = await self._resolve(champion, target)
        self._plans = {s: p for s, p in self._plans.items() if s.name != champion.name}
        self._plans[champion] = (plan, time.monotonic())
        return plan

    async def _resolve(self, champion: ModelSpec, target: ShadowTarget) -> Plan:
        model = target.model or champion.name
        if model == champion.name:
            versions = await self.triton.ready_versions(champion.triton_model)
            others = [v for v in versions if v != champion.version]
            version = target.version or (others[-1] if others else "")
            bins = psi_bins(champion)
            if not version:
                why = (
                    f"model {model!r} serves only version {champion.version}: load the challenger beside "
                    "it (builder export --keep-serving)"
                )
            elif version == champion.version:
                why = f"the challenger is version {version} of {model!r}, the champion itself"
            elif version not in versions:
                why = f"version {version} of {model!r} is not ready (ready: {', '.join(versions) or 'none'})"
            else:
                return Plan(champion, version, bins)
            return Plan(champion, version, bins, why)
        try:
            spec = await self.resolve(model)
        except GatewayError as exc:
            return Plan(champion, target.version or "", None, f"challenger {model!r}: {exc.message}")
        version = target.version or spec.pinned_version
        return Plan(spec, version, psi_bins(champion), incompatible(champion, spec))

    # -- counts and reports -------------------------------------------------------------------

    def _count(
        self,
        champion: ModelSpec,
        version: str,
        target: ShadowTarget,
        plan: Plan | None = None,
        challenger_version: str = "",
    ) -> PairCounts:
        """The counts of this champion's current pair; a new pair (either side re-exported)
        starts them afresh, since the old pair's figures say nothing about the new one."""
        challenger = plan.spec.name if plan is not None else target.model or champion.name
        wanted = challenger_version or (plan.version if plan is not None else "") or target.version or ""
        pair = Pair(champion.name, version, challenger, wanted)
        counts = self._counts.get(champion.name)
        if counts is not None and counts.pair == pair:
            return counts
        if counts is not None and _same_pair_once_known(counts.pair, pair):
            learnt = dataclasses.replace(
                counts.pair, challenger_version=wanted or counts.pair.challenger_version
            )
            if learnt != counts.pair:
                counts.pair = learnt
                self.writer.put(f"shadow-pair:{champion.name}", learnt.to_json())
            return counts
        bins = plan.bins if plan is not None else psi_bins(champion)
        if counts is not None:  # what the old pair counted still goes to the store
            self._retired.extend(counts.drain())
        counts = PairCounts(pair, bins, target.tolerance)
        self._counts[champion.name] = counts
        self.writer.put(f"shadow-pair:{champion.name}", pair.to_json())
        return counts

    def drain(self, model: str) -> list[SlotCounts]:
        """What ``model``'s pair counted since the last drain (the evidence writer's source)."""
        counts = self._counts.get(model)
        retired = [u for u in self._retired if u.name.startswith(f"shadow:{model}|")]
        self._retired = [u for u in self._retired if u not in retired]
        return [*retired, *(counts.drain() if counts is not None else ())]

    async def report(self, spec: ModelSpec, window: str) -> dict[str, Any]:
        """The pair's comparison over the last ``window`` (``GET /v1/models/{m}/shadow``), as
        every replica counted it (the shared store)."""
        seconds = window_seconds(window)
        body: dict[str, Any] = {"model": spec.name, "window": window, "window_seconds": seconds}
        target = self.targets.get(spec.name)
        if target is None:
            return shadow_off(
                spec.name, window, f"no challenger is configured for {spec.name!r} (GATEWAY_SHADOW)"
            )
        body.update(enabled=True, share=target.share)
        known = await self.store.get(f"shadow-pair:{spec.name}")
        pair = (
            Pair.of_json(known)
            if known is not None
            else Pair(spec.name, spec.version, target.model or spec.name, target.version or "")
        )
        now = time.time()
        last = slot_of(now)
        counts = PairCounts(pair, psi_bins(spec) if pair.version == spec.version else None, target.tolerance)
        for slot, (fields, maximum) in (
            await self.store.counts(pair.name, last - seconds // SLOT_S + 1, last)
        ).items():
            counts.load(slot, fields, maximum)
        counts.last_error = await self.store.get(f"shadow-error:{pair.name}")
        return {**body, **counts.report(now, seconds)}

    # -- the payload log ----------------------------------------------------------------------

    def _unanswered(self, observation: Observation, plan: Plan | None = None) -> ChallengerAnswer:
        spec = plan.spec if plan is not None else observation.spec
        return ChallengerAnswer(spec, "", [None] * observation.rows)

    def _log(self, observation: Observation, challenger: ChallengerAnswer | None = None) -> None:
        if self.watchers.log is None:
            return
        seen = observation if challenger is None else dataclasses.replace(observation, challenger=challenger)
        try:
            self.watchers.log.observe(seen)
        except Exception:
            metrics.OBSERVER_ERRORS.labels(type(self.watchers.log).__name__).inc()
            log.exception("the payload log failed on a shadowed batch (the request was answered)")

    async def close(self, wait_s: float = 1.0) -> None:
        """Let the challenger calls in flight finish (within ``wait_s``), then cancel the rest:
        the Triton client closes next."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=wait_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def shadow_off(model: str, window: str, reason: str) -> dict[str, Any]:
    """The shadow report of a model nothing shadows."""
    return {
        "model": model,
        "window": window,
        "window_seconds": window_seconds(window),
        "enabled": False,
        "reason": reason,
    }


class _Incomparable(Exception):
    """The challenger cannot be compared (its plan's problem)."""


def _same_pair_once_known(old: Pair, new: Pair) -> bool:
    """``new`` is ``old`` with a challenger version learnt (or still unknown on one side)."""
    return (old.model, old.version, old.challenger_model) == (
        new.model,
        new.version,
        new.challenger_model,
    ) and (not old.challenger_version or not new.challenger_version)
