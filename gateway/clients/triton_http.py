"""The gateway's Triton client over HTTP/REST: the KServe V2 protocol with Triton's binary tensor
extension, on a small pool of keep-alive HTTP/1.1 connections parsed by ``httptools``.

Why not gRPC, or tritonclient's HTTP client: on the demo model at one client, one inference call
cost the gateway ~330 µs of CPU through ``grpc.aio`` and ~290 µs through aiohttp
(``tritonclient.http.aio``), against ~50-100 µs for the same request written here on an asyncio
protocol (issue 16; ``make bench`` (c) measures the gateway's CPU per request). At one client
that was most of the gateway's cost per request, and Triton's HTTP endpoint answered sooner too.
The request is the one ``tritonclient.http`` builds with ``binary_data=True``: a JSON header
naming each tensor's shape, datatype and ``binary_data_size``, then the tensors' raw bytes
(numbers C-order, strings in Triton's length-prefixed BYTES layout), and outputs asked for as
binary, so nothing numeric goes through JSON either way.

One request at a time per connection (HTTP/1.1 without pipelining); concurrent calls take
further connections, kept for reuse up to ``MAX_IDLE``. A call that fails on a reused
connection before any byte of the answer came back (Triton closed it while it sat idle) is sent
once more on a fresh connection: an inference is a pure function of its inputs.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import quote

import httptools
import numpy as np
from tritonclient.utils import deserialize_bytes_tensor

from gateway.errors import DeadlineExceeded, GatewayError, ModelNotFound, Unavailable

# numpy dtype -> Triton datatype; strings travel as object arrays of str, Triton's BYTES. Keyed
# by the dtype itself: ``dtype.name`` is computed on every access (~7 µs, twice per input).
TRITON_DTYPES = {
    np.dtype(np.float32): "FP32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.bool_): "BOOL",
    np.dtype(object): "BYTES",
}
# Triton datatype -> numpy dtype of an answer's tensor
_NUMPY_DTYPES = {
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
MAX_IDLE = 32  # idle connections kept; the batcher's in-flight calls need a handful


class _Reply:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[bytes, bytes], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class _ConnectionLost(Exception):
    """The connection closed under a call; ``answered``: whether any of the answer came back."""

    def __init__(self, answered: bool) -> None:
        super().__init__("connection to Triton closed")
        self.answered = answered


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; ``call`` sends a request and waits for its answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[_Reply] | None = None
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._started = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._started = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(GatewayError(f"Triton sent an answer that is not HTTP: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(_ConnectionLost(self._started))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        reply = _Reply(self._parser.get_status_code(), self._headers, b"".join(self._body))
        if not self._parser.should_keep_alive():
            self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)

    async def call(self, message: bytes) -> _Reply:
        assert self.transport is not None
        self._headers, self._body, self._started = {}, [], False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(message)
        return await self._waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()


class _Pool:
    """Keep-alive connections to one host; a call gets an idle one or opens another."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._idle: list[_Connection] = []

    async def request(self, method: str, path: str, body: bytes = b"", headers: str = "") -> _Reply:
        """The answer to one request, within ``timeout_s`` (connecting included)."""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{headers}Content-Length: {len(body)}\r\n\r\n"
        )
        message = head.encode("latin-1") + body
        try:
            async with asyncio.timeout(self.timeout_s):
                while self._idle:
                    conn = self._idle.pop()
                    if conn.closed:
                        continue
                    try:
                        return self._done(conn, await conn.call(message))
                    except _ConnectionLost as exc:
                        if exc.answered:  # half an answer: not safe to assume it never ran
                            raise
                    except BaseException:
                        conn.close()
                        raise
                conn = await self._connect()
                try:
                    return self._done(conn, await conn.call(message))
                except BaseException:
                    conn.close()
                    raise
        except TimeoutError:
            raise DeadlineExceeded("Triton did not answer in time", cause="triton_timeout") from None
        except (OSError, _ConnectionLost) as exc:
            raise Unavailable(f"Triton is unreachable ({exc})", cause="triton_unavailable") from None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self.host, self.port)
        return conn

    def _done(self, conn: _Connection, reply: _Reply) -> _Reply:
        if not conn.closed and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()
        return reply

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


