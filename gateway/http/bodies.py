"""Request and response bodies of every HTTP route: JSON read strictly, within a size limit, and
written compactly.

Hostile bodies are a 4xx, never a 500 (docs/gateway-limits.md): the body is bounded
(``max_body_bytes``, also when it comes chunked with no Content-Length), must be UTF-8, and is
parsed with bounded integers (``MAX_INT_DIGITS``), bounded nesting (the parser's recursion
limit, ~1,000), no duplicate keys and no lone surrogates in strings (gateway/http/v1.py checks
those in a row). ``NaN``/``Infinity`` literals parse, and are refused by the column check (a 422
naming the field, gateway/values.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

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


def parse_json(body: bytes) -> Any:
    """The body as JSON, refusing what the stdlib parser lets through or fails on with a 500."""
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
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


async def read_asgi_body(declared: bytes | None, receive: Receive, limit: int) -> bytes:
    """A bare route's body from ASGI ``receive``, refused past ``limit`` bytes (also a chunked
    body with no Content-Length) and when the client leaves before sending all of it."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"body of {declared.decode()} bytes exceeds the limit of {limit}")
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest("the client went away before sending the whole body")
        body += message.get("body", b"")
        if len(body) > limit:
            raise TooLarge(f"body exceeds the limit of {limit} bytes")
        if not message.get("more_body", False):
            return bytes(body)


async def read_body(request: Request, limit: int) -> bytes:
    """A framework route's body up to ``limit`` bytes: past it a 413, however it is sent."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise TooLarge(f"body exceeds the limit of {limit} bytes")
    return bytes(body)
