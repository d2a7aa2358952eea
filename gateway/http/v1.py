"""HTTP transport: the predict route as a bare ASGI handler, the probes and metrics on FastAPI.

``POST /v1/models/{model}/predict`` is the one route on the hot path, and FastAPI/Starlette's
routing, dependency solving, request objects and middleware were a fifth of the gateway's GIL
time per request at 16 clients (py-spy, ``make bench``). So that route is answered here from the
ASGI scope directly, before the framework; everything else (``/healthz``, ``/readyz``,
``/metrics``, ``/v1/models/{model}/drift``, 404s, the app's lifespan) goes to the FastAPI app
behind it. Both only translate to and from the core: statuses come from the error tree (gateway/errors.py).
The Open Inference Protocol's ``POST /v2/models/{model}/infer`` is answered the same way
(``OipInferRoute``, translation in gateway/oip/); its metadata and health routes are on FastAPI.

Hostile bodies are a 4xx, never a 500 (docs/gateway-limits.md): the body is bounded (``max_body_bytes``),
must be UTF-8, and is parsed with bounded integers (``MAX_INT_DIGITS``), bounded nesting (the
parser's recursion limit, ~1,000; a row's values are scalars, so anything nested is refused
anyway), no duplicate keys and no lone surrogates in strings. ``NaN``/``Infinity`` literals parse,
and are refused by the column check (a 422 naming the field, gateway/values.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway import metrics
from gateway.drift.monitor import off_report, window_seconds
from gateway.errors import BadRequest, GatewayError, InvalidInput, MethodNotAllowed, TooLarge
from gateway.oip import http as oip
from gateway.quality.live import parse_feedback
from gateway.request import PredictRequest, Row
from gateway.service import Service
from gateway.shadow.runner import shadow_off
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


# Converting an integer costs time quadratic in its digits (Python refuses past 4,300 with a
# ValueError, once a 500). Up to 1,000 digits it is read, so one out of its column's range (float64
# ends at 309 digits, int64 at 19) gets the 422 that names its field; past that, a 400.
MAX_INT_DIGITS = 1000


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BadRequest(f"body has an integer of {len(text)} digits; at most {MAX_INT_DIGITS} are read")
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        # two values for one field: which one a proxy or a client library reads is anyone's guess
        dup = next(k for i, (k, _) in enumerate(pairs) if any(k == p for p, _ in pairs[:i]))
        raise BadRequest(f"body has the key {dup!a} twice in one object")
    return obj


def parse_json(body: bytes) -> Any:
    """The body as JSON, refusing what the stdlib parser lets through or fails on with a 500."""
    try:
        # strict UTF-8 (RFC 8259); json.loads(bytes) would take surrogates encoded in the bytes
        text = body.decode("utf-8")
        return json.loads(text, parse_int=_int, object_pairs_hook=_object)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("body is not valid JSON here: it is nested too deeply") from None


def _valid_text(text: str) -> bool:
    """False for a string with a lone surrogate (a ``\\ud800`` escape): no UTF-8 for it."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
        # Feast's keys and Triton's BYTES are UTF-8: a lone surrogate reaches neither
        if not _valid_text(key):  # a name that cannot be echoed as a field path
            raise InvalidInput(f"field {key!a} is not valid Unicode (a lone surrogate)", field=f"rows[{i}]")
        if isinstance(value, str) and not _valid_text(value):
            where = f"rows[{i}].{key}"
            raise InvalidInput(f"field {key!r} is not valid Unicode (a lone surrogate)", field=where)
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
    """Compact UTF-8 JSON, as Starlette's JSONResponse renders it; NaN is refused, not sent.

    A lone surrogate (an error may echo a caller's field name) has no UTF-8: ``backslashreplace``
    writes it as ``\\udXXX``, which inside a JSON string is the JSON escape for it."""
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


def error_body(exc: GatewayError) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    metrics.count_error(exc.cause)
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
        with metrics.request("predict", self.service.models) as call:
            call.model = model
            status, body, headers = await self._answer(model, scope, receive)
            call.status = str(status)
            await send_json(send, status, body, headers)

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


async def send_json(send: Send, status: int, body: bytes, headers: list[Any]) -> None:
    """A whole JSON answer on the ASGI ``send``: the bare routes' one response shape."""
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


class OipInferRoute(PredictRoute):
    """``POST /v2/models/{model}[/versions/{v}]/infer`` (the Open Inference Protocol, gateway/oip/)
    the same way as the predict route: from the ASGI scope, before the framework; the same
    auth, body limit and core, errors in the protocol's shape (``{"error": "..."}``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = oip.infer_target(scope["path"]) if scope["type"] == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        with metrics.request("oip_infer", self.service.models) as call:
            call.model = target[0]
            status, body, headers = await self._infer(target, scope, receive)
            call.status = str(status)
            await send_json(send, status, body, headers)

    async def _infer(
        self, target: tuple[str, str], scope: Scope, receive: Receive
    ) -> tuple[int, bytes, list[Any]]:
        model, version = target
        try:
            if scope["method"] != "POST":
                raise MethodNotAllowed(f"{scope['method']} is not allowed here: POST an inference request")
            headers = dict(scope["headers"])
            self.service.auth.check(_text(headers.get(b"x-api-key")), _text(headers.get(b"authorization")))
            body = await self._body(headers.get(b"content-length"), receive)
            spec = await self.service.predictor.spec(model)
            oip.check_version(spec, version)
            head, binary = oip.split_body(body, headers.get(b"inference-header-content-length"))
            parsed = oip.parse_infer(spec, parse_json(head), binary)
            result = await self.service.predictor.predict(parsed.request)
            return 200, to_json(oip.infer_body(parsed, result)), []
        except GatewayError as exc:
            status, _, extra = error_body(exc)
            return status, to_json(oip.error_doc(exc)), extra
        except Exception:
            log.exception("unexpected error serving %s", model)
            status, _, extra = error_body(GatewayError("internal error"))
            return status, to_json({"error": "internal error"}), extra


class IdleTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, with its keep-alive timer also armed on a fresh connection and
    while a request's head is still arriving.

    uvicorn arms ``timeout_keep_alive`` only after a response, so a connection that never sent a
    request (or stalls in its headers) was held forever: 500 such connections stayed open. Now
    any connection with no request being served is closed after ``timeout_keep_alive``.
    """

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is None or self.cycle.response_complete:  # no request head complete yet
            self._arm_idle()

    def _arm_idle(self) -> None:
        if self.timeout_keep_alive_task is None and not self.transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )


