"""One gateway process's life: open the Service, start HTTP and gRPC, and on shutdown stop both
servers (draining the calls in flight) before the Triton client and the online store close.

Order on the way out: a signal (SIGINT, SIGTERM: uvicorn's ``handle_exit``, so a second Ctrl-C
still forces the exit) stops HTTP (uvicorn's graceful shutdown: no new connections, in-flight
requests answered) and gRPC (``stop(grace)``: no new calls, in-flight ones get ``grace`` seconds)
at the same time; only when both have returned does ``Service.close()`` close Triton's client,
the online store and the payload log. The signal is then raised again, as uvicorn does after its
own shutdown, so the process ends as it always has (SIGINT: KeyboardInterrupt; SIGTERM: killed).
"""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import uvicorn

from gateway.grpc.server import create_server
from gateway.http.server import http_server
from gateway.service import Service
from gateway.settings import GatewaySettings

GRPC_GRACE_S = 2.0  # what in-flight gRPC calls get to finish once shutdown starts
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Gateway:
    """A running gateway: its service and servers, until ``stop()`` (or the context's end)."""

    service: Service
    http: uvicorn.Server
    grpc: grpc.aio.Server | None
    _http_task: asyncio.Task[None]
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    signals: list[int] = field(default_factory=list)  # the signals that asked for the stop

    def stop(self) -> None:
        """Ask for shutdown (what SIGINT/SIGTERM do); ``wait()`` then returns."""
        self._stop.set()

    def handle_exit(self, sig: int, frame: Any = None) -> None:
        """A signal handler (runs on the loop's thread, between bytecodes): uvicorn's rules, a
        second SIGINT forces HTTP to stop without waiting for open connections."""
        self.signals.append(sig)
        self.http.handle_exit(sig, frame)
        self._loop.call_soon_threadsafe(self._stop.set)

    async def wait(self) -> None:
        """Until asked to stop, or until the HTTP server ends on its own (e.g. a failed bind)."""
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({stop, self._http_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()

    async def _shutdown(self, grace_s: float) -> None:
        self.http.should_exit = True
        stops: list[Any] = [self._http_task]
        if self.grpc is not None:
            stops.append(self.grpc.stop(grace_s))
        results = await asyncio.gather(*stops, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result


@asynccontextmanager
async def running(
    settings: GatewaySettings,
    models: tuple[str, ...],
    *,
    reuse_port: bool = False,
    sockets: list[socket.socket] | None = None,
    grace_s: float = GRPC_GRACE_S,
) -> AsyncIterator[Gateway]:
    """The gateway serving HTTP (and gRPC when ``settings.server.grpc_port``) inside the block; on
    leaving it, both servers stop (draining), then the service closes. ``sockets``: bound
    listening sockets for HTTP (``gateway serve --workers``), else uvicorn binds host:port."""
    service = await Service.open(settings, models)
    try:
        # Everything loaded so far (Feast, pandas, pyarrow, the registry: ~10^6 objects) lives as
        # long as the process: out of the collector's sight, a full collection no longer walks it
        # on the request path (p99 at 64 clients, issue 16).
        gc.freeze()
        grpc_server = None
        address = f"{settings.server.host}:{settings.server.grpc_port}"
        if settings.server.grpc_port:
            # gRPC binds with SO_REUSEPORT itself (its default on Linux, said explicitly for workers)
            grpc_server = create_server(service, address, reuse_port)
            await grpc_server.start()
        http = http_server(service)
        gateway = Gateway(service, http, grpc_server, asyncio.create_task(http.serve(sockets=sockets)))
        try:
            while not http.started and not gateway._http_task.done():
                await asyncio.sleep(0.01)
            if gateway._http_task.done():  # startup failed (uvicorn logged why): stop gRPC, close
                gateway._http_task.result()
                raise SystemExit(1)  # uvicorn's own exit for a failed startup
            yield gateway
        finally:
            await gateway._shutdown(grace_s)
    finally:
        await service.close()


async def serve(
    settings: GatewaySettings,
    models: tuple[str, ...],
    *,
    reuse_port: bool = False,
    sockets: list[socket.socket] | None = None,
    banner: Callable[[Gateway], None] | None = None,
) -> None:
    """Run the gateway until SIGINT/SIGTERM, then shut down in order (see the module's doc)."""
    with ExitStack() as handlers:  # the signals stay ours until the service has closed
        async with running(settings, models, reuse_port=reuse_port, sockets=sockets) as gateway:
            handlers.enter_context(_signals_to(gateway))
            if banner is not None:
                banner(gateway)
            await gateway.wait()
    signals = gateway.signals
    # as uvicorn does after its shutdown: the signal's usual effect, now that all is closed
    for sig in reversed(signals):
        signal.raise_signal(sig)


@contextmanager
def _signals_to(gateway: Gateway) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    original = {sig: signal.signal(sig, gateway.handle_exit) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in original.items():
            signal.signal(sig, handler)
