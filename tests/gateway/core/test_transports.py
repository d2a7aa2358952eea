"""What the layout by transport promises a user, without servers: the operator's flat GATEWAY_*
names still reach the nested settings (and an error still names them), and every route of both
transports (the /v1 and Open Inference Protocol routes over HTTP, both gRPC services) takes the
one auth check and answers its refusal in its protocol's shape."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2
from typer.testing import CliRunner

from gateway.auth import ApiKeys
from gateway.cli import app as gateway_cli
from gateway.core import Predictor
from gateway.grpc import server as grpc_server
from gateway.http import app as http_app
from gateway.proto import gateway_pb2
from gateway.service import Service
from gateway.settings import GatewaySettings, nest
from support.servers import free_port
from tests.gateway.core.helpers import FakeFeatures, FakeTriton, amounts, config

KEY = "s3cret"


def test_the_flat_environment_names_parse_into_the_nested_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "GATEWAY_TRITON_URL": "grpc://triton:8001",
        "GATEWAY_TRITON_TIMEOUT_S": "0.75",
        "GATEWAY_FEATURE_REPO": "/srv/features",
        "GATEWAY_ONLINE_STORE": "redis",
        "GATEWAY_DRIFT_SAMPLE": "0.25",
        "GATEWAY_DRIFT_PSI_ALERT": "0.3",
        "GATEWAY_MAX_BODY_BYTES": "4096",
        "GATEWAY_API_KEYS": "a,b",
        "GATEWAY_METRICS_REQUIRE_KEY": "true",
        "GATEWAY_PAYLOAD_LOG": "s3://bucket/log",
        "GATEWAY_PAYLOAD_LOG_SAMPLE": "0.5",
        "GATEWAY_SHADOW": '{"fraud-detector": {"version": "2", "share": 0.5}}',
        "GATEWAY_STATE_TTL_S": "3600",
        "GATEWAY_GRPC_PORT": "0",
        "GATEWAY_MODELS": '["a", "b"]',
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = GatewaySettings()
    assert settings.triton.url == "grpc://triton:8001" and settings.triton.timeout_s == 0.75
    assert settings.features.repo == Path("/srv/features") and settings.features.online_store == "redis"
    assert (settings.drift.sample, settings.drift.psi_alert) == (0.25, 0.3)
    assert settings.limits.max_body_bytes == 4096
    assert settings.auth.api_keys is not None and settings.auth.api_keys.get_secret_value() == "a,b"
    assert settings.auth.metrics_require_key is True
    assert (settings.payload_log.url, settings.payload_log.sample) == ("s3://bucket/log", 0.5)
    assert settings.shadow.targets["fraud-detector"].version == "2"
    assert settings.state.ttl_s == 3600 and settings.server.grpc_port == 0
    assert settings.models == ("a", "b")
    # a flag (nested by the CLI) wins over the environment, the rest of its section is kept
    flagged = GatewaySettings(**nest({"triton_url": "http://other:8000"}))
    assert flagged.triton.url == "http://other:8000" and flagged.triton.timeout_s == 0.75


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("GATEWAY_DRIFT_SAMPLE", "2", "setting drift_sample: Input should be less than or equal to 1"),
        ("GATEWAY_TRITON_URL", "ftp://triton:8000", "setting triton_url:"),
        ("GATEWAY_DRIFT_PSI_WARN", "0.5", "GATEWAY_DRIFT_PSI_WARN (0.5) is above GATEWAY_DRIFT_PSI_ALERT"),
        ("GATEWAY_FALLBACK", "{", "GATEWAY_FALLBACK is not valid JSON"),
    ],
)
def test_a_bad_variable_is_refused_by_the_name_the_operator_set(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    result = CliRunner().invoke(gateway_cli, ["serve", "--feature-repo", "feature_repo"])
    assert result.exit_code == 2
    assert says in " ".join(result.output.split())
    assert "Traceback" not in result.output


def _service(**flat: Any) -> Service:
    settings = GatewaySettings(**nest({"models": ("m",), "api_keys": KEY, **flat}))
    cfg = config({"serving.kind": "regression"}, {"value": ["1"]})
    predictor = Predictor(settings, FakeTriton(cfg, lambda i: {"value": amounts(i)}), FakeFeatures())  # type: ignore[arg-type]
    return Service(settings, predictor, ApiKeys.from_settings(settings), ("m",))


async def _http(app: Any, method: str, path: str, key: str | None) -> tuple[int, Any]:
    sent: list[dict[str, Any]] = []
    body = b'{"customer_id": "C-1", "amount": 5.0, "channel": "web"}' if method == "POST" else b""
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await asyncio.sleep(3600)
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    if key is not None:
        headers.append((b"x-api-key", key.encode()))
    path_only, _, query = path.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path_only, "raw_path": path_only.encode(),
        "query_string": query.encode(), "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, data


KEYED = [
    ("POST", "/v1/models/m/predict"),
    ("GET", "/v1/models/m/drift"),
    ("GET", "/v1/models/m/shadow"),
    ("POST", "/v1/models/m/feedback"),
    ("GET", "/v1/models/m/quality?window=1h"),
    ("GET", "/v1/models/m/fallback"),
    ("POST", "/v1/models/m/fallback"),
    ("GET", "/v2/models/m"),
    ("GET", "/v2/models/m/versions/3/ready"),
    ("GET", "/v2/models/m/config"),
    ("POST", "/v2/models/m/infer"),
]


@pytest.mark.parametrize(("method", "path"), KEYED)
def test_every_model_route_takes_the_key_and_refuses_in_its_protocols_shape(method: str, path: str) -> None:
    app = http_app.create_app(_service())
    missing, body = asyncio.run(_http(app, method, path, None))
    wrong, _ = asyncio.run(_http(app, method, path, "nope"))
    assert (missing, wrong) == (401, 403)
    if path.startswith("/v2/"):  # the Open Inference Protocol's one-line error
        assert json.loads(body) == {"error": "missing API key: send X-API-Key or Authorization: Bearer"}
    else:
        assert json.loads(body)["cause"] == "unauthenticated"
    status, _ = asyncio.run(_http(app, method, path, KEY))
    assert status not in (401, 403)  # past the check: the route's own answer


@pytest.mark.parametrize("path", ["/healthz", "/v2/health/live", "/v2", "/metrics"])
def test_the_probes_and_metrics_stay_open(path: str) -> None:
    status, _ = asyncio.run(_http(http_app.create_app(_service()), "GET", path, None))
    assert status == 200


def test_metrics_take_the_key_when_asked_to() -> None:
    app = http_app.create_app(_service(metrics_require_key=True))
    assert asyncio.run(_http(app, "GET", "/metrics", None))[0] == 401
    assert asyncio.run(_http(app, "GET", "/metrics", KEY))[0] == 200


def test_both_grpc_services_take_the_key_the_oip_probes_stay_open() -> None:
    service = _service()

    async def main() -> dict[str, Any]:
        port = free_port()
        server = grpc_server.create_server(service, f"127.0.0.1:{port}")
        await server.start()
        codes: dict[str, Any] = {}
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                calls = {
                    "Predict": ("/gateway.v1.Gateway/Predict", gateway_pb2.PredictRequest(model="m")),
                    "ModelMetadata": (
                        "/inference.GRPCInferenceService/ModelMetadata",
                        service_pb2.ModelMetadataRequest(name="m"),
                    ),
                    "ModelInfer": (
                        "/inference.GRPCInferenceService/ModelInfer",
                        service_pb2.ModelInferRequest(model_name="m"),
                    ),
                    "ServerLive": (
                        "/inference.GRPCInferenceService/ServerLive",
                        service_pb2.ServerLiveRequest(),
                    ),
                }
                for name, (method, message) in calls.items():
                    call = channel.unary_unary(method, request_serializer=type(message).SerializeToString)
                    try:
                        await call(message, timeout=10)
                        codes[name] = grpc.StatusCode.OK
                    except grpc.aio.AioRpcError as exc:
                        codes[name] = (exc.code(), exc.details())
        finally:
            await server.stop(None)
        return codes

    codes = asyncio.run(main())
    refused = (grpc.StatusCode.UNAUTHENTICATED, "missing API key: send X-API-Key or Authorization: Bearer")
    assert codes == {
        "Predict": refused,
        "ModelMetadata": refused,
        "ModelInfer": refused,
        "ServerLive": grpc.StatusCode.OK,
    }
