"""The CRITICAL switch: a champion whose labeled quality collapsed is replaced by its fallback.

Per model (settings ``GATEWAY_FALLBACK``, ``FallbackRule``): a fallback (a version of the same
model kept loaded beside the champion, or another served model with the same inputs) and a
rule (a quality metric over the labels of a window, a threshold, a minimum label count).

One decision for every replica, in the shared store (``fallback:{model}``):

- **judging**: every ``judge_s`` one replica (whoever takes the lease ``fallback-judge:{model}``)
  computes the champion's metric from the shared labeled pairs, publishes it
  (``fallback-judged:{model}``: every replica exports the same gauges), and, when the rule is
  broken, writes the decision with compare-and-set, so two judges never switch twice;
- **following**: every replica reads the decision every ``poll_s`` and routes the model's
  requests to the fallback spec from then on (``serving``): requests in flight finish on the
  champion, none fails. A fallback that cannot be served (not loaded, other inputs) is never
  switched to: the judge says why in the log and the status.
- **no flapping**: the switch latches. Only a command reverses it (``gateway fallback reset``,
  ``POST /v1/models/{m}/fallback``), and it re-arms the rule on labels that arrive after the
  reset, so the labels that tripped it cannot trip it again, and labels hovering around the
  threshold switch at most once.

Recorded: the metrics in gateway/fallback/prom.py, a CRITICAL log line by the replica that
switched (WARNING by each that follows), and in each payload-log row ``__answered_by`` and
``__fallback`` (gateway/payload_log/layout.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.catalog import ModelSpec, incompatible
from gateway.errors import BadRequest, GatewayError, ModelNotFound
from gateway.evidence.store import EvidenceStore
from gateway.fallback import prom
from gateway.quality.contract import Contract
from gateway.quality.live import QualityMonitor, VersionPairs
from gateway.quality.metrics import HIGHER_IS_BETTER
from gateway.settings import FallbackRule
from gateway.stats.counts import window_seconds

log = logging.getLogger("gateway.fallback")


@dataclass(frozen=True)
class Decision:
    active: bool
    fallback: str  # "model:version" served while active
    since: float  # epoch seconds of the last change
    reason: str
    by: str  # "rule" or "command"
    armed_at: float = 0.0  # the rule judges labels that arrived after this (the last reset)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def of_json(cls, text: str | None) -> Decision | None:
        return None if text is None else cls(**json.loads(text))


@dataclass(frozen=True)
class Judged:
    """The champion's figure as last judged (the same on every replica)."""

    version: str
    metric: str
    value: float | None
    margin: float | None  # on the good side of the threshold: > 0; broken: < 0
    rows: int
    at: float
    problem: str | None = None  # why the fallback could not be switched to, if it could not

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def of_json(cls, text: str | None) -> Judged | None:
        return None if text is None else cls(**json.loads(text))


def margin(rule: FallbackRule, value: float) -> float:
    return value - rule.threshold if HIGHER_IS_BETTER[rule.metric] else rule.threshold - value


