"""A real load balancer (HAProxy, Debian package ``haproxy``) in front of several servers, so tests
and benchmarks reach N gateway processes through ONE address, as clients reach the replicas behind
a Kubernetes Service. State kept in one process's memory shows up here: the next request, or call,
lands on another process.

``mode="http"`` spreads every HTTP/1.1 request, even several on one kept-alive client connection;
``mode="grpc"`` speaks HTTP/2 without TLS (h2c) on both sides and spreads every gRPC call, even on
one channel; ``mode="tcp"`` spreads connections only, as a plain ClusterIP Service (kube-proxy) does.

No pytest here: a balancer that does not come up raises :class:`ServerStartError` with its output.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from support.servers import ServerStartError, free_port

Mode = Literal["http", "tcp", "grpc"]
# HAProxy's algorithms that need no extra argument; anything else is refused before it reaches a
# config file rather than failing inside haproxy's parser.
BALANCE = ("roundrobin", "static-rr", "leastconn", "first", "source", "random")


@dataclass
class Balancer:
    port: int
    proc: subprocess.Popen[bytes]
    config: Path
    log: Path
    backends: tuple[str, ...]
    mode: Mode

    @property
    def address(self) -> str:
        """``127.0.0.1:port``: a gRPC target (``mode="grpc"``) or a socket address."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def log_text(self) -> str:
        """HAProxy's own output: warnings, servers going DOWN/UP, errors (normal traffic is not logged)."""
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: haproxy's hard stop, open connections are closed
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def haproxy_config(
    backends: list[str],
    port: int,
    *,
    mode: Mode = "http",
    balance: str = "roundrobin",
    health_path: str | None = None,
) -> str:
    """The whole haproxy.cfg: one frontend on ``127.0.0.1:port``, one backend with ``backends``."""
    if not backends:
        raise ValueError("haproxy needs at least one backend")
    if balance not in BALANCE:
        raise ValueError(f"balance {balance!r} is not one of {', '.join(BALANCE)}")
    if health_path is not None and mode != "http":
        raise ValueError("health_path is an HTTP check; mode tcp/grpc backends get TCP connect checks")
    h2 = " proto h2" if mode == "grpc" else ""
    lines = [
        "global",
        # Warnings and server state changes go to haproxy's stderr (our log file): the only place
        # a test learns that a backend was marked DOWN.
        "    log stderr format raw local0 info",
        "",
        "defaults",
        "    log global",
        # Log anomalies (errors, retries, 5xx from haproxy) but not each successful request.
        "    option dontlog-normal",
        f"    mode {'tcp' if mode == 'tcp' else 'http'}",
        "    timeout connect 2s",
        "    timeout client 30s",
        "    timeout server 30s",
        "    timeout check 1s",
        # A connection refused by a backend that just died is retried, on another server each time
        # (redispatch 1), instead of failing the request. Only a connect failure is retried by
        # default (retry-on conn-failure), so a POST is never sent twice.
        "    retries 3",
        "    option redispatch 1",
    ]
    if mode == "http":
        # Keep the client's connection alive but close the server side after each response: the
        # next request on that client connection goes through the balancing algorithm again and
        # may land on another backend, so balancing is per request, not per connection. (2.6's
        # default keep-alive mode re-balances each request too; this makes it explicit and leaves
        # no idle server connection that `prefer-last-server` or a later default could stick to.)
        lines.append("    option http-server-close")
    # grpc: each HTTP/2 stream (one gRPC call) is its own request to haproxy and is balanced on its
    # own; the h2 connections to the backends stay open and are multiplexed, so no server-close.
    lines += [
        "",
        "frontend fe",
        f"    bind 127.0.0.1:{port}{h2}",
        "    default_backend be",
        "",
        "backend be",
        f"    balance {balance}",
    ]
    if health_path is not None:
        # Like a readiness probe: a backend is served traffic only while GET health_path is 200.
        lines += [f"    option httpchk GET {health_path}", "    http-check expect status 200"]
    for i, backend in enumerate(backends):
        # Fast checks (TCP connect, or health_path): a killed backend is marked DOWN within
        # ~0.2 s and back UP on its first good check, so tests need not sleep long.
        lines.append(f"    server s{i} {backend}{h2} check inter 100ms fall 2 rise 1")
    return "\n".join(lines) + "\n"


@contextmanager
def haproxy(
    backends: list[str],
    workdir: Path,
    *,
    mode: Mode = "http",
    balance: str = "roundrobin",
    health_path: str | None = None,
    timeout: float = 10,
) -> Iterator[Balancer]:
    """HAProxy on a free loopback port in front of ``backends`` (``host:port`` each), stopped on
    exit. Its config and output are in ``workdir`` (``haproxy-PORT.cfg``, ``haproxy-PORT.log``).

    ``health_path`` (http mode) checks each backend with ``GET health_path`` instead of a TCP
    connect. Raises :class:`ServerStartError` with haproxy's output if it exits or does not accept
    connections within ``timeout`` seconds."""
    binary = shutil.which("haproxy")
    if binary is None:
        raise ServerStartError(
            "haproxy is not installed; several gateway processes are tested behind a real load balancer. "
            "Install it: apt-get update && apt-get install -y haproxy (make test does this as root)"
        )
    port = free_port()
    config = workdir / f"haproxy-{port}.cfg"
    config.write_text(haproxy_config(backends, port, mode=mode, balance=balance, health_path=health_path))
    log = workdir / f"haproxy-{port}.log"
    with log.open("wb") as out:
        # -db: foreground, no daemon, so the process we hold is haproxy itself and dies with the test.
        proc = subprocess.Popen(
            [binary, "-f", str(config), "-db"],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    balancer = Balancer(port, proc, config, log, tuple(backends), mode)
    try:
        _await_listening(balancer, timeout)
        yield balancer
    finally:
        balancer.stop()


def _await_listening(balancer: Balancer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if balancer.proc.poll() is not None:
            raise ServerStartError(f"haproxy exited with {balancer.proc.returncode}:\n{_tail(balancer)}")
        try:
            with socket.create_connection(("127.0.0.1", balancer.port), timeout=1):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"haproxy not listening on {balancer.address} within {timeout:g} s:\n{_tail(balancer)}"
            )
        time.sleep(0.02)


def _tail(balancer: Balancer, lines: int = 30) -> str:
    return "\n".join(balancer.log_text().splitlines()[-lines:])
