"""HTTP transport: the predict route as a bare ASGI handler, the probes and metrics on FastAPI.

``POST /v1/models/{model}/predict`` is the one route on the hot path, and FastAPI/Starlette's
routing, dependency solving, request objects and middleware were a fifth of the gateway's GIL
time per request at 16 clients (py-spy, ``make bench``). So that route is answered here from the
ASGI scope directly, before the framework; everything else (``/healthz``, ``/readyz``,
``/metrics``, 404s, the app's lifespan) goes to the FastAPI app behind it. Both only translate to
and from the core: statuses come from the error tree (gateway/errors.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway import metrics
from gateway.errors import BadRequest, GatewayError, InvalidInput, MethodNotAllowed, TooLarge
from gateway.request import PredictRequest, Row
from gateway.service import Service
from gateway.values import Scalar

log = logging.getLogger("gateway")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_PREFIX, _SUFFIX = "/v1/models/", "/predict"


def predict_model(path: str) -> str | None:
    """The model of ``/v1/models/{model}/predict`` (one path segment), else None."""
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    model = path[len(_PREFIX) : -len(_SUFFIX)]
    return model if model and "/" not in model else None


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from exc


def rows_of(body: Any) -> list[Any]:
    """``{"rows": [...]}`` for a batch, or one row object on its own (not yet checked)."""
    if not isinstance(body, dict):
        raise BadRequest('body must be a JSON object: one row, or {"rows": [...]}')
    if "rows" in body:
        if not isinstance(body["rows"], list):
            raise InvalidInput("rows must be a list of row objects", field="rows")
        if len(body) > 1:
            extra = sorted(set(body) - {"rows"})[0]
            raise InvalidInput(f"unknown top-level field {extra!r}", field=extra)
        return body["rows"]
    return [body]


def _row(i: int, row: Any) -> Row:
    """One JSON row as a typed Row: scalars keep their JSON type; null is no value."""
    if not isinstance(row, dict):
        raise InvalidInput("each row must be an object of entity keys and request fields", field=f"rows[{i}]")
    fields: dict[str, Scalar] = {}
    for key, value in row.items():
        if value is None:
            continue
        if not isinstance(value, bool | int | float | str):
            kind = "an array" if isinstance(value, list) else "an object"
            raise InvalidInput(f"field {key!r} must be a single value, not {kind}", field=f"rows[{i}].{key}")
        fields[key] = value
    return Row(fields)


def parse_request(model: str, body: bytes) -> PredictRequest:
    """An HTTP predict body (one row, or ``{"rows": [...]}``) as the typed request."""
    return PredictRequest(model, tuple(_row(i, r) for i, r in enumerate(rows_of(parse_json(body)))))


def to_json(content: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette's JSONResponse renders it; NaN is refused, not sent."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def error_body(exc: GatewayError) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    metrics.ERRORS.labels(exc.cause).inc()
    headers = [(b"retry-after", str(exc.retry_after).encode())] if exc.retry_after else []
    if isinstance(exc, MethodNotAllowed):
        headers.append((b"allow", b"POST"))
    return exc.http_status, to_json(exc.to_dict()), headers


class PredictRoute:
    """``/v1/models/{model}/predict`` in front of ``app``, which gets every other request."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service
        self.limit = service.settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        model = predict_model(scope["path"]) if scope["type"] == "http" else None
        if model is None:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        metrics.IN_FLIGHT.inc()
        try:
            status, body, headers = await self._answer(model, scope, receive)
        finally:
            metrics.IN_FLIGHT.dec()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
        # unknown model names would explode label cardinality: record them as one label
        label = model if status != 404 or model in self.service.models else "other"
        metrics.REQUEST_SECONDS.labels("predict", label, str(status)).observe(time.perf_counter() - start)

    async def _answer(self, model: str, scope: Scope, receive: Receive) -> tuple[int, bytes, list[Any]]:
        try:
            if scope["method"] != "POST":
                raise MethodNotAllowed(f"{scope['method']} is not allowed here: POST a body of rows")
            headers = dict(scope["headers"])  # ASGI lower-cases header names
            self.service.auth.check(_text(headers.get(b"x-api-key")), _text(headers.get(b"authorization")))
            request = parse_request(model, await self._body(headers.get(b"content-length"), receive))
            result = await self.service.predictor.predict(request)
            return 200, to_json(result.to_dict()), []
        except GatewayError as exc:
            return error_body(exc)
        except Exception:
            log.exception("unexpected error serving %s", model)
            return error_body(GatewayError("internal error"))

    async def _body(self, declared: bytes | None, receive: Receive) -> bytes:
        """The request body, refused past the limit (also chunked bodies with no Content-Length)."""
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            raise TooLarge(f"body of {declared.decode()} bytes exceeds the limit of {self.limit}")
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise BadRequest("the client went away before sending the whole body")
            body += message.get("body", b"")
            if len(body) > self.limit:
                raise TooLarge(f"body exceeds the limit of {self.limit} bytes")
            if not message.get("more_body", False):
                return bytes(body)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def create_app(service: Service) -> ASGIApp:
    """The HTTP app over an opened Service (closed when the app shuts down)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await service.close()

    app = FastAPI(title="triton-stack gateway", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await service.ready()
        return JSONResponse(checks, status_code=200 if checks["ready"] else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return PredictRoute(app, service)
