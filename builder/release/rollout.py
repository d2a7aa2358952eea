"""Apply a model version as a canary, wait for its revision, promote or roll back.

Readiness is read from the InferenceService's status the way KServe reports it: condition
``Ready`` is ``True``, the controller has seen the latest spec (``observedGeneration``), and
``components.predictor.latestReadyRevision`` equals ``latestCreatedRevision`` -- before that, a
``Ready`` status may still describe the previous revision. After promote or rollback the wait
also checks the traffic split the controller reports for the newest revision.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from builder.release.errors import ReleaseError, RolloutTimeoutError
from builder.release.kube import InferenceServices
from builder.release.manifest import ServiceSpec, promote_patch, release_patch, render, rollback_patch

POLL_S = 2.0


@dataclass(frozen=True)
class RolloutStatus:
    """What the InferenceService's status says about its revisions and traffic."""

    name: str
    namespace: str
    ready: bool
    reason: str
    generation: int | None
    observed_generation: int | None
    canary_percent: int | None  # the spec's, None when absent
    storage_uri: str | None
    latest_created: str | None
    latest_ready: str | None
    latest_rolled_out: str | None
    previous_rolled_out: str | None
    latest_percent: int | None  # traffic the controller reports for the newest revision
    traffic: list[dict[str, Any]] = field(default_factory=list)
    url: str | None = None
    latest_url: str | None = None  # the tag-routing host of the newest revision alone
    prev_url: str | None = None

    @classmethod
    def of(cls, obj: dict[str, Any]) -> RolloutStatus:
        meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status") or {}
        predictor_spec = spec.get("predictor", {})
        predictor = (status.get("components") or {}).get("predictor") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        ready = conditions.get("Ready", {})
        # the first condition that is not True says why the service is not ready
        blocking: dict[str, Any] = next((c for c in conditions.values() if c.get("status") != "True"), {})
        reason = blocking.get("message") or blocking.get("reason") or ("" if blocking else "ready")
        traffic = list(predictor.get("traffic") or [])
        latest = [t for t in traffic if t.get("latestRevision")]
        by_tag = {t.get("tag"): t.get("url") for t in traffic if t.get("tag")}
        return cls(
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            ready=ready.get("status") == "True",
            reason=str(reason),
            generation=meta.get("generation"),
            observed_generation=status.get("observedGeneration"),
            canary_percent=predictor_spec.get("canaryTrafficPercent"),
            storage_uri=(predictor_spec.get("model") or {}).get("storageUri"),
            latest_created=predictor.get("latestCreatedRevision"),
            latest_ready=predictor.get("latestReadyRevision"),
            latest_rolled_out=predictor.get("latestRolledoutRevision"),
            previous_rolled_out=predictor.get("previousRolledoutRevision"),
            latest_percent=sum(int(t.get("percent") or 0) for t in latest) if latest else None,
            traffic=traffic,
            url=status.get("url"),
            latest_url=by_tag.get("latest"),
            prev_url=by_tag.get("prev"),
        )

    @property
    def _spec_observed(self) -> bool:
        """The controller has reconciled the current spec (no generations known: assume so)."""
        if self.generation is None or self.observed_generation is None:
            return True
        return self.observed_generation >= self.generation

    @property
    def revision_ready(self) -> bool:
        """Ready, on the latest spec, and the newest revision is the ready one."""
        return self.waiting_for(None) is None

    def waiting_for(self, latest_percent: int | None) -> str | None:
        """What is still missing, or None when the rollout has settled as asked."""
        if not self.ready:
            return f"not Ready: {self.reason or 'no status yet'}"
        if not self._spec_observed:
            return f"controller has not seen generation {self.generation} yet"
        if self.latest_created is None or self.latest_ready != self.latest_created:
            return f"newest revision {self.latest_created} not ready (ready: {self.latest_ready})"
        if latest_percent is not None and self.latest_percent != latest_percent:
            return f"newest revision has {self.latest_percent}% of traffic, waiting for {latest_percent}%"
        return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"revision_ready": self.revision_ready}


@dataclass(frozen=True)
class ApplyResult:
    action: str  # "created" or "patched"
    status: RolloutStatus


def apply(services: InferenceServices, spec: ServiceSpec) -> ApplyResult:
    """Create the InferenceService, or merge-patch the release fields of the existing one."""
    existing = services.get(spec.name)
    if existing is None:
        return ApplyResult("created", RolloutStatus.of(services.create(render(spec))))
    return ApplyResult("patched", RolloutStatus.of(services.patch(spec.name, release_patch(spec))))


def expected_latest_percent(result: ApplyResult, spec: ServiceSpec) -> int:
    """The traffic the newest revision should end with after ``apply``."""
    if result.action == "created" or spec.canary_percent is None:
        return 100  # a first revision has nothing to split with
    return spec.canary_percent


def wait_ready(
    services: InferenceServices,
    name: str,
    *,
    timeout_s: float,
    latest_percent: int | None = None,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_poll: Callable[[RolloutStatus], None] | None = None,
) -> RolloutStatus:
    """Poll until the newest revision is ready (and has ``latest_percent`` % of traffic)."""
    deadline = clock() + timeout_s
    while True:
        status = RolloutStatus.of(services.require(name))
        if on_poll is not None:
            on_poll(status)
        missing = status.waiting_for(latest_percent)
        if missing is None:
            return status
        if clock() >= deadline:
            raise RolloutTimeoutError(
                f"InferenceService {name}: {missing} after {timeout_s:g} s",
                hint="see `kubectl describe isvc` and the predictor pods' logs; "
                "`builder release rollback` sends traffic back to the previous revision",
            )
        sleep(min(poll_s, max(0.0, deadline - clock())))


def promote(services: InferenceServices, name: str, *, force: bool = False) -> RolloutStatus:
    """Send all traffic to the newest revision; refused while that revision is not ready."""
    before = RolloutStatus.of(services.require(name))
    if not force and not before.revision_ready:
        raise ReleaseError(
            f"refusing to promote {name}: {before.waiting_for(None)}",
            hint="wait for the canary (`builder release status`), roll back, or pass --force",
        )
    return RolloutStatus.of(services.patch(name, promote_patch()))


def rollback(services: InferenceServices, name: str) -> RolloutStatus:
    """Send all traffic back to the previous rolled-out revision (always allowed)."""
    before = RolloutStatus.of(services.require(name))
    if before.previous_rolled_out is None and before.latest_rolled_out == before.latest_created:
        raise ReleaseError(
            f"{name} has no previous revision to roll back to (newest: {before.latest_created})",
            hint="roll back by applying the previous model version instead",
        )
    return RolloutStatus.of(services.patch(name, rollback_patch()))
