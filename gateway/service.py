"""The long-lived clients of one gateway process, created once and shared by both transports."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY
from prometheus_client.registry import Collector

from gateway.auth import ApiKeys
from gateway.clients.direct_features import DirectFeatures
from gateway.clients.features import OnlineFeatures
from gateway.clients.triton import connect
from gateway.core import Predictor
from gateway.drift.metrics import DriftCollector
from gateway.drift.monitor import DriftMonitor
from gateway.errors import BadRequest, Unavailable
from gateway.evidence.open import open_store
from gateway.evidence.store import EvidenceStore
from gateway.evidence.writer import EvidenceWriter
from gateway.fallback.switch import FallbackSwitch
from gateway.payload_log import open_payload_log
from gateway.quality.feedback import LabelGate
from gateway.quality.live import QualityMonitor
from gateway.request import EntityRow
from gateway.settings import FeatureSettings, GatewaySettings
from gateway.shadow.runner import ShadowRunner, Watchers
from gateway.stats.measures import Thresholds

if TYPE_CHECKING:
    from gateway.payload_log.writer import PayloadLog


@dataclass
class Service:
    settings: GatewaySettings
    predictor: Predictor
    auth: ApiKeys
    models: tuple[str, ...]  # what /readyz checks
    drift: DriftMonitor | None = None  # None: GATEWAY_DRIFT_SAMPLE=0
    payload_log: PayloadLog | None = None  # None: no GATEWAY_PAYLOAD_LOG
    shadow: ShadowRunner | None = None  # None: no GATEWAY_SHADOW
    quality: QualityMonitor | None = None  # predictions by id, for labels; None only if built by hand
    evidence: EvidenceStore | None = None  # what every replica shares (gateway/evidence/)
    writer: EvidenceWriter | None = None
    fallback: FallbackSwitch | None = None  # None: no GATEWAY_FALLBACK
    labels: LabelGate = field(default_factory=LabelGate)  # feedback requests, one at a time
    _collectors: tuple[Collector, ...] = ()

    @classmethod
    async def open(cls, settings: GatewaySettings, models: tuple[str, ...]) -> Service:
        features = await _open_features(settings.features)
        await features.prepare()
        triton = connect(settings.triton.url, settings.triton.timeout_s, settings.triton.reconnect_max_s)
        drift = _drift_monitor(settings)
        payload_log = open_payload_log(settings, features)
        predictor = Predictor(settings, triton, features)
        evidence = open_store(settings, features.redis_connection())
        writer = quality = None
        if evidence is not None:
            writer = EvidenceWriter(evidence)
            writer.start()
            quality = QualityMonitor(evidence, writer)
        shadow = None
        if settings.shadow.targets and evidence is not None and writer is not None:
            # the payload log then hears of shadowed batches once both answered
            watchers = Watchers(log=payload_log, quality=quality)
            shadow = ShadowRunner(
                settings.shadow.targets,
                settings.shadow.in_flight,
                triton,
                predictor.spec,
                watchers,
                writer,
                settings.triton.spec_ttl_s,
            )
        predictor.observers = tuple(o for o in (drift, quality, shadow or payload_log) if o is not None)
        fallback = None
        if settings.fallback.rules and evidence is not None and quality is not None:
            fallback = FallbackSwitch(
                settings.fallback.rules,
                evidence,
                quality,
                predictor.spec,
                triton.ready_versions,
                settings.fallback.poll_s,
                settings.fallback.judge_s,
            )
            predictor.fallback = fallback
            fallback.start()
        service = cls(
            settings,
            predictor,
            ApiKeys.from_settings(settings),
            models,
            drift,
            payload_log=payload_log,
            shadow=shadow,
            quality=quality,
            evidence=evidence,
            writer=writer,
            fallback=fallback,
        )
        if evidence is not None:
            _zero_counters(models)
        candidates = (DriftCollector(drift),) if drift is not None else ()
        service._collectors = tuple(c for c in candidates if _register(c))
        return service

    def quality_monitor(self) -> QualityMonitor:
        if self.quality is None:
            raise Unavailable(
                "this gateway keeps no predictions for feedback (GATEWAY_STATE_URL=off)", cause="quality_off"
            )
        return self.quality

    def fallback_switch(self, model: str) -> FallbackSwitch:
        if self.fallback is None:
            raise BadRequest(f"model {model!r} has no fallback (GATEWAY_FALLBACK is empty)")
        return self.fallback

    async def close(self) -> None:
        """Close the clients, once no call uses them any more: the servers have stopped first
        (gateway/lifecycle.py). The payload log writes what is queued before the store closes."""
        for collector in self._collectors:
            REGISTRY.unregister(collector)
        self._collectors = ()
        if self.fallback is not None:
            await self.fallback.close()
        if self.shadow is not None:  # challenger calls in flight use the Triton client
            await self.shadow.close()
        if self.writer is not None:  # what observers handed over still goes to the store
            await self.writer.close()
        if self.evidence is not None:
            await self.evidence.close()
        await self.predictor.triton.close()
        if self.payload_log is not None:  # writes what is queued, within its close_s
            await asyncio.to_thread(self.payload_log.close)
        await self.predictor.features.close()

    async def ready(self) -> dict[str, object]:
        """Ready = Triton live, every model ready in Triton, and the online store answering."""
        checks: dict[str, object] = {"triton": await self.predictor.triton.is_live()}
        for model in self.models:
            try:
                self.predictor.forget(model)
                spec = await self.predictor.spec(model)
                checks[f"model:{model}"] = True
                # any key of the right type: an unknown entity still proves the store answers
                probe: EntityRow = {k.name: "" if k.dtype == "string" else 0 for k in spec.entity_keys}
                checks[f"online_store:{spec.feature_service}"] = await self.predictor.features.ping(
                    spec.feature_service, probe
                )
            except Exception as exc:  # any failure means "not ready", with the reason shown
                checks[f"model:{model}"] = f"not ready: {getattr(exc, 'message', exc)}"
        checks["ready"] = all(v is True for v in checks.values())
        return checks


def _drift_monitor(settings: GatewaySettings) -> DriftMonitor | None:
    if settings.drift.sample <= 0:
        return None
    thresholds = Thresholds(
        settings.drift.psi_warn,
        settings.drift.psi_alert,
        settings.drift.min_rows,
        settings.drift.null_warn,
        settings.drift.null_alert,
    )
    return DriftMonitor(settings.drift.sample, thresholds)


def _register(collector: Collector) -> bool:
    """A monitor's metrics on /metrics; a second Service in one process (a test, a CLI opening
    one beside a server) keeps its counts and endpoint but cannot share the metric names."""
    try:
        REGISTRY.register(collector)
    except ValueError:
        logging.getLogger("gateway").warning("%s metrics are already registered", type(collector).__name__)
        return False
    return True


def _zero_counters(models: tuple[str, ...]) -> None:
    """Each served model's evidence counters from 0, so Prometheus's ``increase()`` sees their
    first loss or first unknown label (a series born at 1 has no increase to see)."""
    from gateway import metrics
    from gateway.quality import prom
    from gateway.quality.feedback import OUTCOMES

    for model in models:
        for what in ("prediction", "challenger", "shadow"):
            metrics.EVIDENCE_LOST.labels(model, what)
        for outcome in OUTCOMES:
            prom.FEEDBACK_LABELS.labels(model, outcome)


async def _open_features(settings: FeatureSettings) -> OnlineFeatures | DirectFeatures:
    """The direct reader over compiled specs, or the Feast SDK's client (``feature_reader=sdk``,
    or no specs folder: a caller that did not compile one, like the skew check). Either opens
    blocking (a registry read, the specs' stores): off the event loop."""
    if settings.reader == "direct" and settings.specs is not None:
        return await asyncio.to_thread(DirectFeatures, settings.specs, settings)
    return await asyncio.to_thread(
        OnlineFeatures,
        settings.repo,
        settings.online_store,
        settings.timeout_s,
        settings.reads,
        settings.redis_url,  # over an inherited REDIS_CONNECTION_STRING; os.environ untouched
    )
