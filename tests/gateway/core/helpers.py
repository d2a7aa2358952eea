"""Helpers of the tests in this folder."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from gateway.auth import ApiKeys
from gateway.catalog import ModelSpec, spec_from_config
from gateway.clients.features import FeatureRows
from gateway.core import Predictor
from gateway.drift.monitor import DriftMonitor
from gateway.grpc import server as grpc_server
from gateway.http import app as http_app
from gateway.proto import gateway_pb2
from gateway.responses import PredictResult, predictions
from gateway.service import Service
from gateway.settings import GatewaySettings
from support.servers import free_port

KEYS = {"customer_id": "string"}


def config(params: dict[str, Any], outputs: dict[str, list[str]], max_batch_size: int = 8) -> dict:
    """A Triton model config as tritonclient's ``as_json`` gives it; ``outputs``: name -> dims."""
    base: dict[str, Any] = {
        "feast.feature_service": "svc",
        "feast.entity_keys": "customer_id",
        "feast.request_fields": '["amount", "channel"]',
        "serving.layout": "columns",
        "serving.columns": json.dumps(COLUMNS),
    }
    base.update({k: v if isinstance(v, str) or v is None else json.dumps(v) for k, v in params.items()})
    return {
        "name": "m",
        "max_batch_size": max_batch_size,
        "input": [{"name": c["name"], "data_type": TRITON[c["dtype"]], "dims": ["1"]} for c in COLUMNS],
        "output": [{"name": n, "dims": d} for n, d in outputs.items()],
        "parameters": {k: {"string_value": v} for k, v in base.items() if v is not None},
    }


def spec_of(cfg: dict) -> ModelSpec:
    return spec_from_config("m", "m", "3", cfg, KEYS)


def result(spec: ModelSpec, out: dict[str, np.ndarray]) -> PredictResult:
    n = len(next(iter(out.values())))
    return PredictResult("m", "3", spec.kind, spec.classes, predictions(spec, out, [False] * n), 1.0)


def reference(prediction: dict[str, Any] | None) -> str:
    features = [
        {"name": "amount", "kind": "numeric", "edges": [10.0, 20.0], "counts": [10, 10, 10], "nulls": 0},
        {
            "name": "channel",
            "kind": "categorical",
            "categories": ["web", "app"],
            "counts": [15, 10, 5],
            "nulls": 0,
        },
        {"name": "visits", "kind": "numeric", "edges": [2.0], "counts": [15, 15], "nulls": 0},
    ]
    raw: dict[str, Any] = {"format": 1, "rows": 30, "source": "test", "features": features}
    if prediction is not None:
        raw["prediction"] = prediction
    return json.dumps(raw)


def amounts(inputs: dict[str, np.ndarray]) -> np.ndarray:
    return inputs["amount"].astype(np.float32).reshape(-1, 1)


