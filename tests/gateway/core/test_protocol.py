"""The gateway's HTTP protocol (gateway/http/protocol.py) on a real socket: the bare routes
answered from the parser, without ASGI, as the framework's path answered them (one write, same
statuses, headers, limits and metrics), and what it leaves to the framework (another method,
``Expect: 100-continue``, a pipelined request) still answered, in order. A uvicorn server in
this process over a Service with a fake Triton and online store (tests/gateway/core/helpers.py)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from prometheus_client import REGISTRY

from gateway.http.server import http_server
from gateway.settings import ServerSettings
from support.servers import free_port
from tests.gateway.core.helpers import ROWS, amounts, multi_config, service_of

BODY = json.dumps(ROWS).encode()
LIMIT = 4096  # the body limit these tests run with


def _answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    a = amounts(inputs)
    return {"prediction": np.hstack([a, 2 * a, 3 * a])}


def _post(body: bytes, *, path: str = "/v1/models/m/predict", version: str = "1.1", extra: str = "") -> bytes:
    head = f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
    return head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Every whole HTTP/1.1 response in ``data`` (Content-Length framed): status, headers, body."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        size = int(headers["content-length"])
        out.append((int(lines[0].split()[1]), headers, rest[:size]))
        data = rest[size:]
    return out


async def _exchange(port: int, payload: bytes, expect: int, close: bool = False) -> bytes:
    """Send ``payload`` on a fresh connection; read until ``expect`` responses came (or EOF)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = b""
    try:
        while len(_complete(data)) < expect or close:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                break
            data += chunk
    finally:
        writer.close()
    return data


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _complete(data: bytes) -> list[Any]:
    try:
        return _responses(data.removeprefix(CONTINUE))
    except (ValueError, KeyError, IndexError):
        return []


def _serve(test: Callable[[int], Awaitable[None]]) -> None:
    service = service_of(multi_config(), _answer)
    port = free_port()
    server_settings = ServerSettings(port=port, idle_timeout_s=5)
    limits = service.settings.limits.model_copy(update={"max_body_bytes": LIMIT})
    service.settings = service.settings.model_copy(update={"server": server_settings, "limits": limits})

    async def main() -> None:
        server = http_server(service)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            await test(port)
        finally:
            server.should_exit = True
            await task

    asyncio.run(main())


def _count(route: str, status: str) -> float:
    value = REGISTRY.get_sample_value(
        "gateway_request_seconds_count", {"route": route, "model": "m", "status": status}
    )
    return value or 0.0


def test_a_predict_is_answered_whole_in_one_response_with_the_frameworks_headers():
    async def test(port: int) -> None:
        before = _count("predict", "200")
        ((status, headers, body),) = _responses(await _exchange(port, _post(BODY), 1))
        assert status == 200 and headers["content-type"] == "application/json"
        assert {"date", "server", "content-length"} <= set(headers)
        answer = json.loads(body)
        assert answer["kind"] == "regression" and [p["value"] for p in answer["predictions"]] == [
            [5.0, 10.0, 15.0],
            [150.0, 300.0, 450.0],
        ]
        assert _count("predict", "200") == before + 1  # the request metrics, as on the ASGI path

    _serve(test)


def test_pipelined_requests_and_other_methods_are_answered_in_order():
    async def test(port: int) -> None:
        get = b"GET /v1/models/m/predict HTTP/1.1\r\nHost: x\r\n\r\n"
        health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        data = await _exchange(port, _post(BODY) + get + _post(BODY) + health + _post(b"{bad"), 5)
        statuses = [s for s, _, _ in _responses(data)]
        assert statuses == [200, 405, 200, 200, 400]
        _, headers, body = _responses(data)[1]
        assert headers["allow"] == "POST" and json.loads(body)["cause"] == "method_not_allowed"
        assert "not valid JSON" in json.loads(_responses(data)[4][2])["error"]

    _serve(test)


def test_http_1_0_and_connection_close_are_answered_then_closed():
    async def test(port: int) -> None:
        for payload in (_post(BODY, version="1.0"), _post(BODY, extra="Connection: close\r\n")):
            data = await _exchange(port, payload, 1, close=True)  # read to EOF: the server closes
            ((status, headers, _),) = _responses(data)
            assert status == 200 and headers["connection"] == "close"

    _serve(test)


def test_bodies_past_the_limit_are_413_declared_or_streamed_and_the_connection_serves_on():
    async def test(port: int) -> None:
        declared = b"POST /v1/models/m/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
        # answered before the body: the rest, sent anyway, is read and dropped; the next request
        # on the same connection is served
        data = await _exchange(port, declared + b" " * 100000 + _post(BODY), 2)
        (s1, _, b1), (s2, _, _) = _responses(data)
        assert (s1, s2) == (413, 200) and json.loads(b1)["error"] == (
            f"body of 100000 bytes exceeds the limit of {LIMIT}"
        )
        chunk = b" " * 1000
        chunked = b"POST /v1/models/m/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunked += b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(8)) + b"0\r\n\r\n"
        ((status, _, body),) = _responses(await _exchange(port, chunked, 1))
        assert status == 413 and json.loads(body) == {
            "error": f"body exceeds the limit of {LIMIT} bytes",
            "cause": "too_large",
        }

    _serve(test)


def test_expect_100_continue_and_an_encoded_path_take_the_frameworks_way():
    async def test(port: int) -> None:
        expect = _post(BODY, extra="Expect: 100-continue\r\n")
        data = await _exchange(port, expect, 1)
        assert data.startswith(CONTINUE)
        ((status, _, _),) = _responses(data.removeprefix(CONTINUE))
        assert status == 200
        ((status, _, _),) = _responses(await _exchange(port, _post(BODY, path="/v1/models/%6D/predict"), 1))
        assert status == 200  # "%6D" is "m": the framework's routing decodes it, as before
        oip = {
            "inputs": [
                {"name": "customer_id", "datatype": "BYTES", "shape": [1, 1], "data": ["C-1"]},
                {"name": "amount", "datatype": "FP32", "shape": [1, 1], "data": [5.0]},
                {"name": "channel", "datatype": "BYTES", "shape": [1, 1], "data": ["web"]},
            ]
        }
        payload = _post(json.dumps(oip).encode(), path="/v2/models/m/infer")
        ((status, _, body),) = _responses(await _exchange(port, payload, 1))
        assert status == 200 and json.loads(body)["outputs"], body  # the OIP route, answered here too

    _serve(test)


def test_a_client_that_leaves_before_the_answer_does_not_stop_the_server():
    async def test(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(_post(BODY))
        ((status, _, _),) = _responses(await _exchange(port, _post(BODY), 1))
        assert status == 200

    _serve(test)
