"""The gateway's HTTP/1.1 protocol: uvicorn's (httptools), with idle connections closed and the
bare routes (gateway/http/asgi.py) answered straight from the parser, without ASGI.

For ``POST /v1/models/{m}/predict`` and ``POST /v2/models/{m}/infer`` uvicorn built, per request,
an ASGI scope (with a copy of the app state), a request cycle with its ``asyncio.Event``, ran
the proxy-headers middleware, passed the body as a ``receive`` message, checked every response
header against two regular expressions and wrote the head and the body in two ``send`` calls
(two system calls). Here the parser's callbacks collect the body (bounded by the route's
limit), one task runs the route's ``respond`` (the same method, auth, body limit, metrics and
error answers as the ASGI form) and the whole response goes out in one write. Everything else,
and any request this path does not take on (another method, a pipelined request, ``Expect:
100-continue``, a percent-encoded or absolute-form target), goes the framework's way, unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway import metrics
from gateway.errors import GatewayError
from gateway.http.asgi import BareRoute, Target
from gateway.http.bodies import over_declared, over_limit


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


class _NoEvent:
    """What uvicorn's ``connection_lost`` sets on a request cycle: nothing waits on a bare one."""

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()


class BareCycle:
    """One request of a bare route, in the attributes uvicorn's protocol reads of a cycle."""

    __slots__ = (
        "body",
        "disconnected",
        "keep_alive",
        "refused",
        "response_complete",
        "route",
        "started",
        "target",
    )
    message_event = _NO_EVENT

    def __init__(self, route: BareRoute, target: Target, keep_alive: bool) -> None:
        self.route = route
        self.target = target
        self.keep_alive = keep_alive
        self.body = bytearray()
        self.refused: GatewayError | None = None  # the body's 413, once it is past the limit
        self.started = False  # its answer is on its way: later body bytes are dropped
        self.disconnected = False
        self.response_complete = False


class GatewayProtocol(IdleTimeoutProtocol):
    """``IdleTimeoutProtocol`` answering ``routes`` itself (see the module docstring)."""

    routes: ClassVar[tuple[BareRoute, ...]] = ()

    def on_headers_complete(self) -> None:
        cycle = self._bare_cycle()
        if cycle is None:
            super().on_headers_complete()
            return
        self.cycle = cycle  # type: ignore[assignment]  # uvicorn reads only the attributes above
        refused = over_declared(self._header(b"content-length"), cycle.route.limit)
        if refused is not None:  # answered now: the body that follows is dropped as it comes
            cycle.refused = refused
            self._start(cycle)

    def _bare_cycle(self) -> BareCycle | None:
        """A cycle for a request a bare route answers here, else None (the framework's way)."""
        parser = self.parser
        if not self.routes or self.expect_100_continue or parser.should_upgrade():
            return None
        if parser.get_method() != b"POST":
            return None
        if self.cycle is not None and not self.cycle.response_complete:
            return None  # pipelined behind an answer in progress: uvicorn queues it
        url = self.url
        if not url.startswith(b"/") or b"%" in url:
            return None
        path = url.partition(b"?")[0].partition(b"#")[0].decode("latin-1")
        for route in self.routes:
            target = route.target(path)
            if target is not None:
                keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
                return BareCycle(route, target, keep_alive)
        return None

    def _header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if not isinstance(cycle, BareCycle):
            super().on_body(body)
            return
        if cycle.started:
            return
        cycle.body += body
        if len(cycle.body) > cycle.route.limit:
            cycle.refused = over_limit(cycle.route.limit)
            self._start(cycle)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if not isinstance(cycle, BareCycle):
            super().on_message_complete()
            return
        if not cycle.started:
            self._start(cycle)

    def _start(self, cycle: BareCycle) -> None:
        cycle.started = True
        task = self.loop.create_task(self._answer(cycle, dict(self.headers)))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)  # the server waits for these on shutdown

    async def _answer(self, cycle: BareCycle, headers: dict[bytes, bytes]) -> None:
        route = cycle.route

        async def read() -> bytes:
            if cycle.refused is not None:
                raise cycle.refused
            return bytes(cycle.body)

        try:
            with metrics.request(route.route, route.service.models) as call:
                call.model = cycle.target[0]
                status, body, extra = await route.respond(cycle.target, "POST", headers, read)
                call.status = str(status)
                self._write(cycle, status, body, extra)
        finally:
            cycle.response_complete = True
            if not self.transport.is_closing():
                if not cycle.keep_alive:
                    self.transport.close()
                self.on_response_complete()

    def _write(self, cycle: BareCycle, status: int, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
        """The whole response in one write: status line, uvicorn's default headers (date,
        server), the JSON body's, the route's own (``retry-after``, ``allow``)."""
        if self.transport.is_closing():  # the client left while it was computed
            return
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += (name, b": ", value, b"\r\n")
        head += (b"content-type: application/json\r\ncontent-length: ", str(len(body)).encode(), b"\r\n")
        for name, value in extra:
            head += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        head += (b"\r\n", body)
        self.transport.write(b"".join(head))


def protocol_for(routes: tuple[BareRoute, ...]) -> type[GatewayProtocol]:
    """The protocol class uvicorn instantiates per connection, answering ``routes`` itself."""
    return type("GatewayProtocol", (GatewayProtocol,), {"routes": routes})
