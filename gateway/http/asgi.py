"""The bare routes: ``POST`` routes answered before the framework, from the ASGI scope or, on
the gateway's own server, straight from the HTTP protocol (gateway/http/protocol.py).

``POST /v1/models/{model}/predict`` and the Open Inference Protocol's ``POST /v2/models/{m}/infer``
are the hot path, and FastAPI/Starlette's routing, dependency solving, request objects and
middleware were a fifth of the gateway's GIL time per request at 16 clients (py-spy, ``make
bench``). So each is a ``BareRoute`` in front of the FastAPI app, which gets every other request.
A route says which paths it answers (``target``) and how it turns a body into an answer
(``answer``); the rest is here, once for both ways in: the method, the auth check and the error
answer of gateway/http/handling.py, the bounded body of gateway/http/bodies.py, the request
metrics (``respond``). Under ``gateway serve`` the protocol answers these routes itself, without
an ASGI scope, request cycle or middleware (gateway/http/protocol.py says what that saved); the
ASGI form (``__call__``) answers what the protocol hands on: another method, a pipelined
request, ``Expect: 100-continue``, a percent-encoded path, and every in-process test app.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, ClassVar

from gateway import metrics
from gateway.errors import GatewayError, MethodNotAllowed
from gateway.http.bodies import read_asgi_body
from gateway.http.handling import Headers, authorize, error_body
from gateway.service import Service

log = logging.getLogger("gateway")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Target = tuple[str, str]  # (model, version): version "" when the path names none


async def send_json(send: Send, status: int, body: bytes, headers: Headers) -> None:
    """A whole JSON answer on the ASGI ``send``: the bare routes' one response shape."""
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


class BareRoute:
    """One bare ``POST`` route in front of ``app``, which gets every request it does not answer."""

    route: ClassVar[str]  # the ``route`` label of gateway_request_seconds
    oip: ClassVar[bool] = False  # errors in the Open Inference Protocol's shape
    post: ClassVar[str]  # what a request with another method is told to POST

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service
        self.limit = service.settings.limits.max_body_bytes

    def target(self, path: str) -> Target | None:
        """The model (and version) of a path this route answers, else None."""
        raise NotImplementedError

    async def answer(self, target: Target, headers: dict[bytes, bytes], body: bytes) -> bytes:
        """The JSON body of a 200 for an authorized request's whole body; raises GatewayError."""
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = self.target(scope["path"]) if scope["type"] == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])  # ASGI lower-cases header names

        def read() -> Awaitable[bytes]:
            return read_asgi_body(headers.get(b"content-length"), receive, self.limit)

        with metrics.request(self.route, self.service.models) as call:
            call.model = target[0]
            status, body, extra = await self.respond(target, scope["method"], headers, read)
            call.status = str(status)
            await send_json(send, status, body, extra)

    async def respond(
        self, target: Target, method: str, headers: dict[bytes, bytes], read: Callable[[], Awaitable[bytes]]
    ) -> tuple[int, bytes, Headers]:
        """The answer to one request of this route (status, JSON body, extra headers), an error
        answer for whatever it raised; ``read`` gives the body (raising TooLarge past the limit)."""
        try:
            if method != "POST":
                raise MethodNotAllowed(f"{method} is not allowed here: POST {self.post}")
            authorize(self.service, _text(headers.get(b"x-api-key")), _text(headers.get(b"authorization")))
            body = await read()
            return 200, await self.answer(target, headers, body), []
        except GatewayError as exc:
            return error_body(exc, self.oip)
        except Exception:
            log.exception("unexpected error serving %s", target[0])
            return error_body(GatewayError("internal error"), self.oip)


def bare_routes(app: ASGIApp) -> tuple[BareRoute, ...]:
    """The bare routes chained in front of ``app`` (each ``BareRoute``'s ``app`` is the next)."""
    routes: list[BareRoute] = []
    while isinstance(app, BareRoute):
        routes.append(app)
        app = app.app
    return tuple(routes)