def service_of(cfg: dict, answer: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> Service:
    settings = GatewaySettings(models=("m",))
    drift = DriftMonitor()
    predictor = Predictor(settings, FakeTriton(cfg, answer), FakeFeatures(), (drift,))  # type: ignore[arg-type]
    return Service(settings, predictor, ApiKeys.from_settings(settings), ("m",), drift)


def serve_both(service: Service) -> tuple[int, Any, Any, int, Any]:
    """The HTTP answer, the gRPC answer (or its error) and the drift report, for ROWS."""

    async def main() -> tuple[int, Any, Any, int, Any]:
        status, body = await asgi(
            http_app.create_app(service), "POST", "/v1/models/m/predict", json.dumps(ROWS).encode()
        )
        port = free_port()
        server = grpc_server.create_server(service, f"127.0.0.1:{port}")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary(
                    "/gateway.v1.Gateway/Predict",
                    request_serializer=gateway_pb2.PredictRequest.SerializeToString,
                    response_deserializer=gateway_pb2.PredictResponse.FromString,
                )
                try:
                    reply: Any = await call(grpc_rows(), timeout=10)
                except grpc.aio.AioRpcError as exc:
                    reply = exc
        finally:
            await server.stop(None)
        await asyncio.sleep(0)  # the drift monitor observes after the batch (call_soon)
        drift_status, drift = await asgi(http_app.create_app(service), "GET", "/v1/models/m/drift?window=1h")
        return status, body, reply, drift_status, drift

    return asyncio.run(main())


COLUMNS = [
    {"name": "amount", "dtype": "float32"},
    {"name": "channel", "dtype": "string"},
    {"name": "visits", "dtype": "int64"},
]


TRITON = {"float32": "TYPE_FP32", "string": "TYPE_STRING", "int64": "TYPE_INT64"}


class FakeTriton:
    def __init__(self, cfg: dict, answer: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> None:
        self.cfg, self.answer = cfg, answer

    async def model_ready_version(self, model: str) -> str | None:
        return None if model.endswith("_ensemble") else "3"

    async def ready_versions(self, model: str) -> list[str]:
        return [] if model.endswith("_ensemble") else ["3"]

    async def model_config(self, model: str) -> dict:
        return self.cfg

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict, str]:
        out = self.answer(inputs)
        return {k: v for k, v in out.items() if k in outputs}, "3"

    async def close(self) -> None:
        pass


class FakeFeatures:
    async def key_types(self, service: str) -> dict[str, str]:
        return dict(KEYS)

    async def fetch(self, service: str, entity_rows: list[dict[str, Any]]) -> FeatureRows:
        n = len(entity_rows)
        return FeatureRows(
            values={"visits": [3] * n}, missing=[[] for _ in range(n)], oldest_epoch_s=[None] * n
        )

    async def close(self) -> None:
        pass


async def asgi(app: Any, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
    """One request through the ASGI app, as uvicorn would hand it over."""
    sent: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            await asyncio.sleep(3600)
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path_only, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path_only,
        "raw_path": path_only.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(data)


ROWS = {"rows": [{"customer_id": "C-1", "amount": 5.0, "channel": "web"},
                 {"customer_id": "C-2", "amount": 150.0, "channel": "app"}]}  # fmt: skip


def grpc_rows() -> gateway_pb2.PredictRequest:
    return gateway_pb2.PredictRequest(
        model="m",
        rows=[
            gateway_pb2.Row(
                fields={
                    "customer_id": gateway_pb2.Value(string_value=r["customer_id"]),
                    "amount": gateway_pb2.Value(double_value=r["amount"]),
                    "channel": gateway_pb2.Value(string_value=r["channel"]),
                }
            )
            for r in ROWS["rows"]
        ],
    )


OUTLIER = {
    "serving.kind": "outlier",
    "serving.outputs": {"label": "label", "score": "score"},
    "serving.score": {"source": "decision_function", "outlier_below": 0.0},
}


SVC_BINARY = {
    "serving.kind": "binary",
    "serving.classes": [0, 1],
    "serving.outputs": {"label": "label", "scores": "scores"},
}


MULTI_TARGET = {
    "serving.kind": "regression",
    "serving.outputs": {"value": "prediction"},
    "serving.targets": "3",
}


def outlier_config(**change: Any) -> dict:
    return config({**OUTLIER, **change}, {"label": ["1"], "score": ["1"]})


def svc_config(params: dict[str, Any] = SVC_BINARY, width: int = 1, **change: Any) -> dict:
    return config({**params, **change}, {"label": ["1"], "scores": [str(width)]})


def multi_config(targets: str | None = "3", dims: list[str] | None = None, max_batch_size: int = 8) -> dict:
    return config({**MULTI_TARGET, "serving.targets": targets}, {"prediction": dims or ["3"]}, max_batch_size)


# -- reason codes (test_explain.py) ------------------------------------------------------------

EXPLAINED_COLUMNS = [
    {"name": "amount", "dtype": "float32"},
    {"name": "channel", "dtype": "string"},
    {"name": "segment", "dtype": "string"},
]
EXPLAINER = {
    "model": "m_explain",
    "method": "tree_path_dependent",
    "units": "raw",
    "outputs": ["prediction"],
    "contributions": "contributions",
    "base_value": "base_value",
}


def explained_config(explainer: bool = True, max_batch_size: int = 64) -> dict:
    """A regressor's config (columns layout) whose contract names an explainer, or none."""
    params = {
        "feast.feature_service": "svc",
        "feast.entity_keys": "customer_id",
        "feast.request_fields": '["amount", "channel"]',
        "serving.layout": "columns",
        "serving.columns": json.dumps(EXPLAINED_COLUMNS),
        "serving.kind": "regression",
        "serving.outputs": json.dumps({"value": "value"}),
    }
    if explainer:
        params["serving.explainer"] = json.dumps(EXPLAINER)
    types = {"float32": "TYPE_FP32", "string": "TYPE_STRING"}
    inputs = [{"name": c["name"], "data_type": types[c["dtype"]], "dims": ["1"]} for c in EXPLAINED_COLUMNS]
    return {
        "name": "m",
        "max_batch_size": max_batch_size,
        "input": inputs,
        "output": [{"name": "value"}],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }


class ExplainTriton:
    """Triton as the gateway sees it, serving ``m`` (value = amount) and its explainer
    ``m_explain`` (contributions amount, 0.5 for ``web`` else -0.5, -0.25; base value 1.0).
    Every call is recorded with the rows it carried and when it started and ended, so a test
    sees which calls were made and whether they overlapped."""

    def __init__(self, explainer: bool = True, explainer_fails: bool = False) -> None:
        self.cfg = explained_config(explainer)
        self.explainer_fails = explainer_fails
        self.calls: list[tuple[str, int]] = []  # (model, rows)
        self.events: list[str] = []  # "start m", "end m_explain", ...

    async def ready_versions(self, model: str) -> list[str]:
        return ["1"] if model == "m" else []

    async def model_ready_version(self, model: str) -> str | None:
        return "1" if model == "m" else None

    async def model_config(self, model: str) -> dict:
        return self.cfg

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict, str]:
        n = len(inputs["amount"])
        self.calls.append((model, n))
        self.events.append(f"start {model}")
        await asyncio.sleep(0.01)  # a real call waits on the network: the loop runs others meanwhile
        self.events.append(f"end {model}")
        amount = inputs["amount"].reshape(n).astype(np.float64)
        if model == "m":
            return {"value": amount.reshape(n, 1).astype(np.float32)}, "1"
        if self.explainer_fails:
            from gateway.errors import GatewayError

            raise GatewayError("Triton failed inference on 'm_explain'")
        channel = np.where(inputs["channel"].reshape(n) == "web", 0.5, -0.5)
        phi = np.stack([amount, channel, np.full(n, -0.25)], axis=1).reshape(n, 3, 1)
        return {"contributions": phi, "base_value": np.ones((n, 1))}, "1"


class SegmentFeatures:
    """Every customer is in segment ``gold``; ``C-missing`` is unknown to the store."""

    async def key_types(self, service: str) -> dict[str, str]:
        return KEYS

    async def fetch(self, service: str, entity_rows: list[dict[str, Any]]) -> FeatureRows:
        missing = [["segment"] if r["customer_id"] == "C-missing" else [] for r in entity_rows]
        segments = [None if m else "gold" for m in missing]
        return FeatureRows({"segment": segments}, missing, [None] * len(entity_rows))
