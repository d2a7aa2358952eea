"""The Redis online store read directly, in Feast 0.67's layout (feast/infra/online_stores/redis.py):

one hash per entity: key = serialized entity key (``keys.py``) + the project's utf-8 name;
fields = per feature the 4 bytes of mmh3_32("<view>:<feature>") (unsigned, little-endian),
holding a serialized ValueProto, and ``_ts:<view>`` holding the row's event time (a serialized
``google.protobuf.Timestamp``). Views on the same entity share the hash.

A read is one pipelined round trip: an HMGET per (view, distinct entity), written in one send,
the replies parsed by hiredis. The commands are RESP bytes built here (each view's field list
is encoded once, at open), not redis-py's pipeline, whose per-command Python costs more than
the whole read is allowed (docs/feature-reads.md). Two transports over the same bytes: a
blocking socket (``read``) and an asyncio protocol (``read_async``) on which concurrent reads
pipeline, their replies matched in order. A connection that fails is dropped and the error
raised (OSError, as a socket raises it); the next read connects again.

Connection strings are Feast's (``host:port[,db=N][,password=...][,username=...]``); TLS,
cluster and sentinel are refused (``StoreConfigError``): the SDK keeps serving those.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import hiredis

from feast_access.online.errors import LayoutError, StoreConfigError, StoreError
from feast_access.online.plan import Columns, ViewPlan, distinct_keys, fill, plans
from feast_access.online.spec import ServiceSpec
from feast_access.online.values import timestamp_seconds

_PARAMS = frozenset({"db", "password", "username", "ssl"})


@dataclass(frozen=True)
class RedisAddress:
    host: str
    port: int
    db: int = 0
    password: str | None = None
    username: str | None = None


def parse_connection_string(text: str) -> RedisAddress:
    """Feast's Redis connection string (``RedisOnlineStore._parse_connection_string``): the first
    ``host:port``, then ``name=value`` parameters (values JSON-decoded where they parse)."""
    nodes = [part for part in text.split(",") if "=" not in part]
    params: dict[str, Any] = {}
    for part in text.split(","):
        if "=" in part:
            name, value = part.split("=", 1)
            try:
                params[name] = json.loads(value)
            except json.JSONDecodeError:
                params[name] = value
    if len(nodes) != 1 or ":" not in nodes[0]:
        raise StoreConfigError(f"Redis connection string {_safe(text)!r} is not one host:port")
    unknown = set(params) - _PARAMS
    if unknown:
        raise StoreConfigError(
            f"Redis connection parameters {sorted(unknown)} are not supported by the direct reader"
        )
    if params.get("ssl") not in (None, False, "false", "False"):
        raise StoreConfigError("Redis over TLS (ssl=true) is not supported by the direct reader")
    host, _, port = nodes[0].rpartition(":")
    try:
        return RedisAddress(
            host=host or "localhost",
            port=int(port),
            db=int(params.get("db", 0)),
            password=None if params.get("password") is None else str(params["password"]),
            username=None if params.get("username") is None else str(params["username"]),
        )
    except ValueError as exc:
        raise StoreConfigError(f"Redis connection string {_safe(text)!r}: {exc}") from None


def _safe(text: str) -> str:
    """A connection string without its password, for messages."""
    return ",".join("password=***" if p.startswith("password=") else p for p in text.split(","))


def _command(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


def field_name(view: str, feature: str) -> bytes:
    """Feast's hash field for a feature (``helpers._mmh3``): murmur3_32, unsigned, little-endian."""
    import mmh3  # at open only

    return struct.pack("<I", mmh3.hash(f"{view}:{feature}", signed=False))


@dataclass(frozen=True)
class _ViewCommand:
    plan: ViewPlan
    head: bytes  # "*N\r\n$5\r\nHMGET\r\n"
    fields: bytes  # the RESP-encoded field list, the event-time field last