def split_url(url: str) -> tuple[str, int]:
    """``http://host:port`` (or ``host:port``) as (host, port); port 8000, Triton's, if none."""
    rest = url.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host:
        return rest, 8000
    if not port.isdigit():
        raise ValueError(f"Triton URL {url!r} has no valid port")
    return host, int(port)


def triton_datatype(name: str, array: np.ndarray) -> str:
    """The Triton datatype ``array`` is sent as (by its numpy dtype), or the reason it is not."""
    datatype = TRITON_DTYPES.get(array.dtype)
    if datatype is None:
        raise GatewayError(f"input {name!r} is {array.dtype}, which the gateway does not send to Triton")
    return datatype


def bytes_tensor(array: np.ndarray) -> bytes:
    """Triton's BYTES layout for an array of str (or bytes): each element, C order, as a 4-byte
    little-endian length and its UTF-8 bytes. What ``tritonclient.utils.serialize_byte_tensor``
    writes, without its per-call numpy iteration (~15 µs per one-element input)."""
    parts = []
    for value in array.flat:
        data = value.encode() if isinstance(value, str) else bytes(value)
        parts.append(len(data).to_bytes(4, "little"))
        parts.append(data)
    return b"".join(parts)


@functools.lru_cache(maxsize=4096)
def _json_name(name: str) -> str:
    return json.dumps(name)


Signature = tuple[tuple[tuple[str, np.dtype, tuple[int, ...]], ...], tuple[str, ...]]
_HEADERS: dict[Signature, str] = {}  # a request header per signature, binary sizes left as %d
_MAX_HEADERS = 1024  # one per (model, batch size) in practice


def _header_template(signature: Signature) -> str:
    """The JSON header of every request with these inputs (names, dtypes, shapes) and outputs,
    each input's ``binary_data_size`` a ``%d`` to fill; raises for a dtype Triton is not sent."""

    def quoted(name: str) -> str:  # a name's own % are not placeholders
        return _json_name(name).replace("%", "%%")

    tensors = []
    for name, dtype, shape in signature[0]:
        datatype = TRITON_DTYPES.get(dtype)
        if datatype is None:
            raise GatewayError(f"input {name!r} is {dtype}, which the gateway does not send to Triton")
        tensors.append(
            f'{{"name":{quoted(name)},"shape":[{",".join(map(str, shape))}],"datatype":"{datatype}",'
            '"parameters":{"binary_data_size":%d}}'
        )
    wanted = ",".join(f'{{"name":{quoted(o)},"parameters":{{"binary_data":true}}}}' for o in signature[1])
    return f'{{"inputs":[{",".join(tensors)}],"outputs":[{wanted}]}}'


def infer_body(inputs: Mapping[str, np.ndarray], outputs: tuple[str, ...]) -> tuple[bytes, int]:
    """The binary-extension request body for these arrays and its JSON header's length.

    The header is a template per (names, dtypes, shapes, outputs), written once and filled with
    the tensors' sizes (json.dumps of the nested dicts was ~25 µs for nine inputs; formatting
    each header anew ~10)."""
    signature: Signature = (tuple((name, a.dtype, a.shape) for name, a in inputs.items()), outputs)
    template = _HEADERS.get(signature)
    if template is None:
        if len(_HEADERS) >= _MAX_HEADERS:
            _HEADERS.clear()
        template = _HEADERS[signature] = _header_template(signature)
    # C order, any strides; strings in Triton's BYTES layout
    blobs = [bytes_tensor(a) if a.dtype == object else a.tobytes() for a in inputs.values()]
    header = (template % tuple(map(len, blobs))).encode()
    return header + b"".join(blobs), len(header)


