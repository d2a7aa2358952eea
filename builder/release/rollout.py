"""Apply a model version as a canary, wait for its revision, promote or roll back.

Readiness is read from the InferenceService's status the way KServe reports it: condition
``Ready`` is ``True``, the controller has seen the latest spec (``observedGeneration``), and
``components.predictor.latestReadyRevision`` equals ``latestCreatedRevision`` -- before that, a
``Ready`` status may still describe the previous revision. After promote or rollback the wait
also checks the traffic split the controller reports for the newest revision.

In Standard mode (KServe >= 0.20, see ``modes``) there are no revisions: the wait wants
``Ready``, the spec observed, a ready ``status.canaryStatuses`` entry for every ``spec.canary``
entry and none left for a removed one; "the newest version" is the release's canary while there
is one (its ``trafficPercent``), else the stable predictor (the share canaries leave it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from builder.release import modes
from builder.release import standard as std
from builder.release.errors import ReleaseError, RolloutTimeoutError
from builder.release.kube import InferenceServices
from builder.release.manifest import ServiceSpec, promote_patch, release_patch, render, rollback_patch
from builder.release.modes import Mode

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
    latest_url: str | None = None  # the newest version alone: tag-routing host / canary Service
    prev_url: str | None = None
    mode: str | None = None  # "serverless" | "standard"; None when the object does not say
    stable_name: str | None = None  # Standard: spec.predictor.name (None: KServe's default)
    canary_name: str | None = None  # Standard: the release's spec.canary entry, if any
    canary_names: list[str] = field(default_factory=list)  # Standard: every spec.canary entry
    canaries: list[dict[str, Any]] = field(default_factory=list)  # Standard: status.canaryStatuses

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
        mode = modes.mode_of(obj)
        if mode is Mode.STANDARD:
            return cls._standard(obj, str(reason), ready.get("status") == "True")
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
            mode=mode.value if mode else None,
        )

    @classmethod
    def _standard(cls, obj: dict[str, Any], reason: str, ready: bool) -> RolloutStatus:
        meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status") or {}
        stable = spec.get("predictor", {})
        entries = std.canaries(obj)
        ours: dict[str, Any] | None = None
        if entries:
            try:
                ours = std.our_canary(obj)
            except ReleaseError:
                ours = None  # several canaries, none of this release: status shows them all
        statuses = list(status.get("canaryStatuses") or [])
        by_name = {s.get("name"): s for s in statuses}
        name = meta.get("name", "")
        ours_name = std.entry_name(ours) if ours else None
        if ours_name is not None:
            reported = by_name.get(ours_name) or {}
            latest_percent = reported.get("trafficPercent") if reported.get("ready") else None
        else:
            latest_percent = 100 - sum(int(s.get("trafficPercent") or 0) for s in statuses if s.get("ready"))
        predictor_spec = ours["predictor"] if ours else stable
        return cls(
            name=name,
            namespace=meta.get("namespace", ""),
            ready=ready,
            reason=reason,
            generation=meta.get("generation"),
            observed_generation=status.get("observedGeneration"),
            canary_percent=ours.get("trafficPercent") if ours else None,
            storage_uri=(predictor_spec.get("model") or {}).get("storageUri"),
            latest_created=None,
            latest_ready=None,
            latest_rolled_out=None,
            previous_rolled_out=None,
            latest_percent=latest_percent,
            url=status.get("url"),
            # KServe names a canary's Service <isvc>-<name>-predictor (cluster-local, port 80)
            latest_url=(
                f"http://{name}-{ours_name}-predictor.{meta.get('namespace', '')}.svc.cluster.local"
                if ours_name
                else None
            ),
            mode=Mode.STANDARD.value,
            stable_name=stable.get("name"),
            canary_name=ours_name,
            canary_names=[str(std.entry_name(c)) for c in entries],
            canaries=statuses,
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
        if self.mode == Mode.STANDARD.value:
            return self._standard_waiting_for(latest_percent)
        if self.latest_created is None or self.latest_ready != self.latest_created:
            return f"newest revision {self.latest_created} not ready (ready: {self.latest_ready})"
        if latest_percent is not None and self.latest_percent != latest_percent:
            return f"newest revision has {self.latest_percent}% of traffic, waiting for {latest_percent}%"
        return None

    def _standard_waiting_for(self, latest_percent: int | None) -> str | None:
        by_name = {c.get("name"): c for c in self.canaries}
        for name in self.canary_names:
            if not (by_name.get(name) or {}).get("ready"):
                return f"canary {name} not ready"
        for gone in sorted(str(n) for n in by_name.keys() - set(self.canary_names)):
            return f"canary {gone} is still being removed"
        if latest_percent is not None and self.latest_percent != latest_percent:
            return f"newest version has {self.latest_percent}% of traffic, waiting for {latest_percent}%"
        return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"revision_ready": self.revision_ready}


@dataclass(frozen=True)
class ApplyResult:
    action: str  # "created" or "patched"
    status: RolloutStatus
    mode: Mode = Mode.SERVERLESS


def apply(services: InferenceServices, spec: ServiceSpec) -> ApplyResult:
    """Create the InferenceService, or merge-patch the release fields of the existing one, in
    the mode ``spec.mode`` asks for or (auto) the live object runs in."""
    existing = services.get(spec.name)
    mode = modes.resolve(spec.mode, existing)
    spec = replace(spec, mode=mode)
    if existing is None:
        return ApplyResult("created", RolloutStatus.of(services.create(render(spec))), mode)
    if mode is Mode.SERVERLESS:
        patch = release_patch(spec)
    elif spec.canary_percent is None:
        patch = std.full_patch(spec, existing)
    else:
        patch = std.canary_patch(spec, existing)
        # The API server prunes fields its CRD does not declare: ask it first, storing nothing
        preview = services.patch(spec.name, patch, dry_run=True)
        name = std.canary_name(spec.model_version)
        if not any(std.entry_name(c) == name for c in std.canaries(preview)):
            raise modes.canary_field_missing(
                f"the cluster's InferenceService CRD (the API server dropped spec.canary from {spec.name})"
            )
    return ApplyResult("patched", RolloutStatus.of(services.patch(spec.name, patch)), mode)


def expected_latest_percent(result: ApplyResult, spec: ServiceSpec) -> int:
    """The traffic the newest revision should end with after ``apply``."""
    if result.action == "created" or spec.canary_percent is None:
        return 100  # a first revision has nothing to split with
    return spec.canary_percent


@dataclass(frozen=True)
class Pacing:
    """How often ``wait_ready`` polls, and the clock it reads and sleeps on: real time unless a
    test passes one that moves only when the code sleeps."""

    poll_s: float = POLL_S
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


REAL_TIME = Pacing()


def wait_ready(
    services: InferenceServices,
    name: str,
    *,
    timeout_s: float,
    latest_percent: int | None = None,
    on_poll: Callable[[RolloutStatus], None] | None = None,
    pacing: Pacing = REAL_TIME,
) -> RolloutStatus:
    """Poll until the newest revision is ready (and has ``latest_percent`` % of traffic)."""
    clock, sleep, poll_s = pacing.clock, pacing.sleep, pacing.poll_s
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


def promote(
    services: InferenceServices, name: str, *, force: bool = False, mode: Mode = Mode.AUTO
) -> RolloutStatus:
    """Send all traffic to the newest version; refused while it is not ready.

    Serverless: remove ``canaryTrafficPercent``. Standard: the stable predictor takes the
    canary's name and model and the canary entry goes (``standard.promote_patch``)."""
    live = services.require(name)
    standard = modes.resolve(mode, live) is Mode.STANDARD
    patch = std.promote_patch(live) if standard else promote_patch()  # no canary: ReleaseError
    before = RolloutStatus.of(live)
    if not force and not before.revision_ready:
        raise ReleaseError(
            f"refusing to promote {name}: {before.waiting_for(None)}",
            hint="wait for the canary (`builder release status`), roll back, or pass --force",
        )
    return RolloutStatus.of(services.patch(name, patch))


def expected_after(operation: str, status: RolloutStatus) -> int | None:
    """The newest version's traffic once ``promote``/``rollback`` has settled; None in Standard
    mode, where the wait checks instead that the canary is gone (other canaries may hold some)."""
    if status.mode == Mode.STANDARD.value:
        return None
    return 100 if operation == "promote" else 0


def rollback(services: InferenceServices, name: str, *, mode: Mode = Mode.AUTO) -> RolloutStatus:
    """Send all traffic back to the previous version (always allowed). Serverless:
    ``canaryTrafficPercent: 0``; Standard: drop the canary entry."""
    live = services.require(name)
    if modes.resolve(mode, live) is Mode.STANDARD:
        return RolloutStatus.of(services.patch(name, std.rollback_patch(live)))
    before = RolloutStatus.of(live)
    if before.previous_rolled_out is None and before.latest_rolled_out == before.latest_created:
        raise ReleaseError(
            f"{name} has no previous revision to roll back to (newest: {before.latest_created})",
            hint="roll back by applying the previous model version instead",
        )
    return RolloutStatus.of(services.patch(name, rollback_patch()))
