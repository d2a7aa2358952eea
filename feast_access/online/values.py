"""Feast's ValueProto (feast/protos/feast/types/Value.proto) decoded by hand, to the Python value
``OnlineResponse.to_dict()`` gives (``feast_value_type_to_python_type``), without protobuf.

Faster than parsing with a generated module and then asking for the oneof (``make bench``'s
feature-read script measures both: docs/feature-reads.md), because the spec says which field a
feature is written in: the decoder for a DOUBLE feature checks for the one tag byte and unpacks
eight bytes; anything else (another field, a null, a multi-byte length) goes through the
general decoder, which knows every field the readers serve and refuses the rest.

Field numbers (proto3, ``oneof val``): 1 bytes, 2 string, 3 int32, 4 int64, 5 double, 6 float,
7 bool, 8 unix_timestamp, 11-18 their lists (one repeated field ``val`` = 1, packed for
numbers), 19 null. Feast's to_dict turns a unix timestamp into an aware UTC datetime (None for
INT64's minimum, its null) and returns lists as lists; an unset value is None.
"""

from __future__ import annotations

import calendar
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from feast_access.online.errors import LayoutError

NULL_TIMESTAMP = -(2**63)  # feast.type_map.NULL_TIMESTAMP_INT_VALUE
_D = struct.Struct("<d")
_F = struct.Struct("<f")

Decoder = Callable[[bytes], Any]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        try:
            byte = buf[pos]
        except IndexError:
            raise LayoutError("truncated ValueProto (a varint runs past the end)") from None
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _int64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >= 1 << 63 else v


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF  # protobuf keeps an int32's low 32 bits (negatives arrive sign-extended)
    return v - (1 << 32) if v >= 1 << 31 else v


def _timestamp(v: int) -> datetime | None:
    return None if v == NULL_TIMESTAMP else datetime.fromtimestamp(v, tz=UTC)


# varint scalars: field -> conversion
_VARINT_FIELDS: dict[int, Callable[[int], Any]] = {
    3: _int32,
    4: _int64,
    7: bool,
    8: lambda v: _timestamp(_int64(v)),
    19: int,  # null_val: to_dict gives the enum's number (NULL_VALUE, 0), not None
}
# list fields: field -> (wire type of an element, element conversion from its raw form)
_LIST_FIELDS: dict[int, tuple[int, Callable[[Any], Any]]] = {
    11: (2, bytes),
    12: (2, lambda b: b.decode("utf-8")),
    13: (0, _int32),
    14: (0, _int64),
    15: (1, lambda b: _D.unpack(b)[0]),
    16: (5, lambda b: _F.unpack(b)[0]),
    17: (0, bool),
    18: (0, lambda v: _timestamp(_int64(v))),
}
_FIXED_SIZE = {1: 8, 5: 4}


def decode(buf: bytes) -> Any:
    """Any ValueProto the readers serve, as to_dict's value; LayoutError for another field."""
    pos, end = 0, len(buf)
    value: Any = None
    while pos < end:  # proto3: the last field of the oneof wins
        tag, pos = _varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0 and field in _VARINT_FIELDS:
            raw, pos = _varint(buf, pos)
            value = _VARINT_FIELDS[field](raw)
        elif wire == 1 and field == 5:
            value = _D.unpack_from(buf, pos)[0]
            pos += 8
        elif wire == 5 and field == 6:
            value = _F.unpack_from(buf, pos)[0]
            pos += 4
        elif wire == 2 and (field in (1, 2) or field in _LIST_FIELDS):
            size, pos = _varint(buf, pos)
            chunk = buf[pos : pos + size]
            if len(chunk) != size:
                raise LayoutError("truncated ValueProto (a field runs past the end)")
            pos += size
            value = chunk if field == 1 else chunk.decode("utf-8") if field == 2 else _list(field, chunk)
        else:
            raise LayoutError(
                f"ValueProto field {field} (wire type {wire}) is not one the direct reader decodes"
            )
    return value


