"""Request and response bodies of every HTTP route: JSON read strictly, within a size limit, and
written compactly.

Hostile bodies are a 4xx, never a 500 (docs/gateway-limits.md): the body is bounded
(``max_body_bytes``, also when it comes chunked with no Content-Length), must be UTF-8, and is
parsed with bounded integers (``MAX_INT_DIGITS``), bounded nesting (the parser's recursion
limit, ~1,000), no duplicate keys and no lone surrogates in strings (gateway/http/v1.py checks
those in a row). ``NaN``/``Infinity`` literals parse, and are refused by the column check (a 422
naming the field, gateway/values.py).

Both ways go through orjson first, for the bodies where it gives exactly what the standard
library's strict parse and compact render give (~1 µs where those cost ~4 µs each on a one-row
predict; issue 33), and through the standard library otherwise, so every status and message is
as before: a body with a digit run of 19 or more (orjson reads an integer past 64 bits as a
float), nesting deeper than ``FAST_DEPTH``, anything orjson refuses (NaN literals, a lone
surrogate, big or infinite numbers, invalid UTF-8) or a body whose objects hold fewer keys than
it has colons (a duplicate key orjson would have merged; a colon inside a string also lands here,
harmlessly) is parsed again strictly. An answer orjson cannot write (a lone surrogate, a big
integer, a non-string key) or writes with ``null`` in it (it writes NaN and infinities as null,
which the strict render refuses) is rendered by the standard library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import orjson
from starlette.requests import Request

from gateway.errors import BadRequest, TooLarge

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

# Converting an integer costs time quadratic in its digits (Python refuses past 4,300 with a
# ValueError, once a 500). Up to 1,000 digits it is read, so one out of its column's range (float64
# ends at 309 digits, int64 at 19) gets the 422 that names its field; past that, a 400.
MAX_INT_DIGITS = 1000


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BadRequest(f"body has an integer of {len(text)} digits; at most {MAX_INT_DIGITS} are read")
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        # two values for one field: which one a proxy or a client library reads is anyone's guess
        dup = next(k for i, (k, _) in enumerate(pairs) if any(k == p for p, _ in pairs[:i]))
        raise BadRequest(f"body has the key {dup!a} twice in one object")
    return obj


FAST_DEPTH: Final = 64  # deeper documents are parsed by the standard library alone
_LONG_NUMBER: Final = re.compile(rb"\d{19}")  # where orjson's numbers may differ from int()'s


def parse_json(body: bytes) -> Any:
    """The body as JSON, refusing what the stdlib parser lets through or fails on with a 500."""
    if _LONG_NUMBER.search(body) is None:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            if _keys(doc, 0) == body.count(b":"):  # else a key twice (or a colon in a string)
                return doc
    return _strict(body)


def _keys(value: Any, depth: int) -> int:
    """Keys of every object in ``value``; -1 past ``FAST_DEPTH`` levels (never a colon count)."""
    if depth > FAST_DEPTH:
        return -1
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    n = len(value) if isinstance(value, dict) else 0
    for child in children:
        if isinstance(child, dict | list):
            k = _keys(child, depth + 1)
            if k < 0:
                return -1
            n += k
    return n


def _strict(body: bytes) -> Any:
    try:
        # strict UTF-8 (RFC 8259); json.loads(bytes) would take surrogates encoded in the bytes
        text = body.decode("utf-8")
        return json.loads(text, parse_int=_int, object_pairs_hook=_object)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("body is not valid JSON here: it is nested too deeply") from None


def to_json(content: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette's JSONResponse renders it; NaN is refused, not sent.

    A lone surrogate (an error may echo a caller's field name) has no UTF-8: ``backslashreplace``
    writes it as ``\\udXXX``, which inside a JSON string is the JSON escape for it."""
    try:
        fast = orjson.dumps(content)
    except TypeError:  # orjson.JSONEncodeError is one: what only the standard library writes
        return _strict_json(content)
    return _strict_json(content) if b"null" in fast else fast


def _strict_json(content: Any) -> bytes:
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


def over_declared(declared: bytes | None, limit: int) -> TooLarge | None:
    """The 413 of a body whose Content-Length is past ``limit``, before any of it is read."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return TooLarge(f"body of {declared.decode()} bytes exceeds the limit of {limit}")
    return None


def over_limit(limit: int) -> TooLarge:
    """The 413 of a body that grew past ``limit`` while it arrived (also chunked, with no length)."""
    return TooLarge(f"body exceeds the limit of {limit} bytes")


async def read_asgi_body(declared: bytes | None, receive: Receive, limit: int) -> bytes:
    """A bare route's body from ASGI ``receive``, refused past ``limit`` bytes (also a chunked
    body with no Content-Length) and when the client leaves before sending all of it."""
    refused = over_declared(declared, limit)
    if refused is not None:
        raise refused
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest("the client went away before sending the whole body")
        body += message.get("body", b"")
        if len(body) > limit:
            raise over_limit(limit)
        if not message.get("more_body", False):
            return bytes(body)


async def read_body(request: Request, limit: int) -> bytes:
    """A framework route's body up to ``limit`` bytes: past it a 413, however it is sent."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise over_limit(limit)
    return bytes(body)