def read_outputs(reply: _Reply) -> tuple[dict[str, np.ndarray], str]:
    """The answer's tensors by name (BYTES as object arrays of bytes) and the version that ran."""
    declared = reply.headers.get(b"inference-header-content-length")
    size = int(declared) if declared is not None else len(reply.body)
    header = json.loads(reply.body[:size])
    offset = size
    out: dict[str, np.ndarray] = {}
    for tensor in header.get("outputs", []):
        shape, datatype = tensor["shape"], tensor["datatype"]
        nbytes = (tensor.get("parameters") or {}).get("binary_data_size")
        if nbytes is None:  # sent as JSON
            dtype: Any = object if datatype == "BYTES" else _NUMPY_DTYPES[datatype]
            out[tensor["name"]] = np.array(tensor["data"], dtype=dtype).reshape(shape)
            continue
        raw = reply.body[offset : offset + nbytes]
        offset += nbytes
        if datatype == "BYTES":
            array = deserialize_bytes_tensor(raw) if nbytes else np.empty(0, dtype=object)
        else:
            array = np.frombuffer(raw, dtype=_NUMPY_DTYPES[datatype])
        out[tensor["name"]] = array.reshape(shape)
    return out, str(header.get("model_version", ""))


def _error(reply: _Reply, what: str) -> GatewayError:
    """A non-200 answer in the gateway's error tree, by status code (never by message text)."""
    try:
        message = str(json.loads(reply.body).get("error", ""))
    except (ValueError, AttributeError):
        message = reply.body[:200].decode("utf-8", "replace")
    if reply.status == 404:
        return ModelNotFound(f"Triton has no ready model for {what}")
    if reply.status in (502, 503):
        return Unavailable(f"Triton is unavailable ({what}): {message}", cause="triton_unavailable")
    if reply.status == 504:
        return DeadlineExceeded(f"Triton did not answer {what} in time", cause="triton_timeout")
    return GatewayError(f"Triton failed {what}: {message}")


_INFER_HEADERS = "Content-Type: application/octet-stream\r\nInference-Header-Content-Length: %d\r\n"


class TritonHTTPClient:
    """What the gateway asks Triton (inference, model config and readiness, liveness) over HTTP."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        host, port = split_url(url)
        self._pool = _Pool(host, port, timeout_s)
        self._paths: dict[tuple[str, str], str] = {}  # (model, version) -> its infer path, quoted once

    async def close(self) -> None:
        self._pool.close()

    async def _get(self, path: str, what: str) -> _Reply:
        reply = await self._pool.request("GET", path)
        if reply.status != 200:
            raise _error(reply, what)
        return reply

    async def model_config(self, model: str) -> dict:
        reply = await self._get(f"/v2/models/{quote(model)}/config", f"the config of {model!r}")
        config: dict = json.loads(reply.body)
        return config

    async def model_ready_version(self, model: str) -> str | None:
        """The newest ready version of ``model``, or None when it is not ready."""
        versions = await self.ready_versions(model)
        return versions[-1] if versions else None

    async def ready_versions(self, model: str) -> list[str]:
        """The versions of ``model`` Triton serves, oldest first; empty when it is not ready."""
        reply = await self._pool.request("GET", f"/v2/models/{quote(model)}/ready")
        if reply.status in (400, 404):  # Triton: 400 not ready, 404 unknown
            return []
        if reply.status != 200:
            raise _error(reply, f"the state of {model!r}")
        try:
            meta = json.loads((await self._get(f"/v2/models/{quote(model)}", f"the state of {model!r}")).body)
        except ModelNotFound:
            return []  # unloaded between the two calls
        return sorted((str(v) for v in meta.get("versions") or ["1"]), key=int)

    async def is_live(self) -> bool:
        try:
            return (await self._pool.request("GET", "/v2/health/live")).status == 200
        except GatewayError:
            return False

    async def infer(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict[str, np.ndarray], str]:
        """One inference call: named input arrays in (their dtype gives the Triton type), the
        named outputs back (BYTES outputs as object arrays of bytes), and the version Triton ran.
        ``version`` pins one; "" is Triton's choice (its newest loaded version)."""
        body, header_size = infer_body(inputs, outputs)
        path = self._paths.get((model, version))
        if path is None:
            path = self._paths[(model, version)] = (
                f"/v2/models/{quote(model)}/versions/{quote(version)}/infer"
                if version
                else f"/v2/models/{quote(model)}/infer"
            )
        reply = await self._pool.request("POST", path, body, _INFER_HEADERS % header_size)
        if reply.status != 200:
            raise _error(reply, f"inference on {model!r}")
        out, version = read_outputs(reply)
        missing = [o for o in outputs if o not in out]
        if missing:
            raise GatewayError(f"Triton's answer for {model!r} lacks the output {missing[0]!r}")
        return out, version
