"""The HTTP server of one gateway process: uvicorn over the app (gateway/http/app.py), with idle
connections closed and the signals left to the lifecycle (gateway/lifecycle.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.http.app import create_app
from gateway.service import Service


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


class HttpServer(uvicorn.Server):
    """uvicorn's server without its own signal capture: the lifecycle owns the signals, so that
    the signal is raised again only after the service has closed, not between the servers."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def http_server(service: Service) -> uvicorn.Server:
    settings = service.settings.server
    config = uvicorn.Config(
        create_app(service),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=IdleTimeoutProtocol,  # also closes connections that never send a request
        timeout_keep_alive=settings.idle_timeout_s,  # type: ignore[arg-type]  # int said; a float works
    )
    return HttpServer(config)
