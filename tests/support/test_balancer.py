"""support.balancer: a real HAProxy in front of three tiny real servers on loopback, each answering
its own name, so the tests see where each request went. What the gateway tests rely on: round
robin per request even on one kept-alive connection (and per call on one gRPC channel), requests
still answered when a backend dies, and a quick 503 (never a hang) when none is left."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest

from support.balancer import Balancer, haproxy
from support.servers import ServerStartError

pytestmark = pytest.mark.integration  # starts real servers: haproxy (Debian package haproxy)

NAMES = ("a", "b", "c")


class NameServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, name: str) -> None:
        super().__init__(("127.0.0.1", 0), NameHandler)
        self.name = name
        self.ready = True  # what GET /readyz answers: 200, or 503 when False
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        """Closes the listening socket: the next connection to this port is refused."""
        self.shutdown()
        self.server_close()
        self.thread.join()


class NameHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive allowed: haproxy, not the backend, decides to close
    server: NameServer

    def do_GET(self) -> None:
        body = self.server.name.encode()
        self.send_response(503 if self.path == "/readyz" and not self.server.ready else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[list[NameServer]]:
    started = [NameServer(name) for name in NAMES]
    yield started
    for server in started:
        if server.socket.fileno() != -1:
            server.stop()


@pytest.fixture
def balancer(servers: list[NameServer], tmp_path: Path) -> Iterator[Balancer]:
    with haproxy([s.address for s in servers], tmp_path) as lb:
        yield lb


def get(conn: http.client.HTTPConnection) -> tuple[int, str]:
    conn.request("GET", "/")
    resp = conn.getresponse()
    return resp.status, resp.read().decode()


def test_round_robin_per_request_on_one_kept_alive_connection(balancer: Balancer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", balancer.port, timeout=5)
    answers = [get(conn) for _ in range(30)]
    sock = conn.sock
    conn.close()
    assert sock is not None, "the client connection was closed by haproxy: not kept alive"
    assert {status for status, _ in answers} == {200}
    assert Counter(name for _, name in answers) == dict.fromkeys(NAMES, 10)


def test_round_robin_over_new_connections(balancer: Balancer) -> None:
    names = []
    for _ in range(30):
        conn = http.client.HTTPConnection("127.0.0.1", balancer.port, timeout=5)
        status, name = get(conn)
        conn.close()
        assert status == 200
        names.append(name)
    assert Counter(names) == dict.fromkeys(NAMES, 10)
    assert balancer.url == f"http://127.0.0.1:{balancer.port}"


def test_a_killed_backend_costs_no_request(balancer: Balancer, servers: list[NameServer]) -> None:
    servers[1].stop()
    conn = http.client.HTTPConnection("127.0.0.1", balancer.port, timeout=5)
    # At once, before any health check noticed: the refused connection is redispatched.
    answers = [get(conn) for _ in range(30)]
    assert {status for status, _ in answers} == {200}
    assert set(Counter(name for _, name in answers)) == {"a", "c"}
    deadline = time.monotonic() + 5
    while "s1 is DOWN" not in balancer.log_text():
        assert time.monotonic() < deadline, balancer.log_text()
        time.sleep(0.05)
    conn.close()


def test_health_path_takes_an_unready_backend_out(servers: list[NameServer], tmp_path: Path) -> None:
    servers[2].ready = False  # alive, accepting connections, but not ready: like a failing readiness probe
    with haproxy([s.address for s in servers], tmp_path, health_path="/readyz") as lb:
        deadline = time.monotonic() + 5
        while "s2 is DOWN" not in lb.log_text():
            assert time.monotonic() < deadline, lb.log_text()
            time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=5)
        names = [get(conn)[1] for _ in range(30)]
        conn.close()
    assert Counter(names) == {"a": 15, "b": 15}


def test_no_backend_left_is_a_quick_503(balancer: Balancer, servers: list[NameServer]) -> None:
    for server in servers:
        server.stop()
    conn = http.client.HTTPConnection("127.0.0.1", balancer.port, timeout=10)
    started = time.monotonic()
    status, _ = get(conn)
    conn.close()
    assert status == 503
    assert time.monotonic() - started < 5  # retries + redispatch, bounded by `timeout connect`


def test_a_server_that_fails_to_start_says_why(tmp_path: Path) -> None:
    with (
        pytest.raises(ServerStartError, match=r"(?s)haproxy exited.*invalid port"),
        haproxy(["127.0.0.1:99999"], tmp_path),
    ):
        pass


# --- gRPC: h2c on both sides, every call balanced on its own ---------------------------------------


@pytest.fixture
def grpc_servers() -> Iterator[list[str]]:
    addresses, started = [], []
    for name in NAMES:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        reply = name.encode()
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context, reply=reply: reply)
        service = grpc.method_handlers_generic_handler("test.Name", {"Get": handler})
        server.add_generic_rpc_handlers((service,))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        started.append(server)
        addresses.append(f"127.0.0.1:{port}")
    yield addresses
    for server in started:
        server.stop(grace=None)


def test_grpc_calls_on_one_channel_round_robin(grpc_servers: list[str], tmp_path: Path) -> None:
    with haproxy(grpc_servers, tmp_path, mode="grpc") as lb, grpc.insecure_channel(lb.address) as channel:
        call = channel.unary_unary("/test.Name/Get")
        names = [call(b"", timeout=5).decode() for _ in range(30)]
    assert Counter(names) == dict.fromkeys(NAMES, 10)


def test_tcp_mode_balances_connections_not_requests(servers: list[NameServer], tmp_path: Path) -> None:
    with haproxy([s.address for s in servers], tmp_path, mode="tcp") as lb:
        conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=5)
        one_connection = {get(conn)[1] for _ in range(6)}
        conn.close()
    assert len(one_connection) == 1
