"""Real servers the tests and benchmarks start and stop: Triton over an exported repository,
redis-server and the gateway (as subprocesses).

No pytest here: a server that does not come up raises :class:`ServerStartError` with its log,
which fails a test as plainly as ``pytest.fail`` did and stops a benchmark the same way."""

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from builder.runtime.paths import RuntimePaths
    from builder.runtime.server import TritonServer


@contextmanager
def serving(
    repo: Path, runtime: RuntimePaths, log_path: Path, *, timeout: float = 180
) -> Iterator[TritonServer]:
    """The real Triton serving every model folder now in ``repo`` on free ports, in explicit
    control mode (a model or version added later loads only when a test asks), stopped on exit
    (at once: :func:`stop_now`)."""
    from builder.runtime.server import ServerOptions, TritonServer

    names = [p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")]
    server = TritonServer(repo, ServerOptions.explicit(names), runtime=runtime, log_path=log_path)
    server.start(timeout=timeout)
    try:
        yield server
    finally:
        stop_now(server)


def stop_now(server: TritonServer) -> None:
    """Stop a Triton the tests (or a benchmark) started, without the graceful wait: SIGTERM, then
    SIGKILL to its process group (the server and its Python-backend stubs) at once, then remove
    the shared-memory regions its stubs would have removed on a graceful unload.

    Triton's graceful stop waits, polling once a second, until every HTTP connection a client
    still holds is closed (tritonclient's pooled clients, the gateway's) or ``--exit-timeout-secs``
    (10 s) runs out, then for its models to unload: 2-11 s a server, which nothing checked after a
    test's server is gone depends on. The graceful stop itself is tested where it is the subject
    (``tests/builder/runtime/test_runtime.py``, ``builder serve``'s SIGTERM)."""
    regions = _shared_memory_of(server.pid)
    server.stop(timeout=0)
    for region in regions:
        region.unlink(missing_ok=True)


def _shared_memory_of(pgid: int | None) -> set[Path]:
    """The ``/dev/shm`` files the processes of group ``pgid`` map: the Python backend's regions
    (1 MiB and up a model instance; ``triton_*_shm_region_<uuid>``), which a stub unlinks when
    its model unloads, and a SIGKILLed one leaves behind. Empty where there is no ``/proc``."""
    found: set[Path] = set()
    proc = Path("/proc")
    if pgid is None or not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            maps = (entry / "maps").read_text()
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)  # address perms offset device inode path
            if len(fields) == 6 and fields[5].startswith("/dev/shm/") and not fields[5].endswith("(deleted)"):
                found.add(Path(fields[5]))
    return found


class ServerStartError(RuntimeError):
    """A server the support code started exited or did not answer in time; the message has its log."""


def terminate(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM a server still running, SIGKILL it after ``timeout`` s, and reap it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    argv: tuple[str, ...] = ()  # the command line it was started with, for restart()

    @property
    def address(self) -> str:
        """Feast's connection-string form."""
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL, no goodbye (no shutdown save), and reap it."""
        self.proc.kill()
        self.proc.wait()

    def restart(self, timeout: float = 10) -> float:
        """A new redis-server with the same command line (same port, same data folder: with
        persistence on, it loads what the last one wrote), after the old one is gone. Returns the
        ``time.monotonic()`` at which it first answered PING."""
        if self.proc.poll() is None:
            raise RuntimeError("restart() of a redis-server that is still running")
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=self.log.parent, stdout=out, stderr=subprocess.STDOUT)
        return _await_ping(self, timeout)

    def stop(self) -> None:
        terminate(self.proc)


@contextmanager
def redis_server(workdir: Path, *, appendonly: bool = False) -> Iterator[RedisServer]:
    """A throwaway redis-server on a free loopback port, stopped on exit. No persistence, or with
    ``appendonly`` an append-only file in ``workdir`` (fsync every second, Redis' own default for
    AOF), so a restart on the same folder comes back with the data written before a SIGKILL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerStartError(
            "redis-server is not installed; the Redis online-store profile is tested against a real one. "
            "Install it: apt-get update && apt-get install -y redis-server (make test does this as root)"
        )
    port = free_port()
    log = workdir / "redis.log"
    aof = ("yes", "--appendfsync", "everysec") if appendonly else ("no",)
    argv = (binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", *aof)
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
    server = RedisServer(port, proc, log, argv)
    try:
        _await_ping(server, 10)
        yield server
    finally:
        server.stop()


def _await_ping(server: RedisServer, timeout: float) -> float:
    """Polls ``server`` until it answers PING with PONG (one still loading its data answers an
    error); returns the ``time.monotonic()`` of the first PONG. A bare socket, not redis-py,
    whose client retries a refused connection with seconds of back-off."""
    deadline = time.monotonic() + timeout
    while True:
        if server.proc.poll() is not None:
            raise ServerStartError(
                f"redis-server exited with {server.proc.returncode}:\n{server.log.read_text()}"
            )
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(64).startswith(b"+PONG"):
                    return time.monotonic()
        except OSError:
            pass
        if time.monotonic() > deadline:
            log = server.log.read_text()
            raise ServerStartError(f"redis-server did not answer PING within {timeout:g} s:\n{log}")
        time.sleep(0.01)


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
def gateway_process(
    workdir: Path, env: dict[str, str], *, wait_ready: bool = True, ports: tuple[int, int] | None = None
) -> Iterator[Gateway]:
    """`gateway serve` as a user runs it, configured through GATEWAY_* env vars; ``ports``: its
    HTTP and gRPC ports (a replica restarted where a load balancer expects it), else free ones."""
    http_port, grpc_port = ports or (free_port(), free_port())
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
                raise ServerStartError(f"gateway exited with {proc.returncode}:\n{gw.log_text()}")
            try:
                if http_status(gw.url + path, timeout=2) == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                try:
                    with urllib.request.urlopen(gw.url + path, timeout=5) as resp:
                        said = resp.read().decode(errors="replace")
                except urllib.error.HTTPError as err:
                    said = err.read().decode(errors="replace")
                except OSError as err:
                    said = repr(err)
                raise ServerStartError(
                    f"gateway not answering {path} within 90 s (it said {said}):\n{gw.log_text()}"
                )
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


@dataclass
class S3Server:
    """An S3 API on loopback: moto's server (``python -m moto.server``), buckets in its memory."""

    endpoint: str  # http://127.0.0.1:PORT, as AWS_ENDPOINT_URL takes it
    proc: subprocess.Popen[bytes]
    log: Path


@contextmanager
def s3_server(workdir: Path, *, timeout: float = 30) -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port, stopped on exit (its buckets go with it). It
    accepts any access key: give clients one anyway, as against a real store."""
    port = free_port()
    log = workdir / f"moto-s3-{port}.log"
    argv = [sys.executable, "-m", "moto.server", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = S3Server(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise ServerStartError(
                    f"moto's S3 server exited with {proc.returncode} (moto is pinned in "
                    f"requirements/project.lock: make setup installs it):\n{log.read_text(errors='replace')}"
                )
            try:
                if http_status(f"{server.endpoint}/moto-api/", timeout=2) == 200:  # its dashboard
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"moto's S3 server not answering within {timeout:g} s:\n{log.read_text(errors='replace')}"
                )
            time.sleep(0.1)
        yield server
    finally:
        terminate(proc)
