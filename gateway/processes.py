"""The serving processes of ``gateway serve``: one, or ``--workers`` of them on the same ports,
each running the lifecycle (gateway/lifecycle.py) on its event loop; and the refusals made
before any of them starts (a busy port, Triton's HTTP port given as gRPC)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.abc
import logging
import os
import sys
from typing import Any

from rich.console import Console

from gateway.refusal import refuse

# The banner: one line as written (not wrapped at 80 columns), no emoji table loaded for it.
console = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)


def refuse_busy_ports(settings: Any) -> None:
    """Bind each port once, alone (no SO_REUSEPORT), before serving: a port another process
    holds is refused here. Without it, HTTP failed with uvicorn's bare errno line, and gRPC,
    which binds with SO_REUSEPORT, joined another gateway's port and split its traffic
    silently. (Only this gateway's own ``--workers`` share their ports.)"""
    import socket

    for flag, port in (("--port", settings.server.port), ("--grpc-port", settings.server.grpc_port)):
        if not port:
            continue
        family = socket.AF_INET6 if ":" in settings.server.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no holder
            try:
                probe.bind((settings.server.host, port))
            except OSError as exc:
                raise refuse(
                    f"{settings.server.host}:{port} ({flag}) is in use: {exc.strerror or exc}",
                    f"pass another {flag}, or stop what listens there (ss -ltnp 'sport = :{port}')",
                    2,
                ) from None


def refuse_http_port_for_grpc(url: str) -> None:
    """A gRPC Triton URL (``grpc://`` or no scheme) whose port answers HTTP/1 is Triton's HTTP
    port: every request would then be a 503. Refuse it at start with the URL that works. A port
    that does not answer (Triton not up yet) is no refusal: the gateway waits for it (/readyz)."""
    import socket

    scheme, sep, address = url.partition("://")
    if sep and scheme != "grpc":
        return
    host, _, port = (address if sep else url).rstrip("/").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5) as conn:
            conn.settimeout(0.5)
            conn.sendall(
                f"GET /v2/health/live HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            answer = conn.recv(16)
    except OSError:
        return
    if answer.startswith(b"HTTP/1."):
        raise refuse(
            f"--triton-url {url} is gRPC (no scheme means gRPC), but {host}:{port} answers HTTP: "
            "it is Triton's HTTP port",
            f"use --triton-url http://{host}:{port} (or Triton's gRPC port, grpc://{host}:8001)",
            2,
        )


def worker(settings: Any, reuse_port: bool) -> None:
    """One gateway process: logging, then the servers until interrupted."""
    _without_torch()
    logging.basicConfig(
        level=settings.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    from gateway.clients.direct_features import FeatureSpecError
    from gateway.refusal import report_error

    try:
        if not reuse_port:
            _run(settings, _serve(settings, settings.models))
            return
        if not _stop_with_supervisor():
            return  # the supervisor died while this worker started: nothing to serve for
        # a worker stopped by Ctrl-C with its process group: uvicorn has shut down already
        with contextlib.suppress(KeyboardInterrupt):
            _run(settings, _serve(settings, settings.models, reuse_port))
    except FeatureSpecError as exc:  # at start, before serving: the specs do not fit this gateway
        report_error(str(exc), "compile them again with `gateway compile-features --out DIR`")
        sys.exit(2)


def _stop_with_supervisor() -> bool:
    """Have the kernel send this worker SIGTERM (its graceful stop) when the supervisor dies,
    however it dies; False when it has died already.

    The supervisor stops its workers on SIGINT and SIGTERM, but one killed outright (SIGKILL, the
    OOM killer, a caller's timeout after a SIGINT that a background job ignores) left them
    serving on the port, orphaned: the demo's step 10, run under nohup, left two behind on 8080.
    Linux's ``PR_SET_PDEATHSIG`` ties each worker to its parent; elsewhere there is no such call
    and a killed supervisor's workers must be stopped by hand (their process group)."""
    import multiprocessing
    import signal

    parent = multiprocessing.parent_process()
    if sys.platform != "linux" or parent is None:
        return True
    import ctypes

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:
        logging.getLogger("gateway").warning(
            "workers will not stop with a killed supervisor: prctl failed (errno %d)", ctypes.get_errno()
        )
        return True
    return os.getppid() == parent.pid  # it died before the call: no signal will come


def _without_torch() -> None:
    """Keep Feast from importing PyTorch into the server: ``feast.torch_wrapper`` imports it, when
    installed, on ``import feast``, for an offline-store helper the gateway never calls. In the
    project's venv (torch is there for model export) that was ~190 MiB of the gateway's ~510 MiB
    resident (issue 16); the gateway image has no torch. A finder first on ``sys.meta_path``
    makes the import fail as if torch were not installed, which Feast catches and remembers as
    "torch not available" (a ``None`` in ``sys.modules`` would not do: scipy looks torch up there)."""
    if "torch" not in sys.modules:
        sys.meta_path.insert(0, _NoTorch())


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"the gateway server does not load {name}", name=name)
        return None


def _run(settings: Any, main: Any) -> None:
    """``main`` on uvloop (GATEWAY_EVENT_LOOP, default) or asyncio's own loop. uvloop's C loop
    took the gateway from 0.34x to 0.48x of direct Triton's rate over gRPC at 16 clients and
    0.41x to 0.51x over HTTP (make bench's setup, alternated side by side): the grpc aio server
    and client run their completions as loop callbacks, several per call."""
    if settings.server.event_loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)
    else:
        asyncio.run(main)


