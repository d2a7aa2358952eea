"""The gateway's HTTP client for Triton (gateway/clients/triton_http.py): the request bytes it writes, the
answers it reads, and how it behaves when the server misbehaves (a local asyncio server plays
Triton's HTTP side here; the gateway tests run it against the real tritonserver)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from pydantic import ValidationError
from tritonclient.utils import serialize_byte_tensor

from gateway.clients.triton import connect
from gateway.clients.triton_grpc import TritonClient
from gateway.clients.triton_http import TritonHTTPClient, bytes_tensor, infer_body, read_outputs, split_url
from gateway.errors import DeadlineExceeded, GatewayError, ModelNotFound, Unavailable
from gateway.settings import GatewaySettings, flat_name, nest


def test_bytes_tensor_writes_tritons_layout_for_any_text():
    for array in (
        np.array([["café"], ["東京"]], dtype=object),
        np.array([[""], ["x"]], dtype=object),
        np.array([[b"\x00\xff"]], dtype=object),
        np.array([["a", "bc"], ["d", "e"]], dtype=object)[:, ::-1],  # strided: C order of the view
    ):
        assert bytes_tensor(array) == serialize_byte_tensor(array).item()
    assert bytes_tensor(np.empty((0, 1), dtype=object)) == b""


def test_infer_body_is_a_json_header_then_each_tensor_in_order():
    amount = np.array([[1.5], [2.0]], dtype=np.float32)
    channel = np.array([["web"], ["pos\u00e9"]], dtype=object)
    body, size = infer_body({'odd "name"': amount, "channel": channel}, ("label", "probabilities"))
    header = json.loads(body[:size])
    assert header["inputs"] == [
        {"name": 'odd "name"', "shape": [2, 1], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
        {"name": "channel", "shape": [2, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 16}},
    ]
    assert [o["name"] for o in header["outputs"]] == ["label", "probabilities"]
    assert all(o["parameters"] == {"binary_data": True} for o in header["outputs"])
    assert body[size:] == amount.tobytes() + serialize_byte_tensor(channel).item()


def test_infer_body_refuses_a_dtype_triton_is_not_sent():
    with pytest.raises(GatewayError, match="float64"):
        infer_body({"x": np.zeros((1, 1))}, ("y",))


class _Reply:
    def __init__(self, status: int, headers: dict[bytes, bytes], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


def test_read_outputs_reads_binary_bytes_and_json_tensors():
    probs = np.array([[0.25, 0.75]], dtype=np.float32)
    names = np.array([["fraud"]], dtype=object)
    header = json.dumps(
        {
            "model_name": "m",
            "model_version": "3",
            "outputs": [
                {"name": "p", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}},
                {"name": "n", "datatype": "BYTES", "shape": [1, 1], "parameters": {"binary_data_size": 9}},
                {"name": "label", "datatype": "INT64", "shape": [1, 1], "data": [1]},
            ],
        }
    ).encode()
    body = header + probs.tobytes() + serialize_byte_tensor(names).item()
    out, version = read_outputs(
        _Reply(200, {b"inference-header-content-length": str(len(header)).encode()}, body)
    )
    assert version == "3"
    np.testing.assert_array_equal(out["p"], probs)
    assert out["n"].tolist() == [[b"fraud"]]
    assert out["label"].dtype == np.int64 and out["label"].tolist() == [[1]]


def test_split_url_and_connect_pick_the_protocol_by_scheme():
    assert split_url("http://triton:8000") == ("triton", 8000)
    assert split_url("http://triton") == ("triton", 8000)

    async def main() -> list[type]:
        clients = [
            connect(u, 1.0) for u in ("http://127.0.0.1:8000", "grpc://127.0.0.1:8001", "127.0.0.1:8001")
        ]
        for client in clients:
            await client.close()
        return [type(c) for c in clients]

    # no scheme: gRPC, as before
    assert asyncio.run(main()) == [TritonHTTPClient, TritonClient, TritonClient]


@pytest.mark.parametrize("url", ["ftp://triton:8000", "http://triton", "triton"])
def test_settings_refuse_a_triton_url_without_scheme_or_port(url: str):
    with pytest.raises(ValidationError, match=r"scheme must be|is not host:port") as caught:
        GatewaySettings(**nest({"triton_url": url}))
    assert flat_name(caught.value.errors()[0]["loc"]) == "triton_url"  # the name the operator set


# --- against a misbehaving server on loopback ------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"\r\ncontent-length: ")[1].split(b"\r\n")[0])
    return await reader.readexactly(length)


def _answer(status: int, body: bytes, close: bool = False) -> bytes:
    reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}[status]
    extra = "Connection: close\r\n" if close else ""
    return f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def _ok(tag: float) -> bytes:
    header = json.dumps(
        {
            "model_version": "1",
            "outputs": [
                {"name": "y", "datatype": "FP32", "shape": [1, 1], "parameters": {"binary_data_size": 4}}
            ],
        }
    ).encode()
    body = header + np.array([[tag]], dtype=np.float32).tobytes()
    head = (
        f"HTTP/1.1 200 OK\r\nInference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _run(
    handler: Handler, test: Callable[[TritonHTTPClient, list[int]], Awaitable[None]], timeout_s: float = 2.0
) -> None:
    async def main() -> None:
        connections: list[int] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.append(1)
            try:
                await handler(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = TritonHTTPClient(f"http://127.0.0.1:{port}", timeout_s)
        try:
            await test(client, connections)
        finally:
            await client.close()
            server.close()

    asyncio.run(main())


X = {"x": np.array([[1.0]], dtype=np.float32)}


def _echo_first_input(keep_alive: bool) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            body = await _read_request(reader)
            size = len(body) - 4
            value = float(np.frombuffer(body[size:], dtype=np.float32)[0])
            await asyncio.sleep(0.01 * (value % 3))  # answers come back out of order
            writer.write(_ok(value))
            await writer.drain()
            if not keep_alive:
                return

    return handler


def test_concurrent_calls_each_get_their_own_answer():
    async def test(client: TritonHTTPClient, connections: list[int]) -> None:
        calls = [
            client.infer("m", {"x": np.array([[float(i)]], dtype=np.float32)}, ("y",)) for i in range(12)
        ]
        answers = await asyncio.gather(*calls)
        assert [float(out["y"][0, 0]) for out, _ in answers] == [float(i) for i in range(12)]
        again = await asyncio.gather(*(client.infer("m", X, ("y",)) for _ in range(4)))
        assert len(again) == 4 and len(connections) <= 12  # connections were reused

    _run(_echo_first_input(keep_alive=True), test)


def test_a_connection_the_server_closed_while_idle_is_replaced_not_an_error():
    async def test(client: TritonHTTPClient, connections: list[int]) -> None:
        for _ in range(3):
            out, version = await client.infer("m", X, ("y",))
            assert version == "1" and out["y"].tolist() == [[1.0]]
            await asyncio.sleep(0.05)  # the server has closed the kept connection by now
        assert len(connections) == 3

    _run(_echo_first_input(keep_alive=False), test)


def test_a_server_that_never_answers_is_a_deadline_not_a_hang():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(10)

    async def test(client: TritonHTTPClient, _: list[int]) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(DeadlineExceeded):
            await client.infer("m", X, ("y",))
        assert loop.time() - start < 1.5

    _run(silent, test, timeout_s=0.3)


def test_half_an_answer_then_a_close_is_unavailable_and_not_sent_twice():
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
        await writer.drain()

    async def test(client: TritonHTTPClient, connections: list[int]) -> None:
        with pytest.raises(Unavailable):
            await client.infer("m", X, ("y",))
        assert len(connections) == 1

    _run(half, test)


@pytest.mark.parametrize(("status", "error"), [(404, ModelNotFound), (503, Unavailable), (500, GatewayError)])
def test_error_answers_map_by_status(status: int, error: type[GatewayError]):
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _read_request(reader)
            writer.write(_answer(status, json.dumps({"error": "told by the server"}).encode()))
            await writer.drain()

    async def test(client: TritonHTTPClient, _: list[int]) -> None:
        with pytest.raises(error) as caught:
            await client.infer("m", X, ("y",))
        assert type(caught.value) is error
        if status == 500:
            assert "told by the server" in str(caught.value)

    _run(refuse, test)


def test_a_closed_port_is_unavailable():
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = TritonHTTPClient(f"http://127.0.0.1:{port}", 1.0)
        with pytest.raises(Unavailable):
            await client.infer("m", X, ("y",))
        assert await client.is_live() is False

    asyncio.run(main())
