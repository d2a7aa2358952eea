"""Request ids that carry their time: UUIDv7 (RFC 9562), as 32 hex digits.

A prediction's id is ``{request id}-{row}``; labels name it weeks later. The first 48 bits are
the Unix time in milliseconds, so the id itself says when it was issued: a label whose
prediction is no longer in the shared store is ``expired`` when its id is older than the
store's TTL, ``unknown`` otherwise (gateway/quality/live.py). The other 74 bits are random
(``os.urandom``), as unguessable as the UUIDv4 ids before them, and the ids sort by time.
"""

from __future__ import annotations

import os
import time

_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62


def new_request_id() -> str:
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits; 74 are kept
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | _VERSION | (rand >> 68) << 64 | _VARIANT | rand & ((1 << 62) - 1)
    return f"{value:032x}"


def issued_at(prediction_id: str) -> float | None:
    """When the request of ``prediction_id`` (``{request id}-{row}``, or a request id) was
    issued, in epoch seconds; None when it is not such an id (an older UUIDv4, a typo)."""
    request = prediction_id.partition("-")[0]
    if len(request) != 32 or request[12] != "7":
        return None
    try:
        ms = int(request[:12], 16)
        int(request, 16)
    except ValueError:
        return None
    return ms / 1000.0