def _list(field: int, buf: bytes) -> list[Any]:
    """A ``*List`` message: repeated ``val`` = 1, packed or not."""
    wire, convert = _LIST_FIELDS[field]
    out: list[Any] = []
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag >> 3 != 1:
            raise LayoutError(f"ValueProto list field {field} holds field {tag >> 3}")
        got = tag & 7
        if got == 2 and wire != 2:  # packed numbers
            size, pos = _varint(buf, pos)
            stop = pos + size
            while pos < stop:
                raw, pos = _element(buf, pos, wire)
                out.append(convert(raw))
        elif got == wire:
            raw, pos = _element(buf, pos, wire)
            out.append(convert(raw))
        else:
            raise LayoutError(f"ValueProto list field {field} has wire type {got}")
    return out


def _element(buf: bytes, pos: int, wire: int) -> tuple[Any, int]:
    if wire == 0:
        return _varint(buf, pos)
    if wire == 2:
        size, pos = _varint(buf, pos)
        return buf[pos : pos + size], pos + size
    size = _FIXED_SIZE[wire]
    return buf[pos : pos + size], pos + size


# The fast paths: one expected tag, checked before anything is unpacked.


def _double(buf: bytes) -> Any:
    if len(buf) == 9 and buf[0] == 0x29:
        return _D.unpack_from(buf, 1)[0]
    return decode(buf)


def _float(buf: bytes) -> Any:
    if len(buf) == 5 and buf[0] == 0x35:
        return _F.unpack_from(buf, 1)[0]
    return decode(buf)


def _small_int(tag: int) -> Decoder:
    """An int32/int64 in [0, 2**21): the tag and a varint of one to three bytes (counts, days,
    ids); a negative or larger number (a ten- or four-plus-byte varint) takes the general path."""

    def small(buf: bytes) -> Any:
        n = len(buf)
        if n == 2 and buf[0] == tag and buf[1] < 0x80:
            return buf[1]
        if n == 3 and buf[0] == tag and buf[2] < 0x80:
            return (buf[1] & 0x7F) | (buf[2] << 7)
        if n == 4 and buf[0] == tag and buf[3] < 0x80:
            return (buf[1] & 0x7F) | ((buf[2] & 0x7F) << 7) | (buf[3] << 14)
        return decode(buf)

    return small


def _bool(buf: bytes) -> Any:
    if len(buf) == 2 and buf[0] == 0x38:
        return buf[1] == 1 if buf[1] < 2 else bool(buf[1])
    return decode(buf)


def _string(buf: bytes) -> Any:
    if len(buf) > 1 and buf[0] == 0x12 and buf[1] == len(buf) - 2 and buf[1] < 0x80:
        return buf[2:].decode("utf-8")
    return decode(buf)


_FAST: dict[str, Decoder] = {
    "DOUBLE": _double,
    "FLOAT": _float,
    "INT64": _small_int(0x20),
    "INT32": _small_int(0x18),
    "BOOL": _bool,
    "STRING": _string,
}


def decoder_for(value_type: str) -> Decoder:
    """The decoder for a feature of Feast value type ``value_type`` (a ValueType name)."""
    return _FAST.get(value_type, decode)


def timestamp_seconds(buf: bytes | None) -> int:
    """A ``google.protobuf.Timestamp`` (Redis' ``_ts:<view>`` field) as to_dict's event time:
    whole seconds, 0 when absent. Feast passes it through a float and ``datetime.fromtimestamp``
    (microsecond rounding) and back, which a whole second survives unchanged; a fraction takes
    the same path here, so a time a hair below the next second rounds up as Feast's does."""
    if not buf:
        return 0
    if len(buf) == 6 and buf[0] == 0x08 and buf[5] < 0x80:  # whole seconds of 2^28..2^35: today's
        return (
            (buf[1] & 0x7F)
            | (buf[2] & 0x7F) << 7
            | (buf[3] & 0x7F) << 14
            | (buf[4] & 0x7F) << 21
            | buf[5] << 28
        )
    seconds = nanos = 0
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        raw, pos = _varint(buf, pos) if tag & 7 == 0 else (0, end + 1)
        if tag == 0x08:
            seconds = _int64(raw)
        elif tag == 0x10:
            nanos = _int32(raw)
        else:
            raise LayoutError(f"event timestamp field {tag >> 3} (wire type {tag & 7}) is not a Timestamp's")
    if nanos == 0:
        return seconds
    return calendar.timegm(datetime.fromtimestamp(seconds + nanos / 1e9, tz=UTC).utctimetuple())