class FallbackSwitch:
    def __init__(
        self,
        rules: Mapping[str, FallbackRule],
        store: EvidenceStore,
        quality: QualityMonitor,
        resolve: Callable[[str], Awaitable[ModelSpec]],
        ready_versions: Callable[[str], Awaitable[list[str]]],
        poll_s: float = 1.0,
        judge_s: float = 5.0,
    ) -> None:
        self.rules = dict(rules)
        self.store = store
        self.quality = quality
        self.resolve = resolve  # Predictor.spec
        self.ready_versions = ready_versions  # Triton's ready versions of a Triton model
        self.poll_s = poll_s
        self.judge_s = judge_s
        self.decisions: dict[str, Decision] = {}  # as last read from the store
        self.judged: dict[str, Judged] = {}
        self._fallbacks: dict[ModelSpec, ModelSpec] = {}  # champion spec -> its fallback's
        self._tasks: list[asyncio.Task[None]] = []

    # -- on the predict path ----------------------------------------------------------------

    async def serving(self, spec: ModelSpec) -> ModelSpec:
        """The spec to serve ``spec``'s requests with: the fallback's while switched."""
        decision = self.decisions.get(spec.name)
        if decision is None or not decision.active:
            return spec
        found = self._fallbacks.get(spec)
        if found is None:
            try:
                found = await self.fallback_spec(spec)
            except GatewayError as exc:  # never fail a request over it: the champion answers
                log.error("%s: cannot serve the fallback, the champion answers: %s", spec.name, exc.message)
                return spec
            self._fallbacks = {spec: found} | {
                k: v for k, v in self._fallbacks.items() if k.name != spec.name
            }
        return found

    async def fallback_spec(self, champion: ModelSpec) -> ModelSpec:
        """The spec requests to ``champion``'s model are served with while switched; raises a
        GatewayError when the fallback cannot answer them."""
        rule = self.rules[champion.name]
        if rule.model is None or rule.model == champion.name:
            version = rule.version or ""
            ready = await self.ready_versions(champion.triton_model)
            if version not in ready:
                raise ModelNotFound(
                    f"fallback version {version} of {champion.name!r} is not loaded (ready: "
                    f"{', '.join(ready)}); keep it beside the champion (builder export --keep-serving)"
                )
            return dataclasses.replace(
                champion, version=version, pinned_version=version, answered_by=champion.name
            )
        other = await self.resolve(rule.model)
        problem = incompatible(champion, other)
        if problem is not None:
            raise BadRequest(f"the fallback cannot stand in for the champion: {problem}")
        version = rule.version or other.pinned_version or other.version
        if rule.version is not None and rule.version not in await self.ready_versions(other.triton_model):
            raise ModelNotFound(f"fallback version {rule.version} of {rule.model!r} is not loaded")
        return dataclasses.replace(
            other, name=champion.name, version=version, pinned_version=version, answered_by=other.name
        )

    # -- the background tasks ------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(self.poll_s, self.poll))]
        self._tasks.append(loop.create_task(self._every(self.judge_s, self.judge_all)))

    async def _every(self, seconds: float, step: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await step()
            except GatewayError as exc:  # the store or Triton away: keep the last decision
                log.debug("fallback step: %s", exc.message)
            except Exception:
                log.exception("fallback step failed")
            await asyncio.sleep(seconds)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def poll(self) -> None:
        """Follow the shared decision and publish the shared figures (every replica)."""
        for model in self.rules:
            decision = Decision.of_json(await self.store.get(f"fallback:{model}"))
            judged = Judged.of_json(await self.store.get(f"fallback-judged:{model}"))
            before = self.decisions.get(model)
            if decision is not None:
                self.decisions[model] = decision
                if before is None or before.active != decision.active:
                    if decision.active:
                        log.warning(
                            "%s: serving the fallback %s (%s)", model, decision.fallback, decision.reason
                        )
                    elif before is not None:
                        log.warning("%s: serving the champion again (%s)", model, decision.reason)
            if judged is not None:
                self.judged[model] = judged
            prom.export(model, self.rules[model], decision, judged)

    async def judge_all(self) -> None:
        for model, rule in self.rules.items():
            if await self.store.claim(f"fallback-judge:{model}", self.judge_s * 0.9):
                await self.judge(model, rule)

    async def judge(self, model: str, rule: FallbackRule) -> Judged:
        """Compute the champion's figure, publish it, and switch when the rule is broken."""
        now = time.time()
        decision = Decision.of_json(await self.store.get(f"fallback:{model}"))
        champion = await self.resolve(model)
        pairs = VersionPairs(model, model, champion.version, "champion", Contract.of_spec(champion))
        since = max(now - window_seconds(rule.window), decision.armed_at if decision else 0.0)
        quality = await self.quality.quality(pairs, since)
        value = quality.metrics.get(rule.metric)
        judged = Judged(
            champion.version,
            rule.metric,
            value,
            None if value is None else margin(rule, value),
            quality.rows,
            now,
        )
        broken = judged.margin is not None and judged.margin < 0 and quality.rows >= rule.min_labels
        if broken and (decision is None or not decision.active):
            try:
                target = await self.fallback_spec(champion)
            except GatewayError as exc:
                judged = dataclasses.replace(judged, problem=exc.message)
                log.error("%s: the rule is broken but the fallback cannot serve: %s", model, exc.message)
            else:
                worse = "below" if HIGHER_IS_BETTER[rule.metric] else "above"
                reason = (
                    f"{rule.metric} {value:.4g} {worse} {rule.threshold:g} over {quality.rows} labels in "
                    f"{rule.window} (champion version {champion.version})"
                )
                fallback = f"{target.answered_by}:{target.version}"
                new = Decision(True, fallback, now, reason, "rule", decision.armed_at if decision else 0.0)
                if await self.store.swap(
                    f"fallback:{model}", None if decision is None else decision.to_json(), new.to_json()
                ):
                    prom.SWITCHES.labels(model, "fallback").inc()
                    log.critical(
                        "%s: quality dropped below threshold: %s; switched to the fallback %s on every "
                        "replica (reverse: gateway fallback reset %s)",
                        model,
                        reason,
                        fallback,
                        model,
                    )
        await self.store.put(f"fallback-judged:{model}", judged.to_json())
        return judged

    # -- commands -------------------------------------------------------------------------------

    async def command(self, model: str, action: str, reason: str = "") -> Decision:
        """``reset``: serve the champion again and re-arm the rule on later labels; ``engage``:
        switch to the fallback now (by hand)."""
        if model not in self.rules:
            raise BadRequest(f"model {model!r} has no fallback (GATEWAY_FALLBACK)")
        now = time.time()
        key = f"fallback:{model}"
        for _ in range(5):  # compare-and-set: another replica may change it meanwhile
            raw = await self.store.get(key)
            old = Decision.of_json(raw)
            if action == "reset":
                new = Decision(
                    False, old.fallback if old else "", now, reason or "reset by command", "command", now
                )
            elif action == "engage":
                target = await self.fallback_spec(await self.resolve(model))
                fallback = f"{target.answered_by}:{target.version}"
                new = Decision(
                    True,
                    fallback,
                    now,
                    reason or "engaged by command",
                    "command",
                    old.armed_at if old else 0.0,
                )
            else:
                raise BadRequest(f"unknown action {action!r}: reset or engage")
            if await self.store.swap(key, raw, new.to_json()):
                prom.SWITCHES.labels(model, "champion" if action == "reset" else "fallback").inc()
                log.critical("%s: %s by command: %s", model, action, new.reason)
                self.decisions[model] = new
                return new
        raise BadRequest(f"the fallback decision of {model!r} kept changing; try again")

    async def status(self, model: str) -> dict[str, Any]:
        rule = self.rules.get(model)
        if rule is None:
            return {
                "model": model,
                "enabled": False,
                "reason": f"no fallback for {model!r} (GATEWAY_FALLBACK)",
            }
        decision = Decision.of_json(await self.store.get(f"fallback:{model}"))
        judged = Judged.of_json(await self.store.get(f"fallback-judged:{model}"))
        return {
            "model": model,
            "enabled": True,
            "rule": rule.model_dump(),
            "active": bool(decision and decision.active),
            "decision": dataclasses.asdict(decision) if decision else None,
            "judged": dataclasses.asdict(judged) if judged else None,
        }
