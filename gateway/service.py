"""The long-lived clients of one gateway process, created once and shared by both transports."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.auth import ApiKeys
from gateway.core import Predictor
from gateway.features import OnlineFeatures
from gateway.payload_log import PayloadLog, open_payload_log
from gateway.request import EntityRow
from gateway.settings import GatewaySettings
from gateway.triton import TritonClient


@dataclass
class Service:
    settings: GatewaySettings
    predictor: Predictor
    auth: ApiKeys
    models: tuple[str, ...]  # what /readyz checks
    payload_log: PayloadLog | None = None

    @classmethod
    async def open(cls, settings: GatewaySettings, models: tuple[str, ...]) -> Service:
        import os

        if settings.redis_url:
            os.environ.setdefault("REDIS_CONNECTION_STRING", settings.redis_url)
        # Opening the store reads the Feast registry (blocking): keep it off the event loop.
        features = await asyncio.to_thread(
            OnlineFeatures,
            settings.feature_repo,
            settings.online_store,
            settings.feature_timeout_s,
            settings.feature_reads,
        )
        triton = TritonClient(settings.triton_url, settings.triton_timeout_s, settings.triton_reconnect_max_s)
        payload_log = open_payload_log(settings, features)
        observers = (payload_log,) if payload_log else ()
        predictor = Predictor(settings, triton, features, observers)
        return cls(settings, predictor, ApiKeys.from_settings(settings), models, payload_log)

    async def close(self) -> None:
        await self.predictor.triton.close()
        if self.payload_log is not None:  # writes what is queued, within its close_s
            await asyncio.to_thread(self.payload_log.close)

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
