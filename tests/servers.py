"""Real servers the tests start and stop: Triton over an exported repository, redis-server and
the gateway (as subprocesses)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from builder.runtime.paths import RuntimePaths
    from builder.runtime.server import TritonServer


@contextmanager
def serving(
    repo: Path, runtime: RuntimePaths, log_path: Path, *, timeout: float = 180
) -> Iterator[TritonServer]:
    """The real Triton serving every model folder now in ``repo`` on free ports, in explicit
    control mode (a model or version added later loads only when a test asks), stopped on exit."""
    from builder.runtime.server import TritonServer

    names = [p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")]
    server = TritonServer(
        repo, runtime=runtime, model_control_mode="explicit", load_models=names, log_path=log_path
    )
    server.start(timeout=timeout)
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def address(self) -> str:
        """Feast's connection-string form."""
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """A throwaway redis-server on a free loopback port (no persistence), stopped on exit."""
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed; the Redis online-store profile is tested against a real one. "
            "Install it: apt-get update && apt-get install -y redis-server (make test does this as root)"
        )
    port = free_port()
    log = workdir / "redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = RedisServer(port, proc, log)
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                pytest.fail(f"redis-server exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"redis-server did not answer PING within 10 s:\n{log.read_text()}")
            time.sleep(0.05)
        yield server
    finally:
        client.close()
        server.stop()


def http_status(url: str, timeout: float = 5) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


@dataclass
class Gateway:
    http: str  # host:port
    grpc: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.http}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def gateway_process(workdir: Path, env: dict[str, str], *, wait_ready: bool = True) -> Iterator[Gateway]:
    """`gateway serve` as a user runs it, configured through GATEWAY_* env vars."""
    http_port, grpc_port = free_port(), free_port()
    log = workdir / f"gateway-{http_port}.log"
    full_env = {**os.environ, "GATEWAY_PORT": str(http_port), "GATEWAY_GRPC_PORT": str(grpc_port), **env}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve"],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    gw = Gateway(f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", proc, log)
    try:
        path = "/readyz" if wait_ready else "/healthz"
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"gateway exited with {proc.returncode}:\n{gw.log_text()}")
            try:
                if http_status(gw.url + path, timeout=2) == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gateway not answering {path} within 90 s:\n{gw.log_text()}")
            time.sleep(0.2)
        yield gw
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