def supervise(settings: Any) -> int:
    """``settings.server.workers`` gateway processes on the same HTTP and gRPC ports: each binds with
    SO_REUSEPORT, and the kernel spreads new connections across them. One Python process is one
    GIL (the gateway's ceiling, ``make bench``); on a node with cores to spare, more processes
    serve more. Each keeps its own batches, metrics and drift counts (docs/gateway-limits.md).

    The supervisor only waits: when one worker exits, the others are stopped and its exit code
    is this command's, so the orchestrator restarts the whole gateway rather than run it short."""
    import multiprocessing
    import signal
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")  # fresh interpreters: no state of this one shared
    procs = [
        context.Process(target=worker, args=(settings, True), name=f"gateway-worker-{i}")
        for i in range(settings.server.workers)
    ]
    for proc in procs:
        proc.start()

    def stop(*_: Any) -> None:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: uvicorn's graceful shutdown

    signal.signal(signal.SIGTERM, stop)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reached the whole group: workers stop too
        wait([p.sentinel for p in procs])
    stop()
    for proc in procs:
        proc.join(15)
        if proc.is_alive():
            proc.kill()
            proc.join()
    failed = [p.exitcode for p in procs if p.exitcode not in (0, None, -signal.SIGTERM, -signal.SIGINT)]
    return failed[0] if failed else 0


def _listening_socket(host: str, port: int) -> Any:
    """A TCP socket bound with SO_REUSEPORT, so every worker's HTTP server binds the one port."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said, not left 0: asyncio sets TCP_NODELAY only on sockets whose proto is TCP,
    # and without it a response's head and body wait on Nagle + the client's delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


async def _serve(settings: Any, models: tuple[str, ...], reuse_port: bool = False) -> None:
    """One gateway process's servers until SIGINT/SIGTERM (gateway/lifecycle.py: the service is
    opened, both servers started, and on shutdown both drained before the service closes)."""
    from gateway.lifecycle import Gateway, serve

    server = settings.server

    def banner(gateway: Gateway) -> None:
        console.print(
            f"gateway: HTTP http://{server.host}:{server.port}  gRPC {server.host}:{server.grpc_port}"
            f"  Triton {settings.triton.url}  online store {settings.features.online_store}"
            f"  auth {'on' if gateway.service.auth.enabled else 'off'}"
            + (f"  workers {server.workers} (this one pid {os.getpid()})" if reuse_port else "")
        )

    sockets = [_listening_socket(server.host, server.port)] if reuse_port else None
    await serve(settings, models, reuse_port=reuse_port, sockets=sockets, banner=banner)
