"""One gateway lifecycle (gateway/lifecycle.py): on shutdown both servers stop, draining what is
in flight, before the Triton client and the online store close; and the settings reach the
online store as parameters (``--redis-url`` over an inherited ``REDIS_CONNECTION_STRING``).

The servers are the real uvicorn and grpc.aio ones; the Service's clients are stand-ins that
record when they are called and closed."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import grpc
import pytest

from feast_access.store import REDIS_ENV
from feature_repo import REPO_PATH
from gateway import lifecycle
from gateway.auth import ApiKeys
from gateway.proto import gateway_pb2
from gateway.request import PredictRequest
from gateway.responses import Prediction, PredictResult
from gateway.service import Service
from gateway.settings import GatewaySettings, nest
from support.servers import free_port

PREDICT = "/gateway.v1.Gateway/Predict"


class SlowPredictor:
    """Answers after ``delay_s``; records its calls and the closing of its clients in ``events``."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.events: list[str] = []
        self.started = asyncio.Event()
        self.triton = self.Client(self.events, "triton")
        self.features = self.Client(self.events, "features")

    class Client:
        def __init__(self, events: list[str], name: str) -> None:
            self.events, self.name = events, name

        async def close(self) -> None:
            self.events.append(f"{self.name} closed")

    async def predict(self, request: PredictRequest) -> PredictResult:
        self.events.append("predict started")
        self.started.set()
        await asyncio.sleep(self.delay_s)
        self.events.append("predict answered")
        return PredictResult(request.model, "1", "binary", (0, 1), [Prediction(False, score=0.25)], 1.0)


def test_shutdown_drains_a_grpc_call_in_flight_before_triton_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = GatewaySettings(
        **nest({"host": "127.0.0.1", "port": free_port(), "grpc_port": free_port(), "models": ("m",)})
    )
    predictor = SlowPredictor(delay_s=0.5)

    async def open_service(settings: GatewaySettings, models: tuple[str, ...]) -> Service:
        return Service(settings, predictor, ApiKeys.from_settings(settings), models)  # type: ignore[arg-type]

    monkeypatch.setattr(lifecycle.Service, "open", open_service)

    async def main() -> gateway_pb2.PredictResponse:
        async with lifecycle.running(settings, settings.models) as gateway:
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{settings.server.grpc_port}")
            call = channel.unary_unary(
                PREDICT,
                request_serializer=gateway_pb2.PredictRequest.SerializeToString,
                response_deserializer=gateway_pb2.PredictResponse.FromString,
            )
            reply = asyncio.ensure_future(call(gateway_pb2.PredictRequest(model="m", rows=[{}]), timeout=10))
            await asyncio.wait_for(predictor.started.wait(), 10)
            gateway.stop()  # what SIGINT/SIGTERM do
            await gateway.wait()
        # the context has ended: servers stopped, service closed; the call was answered before
        answer = await reply
        await channel.close()
        return answer

    answer = asyncio.run(main())
    assert answer.model == "m" and answer.predictions[0].score == 0.25
    assert predictor.events == ["predict started", "predict answered", "triton closed", "features closed"]


def test_redis_url_wins_over_an_inherited_connection_string(monkeypatch: pytest.MonkeyPatch) -> None:
    """GATEWAY_REDIS_URL (``--redis-url``) is the store's address, the environment's is not used
    (nor written): the store's config, and the reachability probe of a timed-out read."""
    from gateway.clients.features import OnlineFeatures

    monkeypatch.setenv(REDIS_ENV, "127.0.0.1:1")  # inherited, pointing nowhere

    async def main() -> tuple[str, bool, bool]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(64)
            writer.write(b"+PONG\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            flat = {"online_store": "redis", "redis_url": f"127.0.0.1:{port}", "feature_repo": REPO_PATH}
            settings = GatewaySettings(**nest(flat))
            features = await asyncio.to_thread(
                OnlineFeatures,
                settings.features.repo,
                settings.features.online_store,
                1.0,
                "inline",
                settings.features.redis_url,
            )
            unset = OnlineFeatures(REPO_PATH, "redis", 1.0)  # no URL: the environment's, as before
            try:
                address = str(features.store.config.online_store.connection_string)
                return address, await features._reachable(), await unset._reachable()
            finally:
                await features.close()
                await unset.close()

    address, reachable, reachable_from_env = asyncio.run(main())
    assert address.startswith("127.0.0.1:") and address != "127.0.0.1:1"
    assert reachable and not reachable_from_env
    assert os.environ[REDIS_ENV] == "127.0.0.1:1"


def test_service_open_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REDIS_ENV, raising=False)
    flat = {"online_store": "redis", "redis_url": "127.0.0.1:7", "feature_repo": REPO_PATH, "drift_sample": 0}
    settings = GatewaySettings(**nest(flat))

    async def main() -> Any:
        service = await Service.open(settings, ())
        try:
            return service.predictor.features.store.config.online_store.connection_string
        finally:
            await service.close()

    assert asyncio.run(main()) == "127.0.0.1:7"
    assert REDIS_ENV not in os.environ
