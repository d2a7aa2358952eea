"""The HTTP server of one gateway process: uvicorn over the app (gateway/http/app.py) with the
gateway's protocol (gateway/http/protocol.py: idle connections closed, the bare routes answered
without ASGI) and the signals left to the lifecycle (gateway/lifecycle.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from gateway.http.app import create_app
from gateway.http.asgi import bare_routes
from gateway.http.protocol import protocol_for
from gateway.service import Service


class HttpServer(uvicorn.Server):
    """uvicorn's server without its own signal capture: the lifecycle owns the signals, so that
    the signal is raised again only after the service has closed, not between the servers."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def http_server(service: Service) -> uvicorn.Server:
    settings = service.settings.server
    app = create_app(service)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        ws="none",  # no WebSocket routes: uvicorn's "auto" would load the websockets package
        http=protocol_for(bare_routes(app)),  # also closes connections that never send a request
        timeout_keep_alive=settings.idle_timeout_s,  # type: ignore[arg-type]  # int said; a float works
    )
    return HttpServer(config)