async def _bounded_body(request: Request, limit: int) -> bytes:
    """A body read up to ``limit`` bytes: past it a 413, however it is sent (chunked too)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise TooLarge(f"body exceeds the limit of {limit} bytes")
    return bytes(body)


def _error_response(exc: GatewayError) -> Response:
    status, body, headers = error_body(exc)
    named = {k.decode(): v.decode() for k, v in headers}
    return Response(body, status, named, media_type="application/json")


def _fallback_command(body: Any) -> tuple[str, str]:
    if not isinstance(body, dict) or body.get("action") not in ("reset", "engage"):
        raise BadRequest('the body must be {"action": "reset" | "engage", "reason": "..."}')
    reason = body.get("reason", "")
    if not isinstance(reason, str) or set(body) - {"action", "reason"}:
        raise BadRequest('the body must be {"action": "reset" | "engage", "reason": "..."}')
    return str(body["action"]), reason[:500]


def create_app(service: Service) -> ASGIApp:
    """The HTTP app over an opened Service. The app does not close it: whoever opened it does,
    once both servers have stopped (gateway/lifecycle.py)."""
    app = FastAPI(title="triton-stack gateway", docs_url=None, redoc_url=None)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await service.ready()
        return JSONResponse(checks, status_code=200 if checks["ready"] else 503)

    @app.get("/v1/models/{model}/drift")
    async def drift(model: str, request: Request, window: str = "1h") -> Response:
        # the predict routes' auth: the report names the model's features and their traffic
        try:
            service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            seconds = window_seconds(window)  # a bad window is a 400 before any lookup
            spec = await service.predictor.spec(model)
            report = (
                service.drift.report(spec, window)
                if service.drift is not None
                else off_report(spec, window, seconds, "drift counting is off (GATEWAY_DRIFT_SAMPLE=0)")
            )
        except GatewayError as exc:
            return _error_response(exc)
        return Response(to_json(report.to_dict()), media_type="application/json")

    @app.get("/v1/models/{model}/shadow")
    async def shadow(model: str, request: Request, window: str = "1h") -> Response:
        # the predict routes' auth: the report names the model's versions and their answers
        try:
            service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            window_seconds(window)  # a bad window is a 400 before any lookup
            spec = await service.predictor.spec(model)
            report = (
                await service.shadow.report(spec, window)
                if service.shadow is not None
                else shadow_off(spec.name, window, "shadow traffic is off (GATEWAY_SHADOW is empty)")
            )
        except GatewayError as exc:
            return _error_response(exc)
        return Response(to_json(report), media_type="application/json")

    @app.post("/v1/models/{model}/feedback")
    async def feedback(model: str, request: Request) -> Response:
        # labels for predictions any replica answered, by the ids it returned (docs/quality.md)
        try:
            service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            async with service.labels.turn():  # predictions first: one label batch at a time
                body = parse_json(await _bounded_body(request, service.settings.max_body_bytes))
                items = parse_feedback(body)
                spec = await service.predictor.spec(model)
                result = await service.quality_monitor().feedback(spec, items)
        except GatewayError as exc:
            return _error_response(exc)
        return Response(to_json(result.to_dict()), media_type="application/json")

    @app.get("/v1/models/{model}/quality")
    async def quality(model: str, request: Request, window: str = "1h") -> Response:
        try:
            service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            window_seconds(window)  # a bad window is a 400 before any lookup
            spec = await service.predictor.spec(model)
            # read from the shared store; the metrics are computed off the event loop
            report = await service.quality_monitor().report(spec, window)
        except GatewayError as exc:
            return _error_response(exc)
        return Response(to_json(report.to_dict()), media_type="application/json")

    @app.get("/v1/models/{model}/fallback")
    async def fallback_status(model: str, request: Request) -> Response:
        # the shared decision, the rule and the champion's judged figure (docs/quality.md)
        try:
            service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            body = await service.fallback_switch(model).status(model)
        except GatewayError as exc:
            return _error_response(exc)
        return Response(to_json(body), media_type="application/json")

    @app.post("/v1/models/{model}/fallback")
    async def fallback_command(model: str, request: Request) -> Response:
        # {"action": "reset" | "engage", "reason": "..."}: every replica follows within a second
        try:
            service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            body = parse_json(await _bounded_body(request, service.settings.max_body_bytes))
            action, reason = _fallback_command(body)
            switch = service.fallback_switch(model)
            await switch.command(model, action, reason)
            status = await switch.status(model)
        except GatewayError as exc:
            return _error_response(exc)
        return Response(to_json(status), media_type="application/json")

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        # open by default even with keys on, for in-cluster Prometheus scrapes (docs/gateway-limits.md)
        if service.settings.metrics_require_key:
            try:
                service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            except GatewayError as exc:
                return _error_response(exc)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    oip.add_routes(app, service)  # the Open Inference Protocol's health and metadata (gateway/oip/)
    return PredictRoute(OipInferRoute(app, service), service)