class RedisReader:
    """A feature service's reads from Feast's Redis online store."""

    def __init__(
        self, spec: ServiceSpec, connection_string: str | None = None, timeout_s: float = 5.0
    ) -> None:
        """``connection_string`` overrides the spec's (e.g. to keep a password out of the spec
        file); ``timeout_s`` bounds the blocking socket's connect and each of its reads."""
        self.spec = spec
        if spec.store.type != "redis":
            raise LayoutError(f"feature spec {spec.service!r} is for a {spec.store.type} store, not redis")
        self.address = parse_connection_string(connection_string or spec.store.connection_string or "")
        self.timeout_s = timeout_s
        self._suffix = spec.project.encode("utf-8")
        self._views = []
        for plan in plans(spec):
            fields = [field_name(plan.spec.name, n) for n in plan.names]
            fields.append(f"_ts:{plan.spec.name}".encode())
            self._views.append(
                _ViewCommand(
                    plan=plan,
                    head=b"*%d\r\n$5\r\nHMGET\r\n" % (len(fields) + 2),
                    fields=b"".join(b"$%d\r\n%s\r\n" % (len(f), f) for f in fields),
                )
            )
        hello = []
        if self.address.password is not None:
            auth = [self.address.username.encode()] if self.address.username else []
            hello.append(_command(b"AUTH", *auth, self.address.password.encode()))
        if self.address.db:
            hello.append(_command(b"SELECT", str(self.address.db).encode()))
        self._hello = b"".join(hello)
        self._hello_replies = len(hello)
        self._sock: socket.socket | None = None
        self._sock_reader: Any = None
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    def _commands(
        self, rows: Sequence[Mapping[str, Any]]
    ) -> tuple[bytes, list[tuple[list[bytes], list[int]]]]:
        parts: list[bytes] = []
        keyed = []
        suffix = self._suffix
        for view in self._views:
            keys, index = distinct_keys(view.plan, rows)
            keyed.append((keys, index))
            for key in keys:
                key += suffix
                parts.append(b"%s$%d\r\n%s\r\n%s" % (view.head, len(key), key, view.fields))
        return b"".join(parts), keyed

    def _decode(self, replies: list[Any], keyed: list[tuple[list[bytes], list[int]]]) -> Columns:
        out = Columns({}, {})
        at = 0
        for view, (keys, index) in zip(self._views, keyed, strict=True):
            got = replies[at : at + len(keys)]
            at += len(keys)
            for reply in got:
                if not isinstance(reply, list):
                    raise StoreError(f"Redis answered an HMGET with {reply!r}")
            fill(view.plan, [r[:-1] for r in got], [timestamp_seconds(r[-1]) for r in got], index, out)
        return out

    # -- blocking ---------------------------------------------------------------------------

    def read(self, rows: Sequence[Mapping[str, Any]]) -> Columns:
        """The service's features for ``rows``, over a blocking socket (one round trip)."""
        payload, keyed = self._commands(rows)
        expected = sum(len(keys) for keys, _ in keyed)
        sock = self._sock or self._connect()
        reader = self._sock_reader
        replies: list[Any] = []
        try:
            sock.sendall(payload)
            while len(replies) < expected:
                reply = reader.gets()
                if reply is False:
                    data = sock.recv(65536)
                    if not data:
                        raise ConnectionResetError("Redis closed the connection")
                    reader.feed(data)
                else:
                    replies.append(reply)
        except BaseException:
            self._drop()  # a half-read connection cannot be reused
            raise
        return self._decode(replies, keyed)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.address.host, self.address.port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = hiredis.Reader()
        try:
            if self._hello:
                sock.sendall(self._hello)
                for _ in range(self._hello_replies):
                    reply = reader.gets()
                    while reply is False:
                        data = sock.recv(4096)
                        if not data:
                            raise ConnectionResetError("Redis closed the connection")
                        reader.feed(data)
                        reply = reader.gets()
                    _check_hello(reply)
        except BaseException:
            sock.close()
            raise
        self._sock, self._sock_reader = sock, reader
        return sock

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._sock_reader = None

    def close(self) -> None:
        """Close the blocking socket (the asyncio connection closes with ``aclose``)."""
        self._drop()

    # -- asyncio ----------------------------------------------------------------------------

    async def read_async(self, rows: Sequence[Mapping[str, Any]]) -> Columns:
        """The service's features for ``rows`` on the event loop's connection (one round trip;
        concurrent reads pipeline on it). Cancelling a read (a timeout) leaves the connection
        usable: its replies are read and dropped when they come."""
        payload, keyed = self._commands(rows)
        protocol = self._protocol
        if protocol is None or protocol.closed:
            protocol = await self._connect_async()
        replies = await protocol.request(payload, sum(len(keys) for keys, _ in keyed))
        return self._decode(replies, keyed)

    async def _connect_async(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:  # one connect for the reads that found none
            if self._protocol is not None and not self._protocol.closed:
                return self._protocol
            loop = asyncio.get_running_loop()
            _, protocol = await loop.create_connection(_Protocol, self.address.host, self.address.port)
            try:
                if self._hello:
                    for reply in await protocol.request(self._hello, self._hello_replies):
                        _check_hello(reply)
            except BaseException:
                protocol.close()
                raise
            self._protocol = protocol
            return protocol

    async def aclose(self) -> None:
        """Close both connections (the asyncio one belongs to the loop that opened it)."""
        self._drop()
        self._connecting = None
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None


def _check_hello(reply: Any) -> None:
    if isinstance(reply, hiredis.ReplyError):
        raise StoreError(f"Redis refused the connection's setup: {reply}")


class _Protocol(asyncio.Protocol):
    """RESP over one connection: requests are written in order and their replies, parsed by
    hiredis, handed back in the same order (Redis answers a connection's commands in order)."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader()
        self._waiting: deque[tuple[asyncio.Future[list[Any]], int, list[Any]]] = deque()
        self._transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's and uvloop's transports both write; uvloop's is no asyncio.Transport subclass
        self._transport = cast(asyncio.Transport, transport)

    def request(self, payload: bytes, replies: int) -> asyncio.Future[list[Any]]:
        if self.closed or self._transport is None:
            raise ConnectionResetError("the Redis connection is closed")
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._waiting.append((future, replies, []))
        self._transport.write(payload)
        return future

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        while True:
            reply = reader.gets()
            if reply is False:
                return
            if not self._waiting:  # a reply nobody asked for: the stream is out of step
                self._fail(StoreError("Redis sent a reply no request was waiting for"))
                return
            future, expected, got = self._waiting[0]
            got.append(reply)
            if len(got) == expected:
                self._waiting.popleft()
                if not future.done():  # a cancelled read's replies are dropped
                    future.set_result(got)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        error = ConnectionResetError(f"the Redis connection was lost ({exc or 'closed by the server'})")
        while self._waiting:
            future, _, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)

    def _fail(self, exc: Exception) -> None:
        while self._waiting:
            future, _, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()
