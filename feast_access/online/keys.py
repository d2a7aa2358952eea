"""Feast's entity-key serialization (feast/infra/key_encoding_utils.py, ``serialize_entity_key``),
without Feast: the bytes both online stores key a row by.

Layout (little-endian u32 ``<I``, ValueType numbers STRING=2, INT32=3, INT64=4), join keys sorted
by name (a single key is not sorted, which is the same):

- version 3: ``<I count``, then per key ``<I 2`` ``<I len`` utf-8 name, then per value
  ``<I type`` ``<I len`` bytes;
- version 2: per key ``<I 2`` utf-8 name (no count, no length), then the values as in 3.

A value is ``<i`` (INT32), ``<q`` (INT64) or its utf-8 bytes (STRING). The prefix (everything
before the values) depends only on the join keys, so it is built once per view.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from feast_access.online.errors import LayoutError
from feast_access.online.spec import KeySpec

_U32 = struct.Struct("<I")
_STRING, _INT32, _INT64 = 2, 3, 4
_TYPE_CODE = {"STRING": _STRING, "INT32": _INT32, "INT64": _INT64}
_INT64_HEAD = _U32.pack(_INT64) + _U32.pack(8)
_INT32_HEAD = _U32.pack(_INT32) + _U32.pack(4)
_STRING_HEAD = _U32.pack(_STRING)
_Q = struct.Struct("<q")
_I = struct.Struct("<i")

KeyEncoder = Callable[[Mapping[str, Any]], bytes]


def key_prefix(join_keys: Sequence[str], version: int) -> bytes:
    """The bytes before the values: the sorted join-key names, in ``version``'s layout."""
    if version not in (2, 3):
        raise LayoutError(f"entity key serialization version {version} is not 2 or 3")
    out = [_U32.pack(len(join_keys))] if version == 3 else []
    for name in sorted(join_keys):
        raw = name.encode("utf-8")
        out.append(_STRING_HEAD)
        if version == 3:
            out.append(_U32.pack(len(raw)))
        out.append(raw)
    return b"".join(out)


def encode_value(value_type: str, value: Any) -> bytes:
    """One join-key value with its type and length header. A value the type cannot hold is a
    ValueError (an int out of range, a string that is not UTF-8) or a TypeError (the wrong kind),
    as Feast's protobuf encoding of the key raises them."""
    if value_type == "INT64":
        return _INT64_HEAD + _pack_int(_Q, value, "int64")
    if value_type == "STRING":
        if not isinstance(value, str):
            raise TypeError(f"a STRING join key takes a str, not {type(value).__name__}")
        raw = value.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, a ValueError
        return _STRING_HEAD + _U32.pack(len(raw)) + raw
    if value_type == "INT32":
        return _INT32_HEAD + _pack_int(_I, value, "int32")
    raise LayoutError(f"join key type {value_type} is not serializable here")


def _pack_int(fmt: struct.Struct, value: Any, name: str) -> bytes:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"an {name.upper()} join key takes an int, not {type(value).__name__}")
    try:
        return fmt.pack(value)
    except struct.error as exc:
        raise ValueError(f"join key value {value} is out of {name} range") from exc


def key_encoder(keys: Sequence[KeySpec], version: int) -> KeyEncoder:
    """A function from a request's entity row to the view's serialized entity key."""
    prefix = key_prefix([k.join_key for k in keys], version)
    # values in the serialized order: sorted by the store's join-key name
    ordered = tuple((k.request_name, k.value_type) for k in sorted(keys, key=lambda k: k.join_key))
    if len(ordered) == 1:
        ((request_name, value_type),) = ordered
        if value_type == "INT64":  # the common case, kept to one pack and one concatenation

            def encode_int64(row: Mapping[str, Any]) -> bytes:
                return prefix + _INT64_HEAD + _pack_int(_Q, _get(row, request_name), "int64")

            return encode_int64

        def encode_one(row: Mapping[str, Any]) -> bytes:
            return prefix + encode_value(value_type, _get(row, request_name))

        return encode_one

    def encode_many(row: Mapping[str, Any]) -> bytes:
        return prefix + b"".join(encode_value(t, _get(row, name)) for name, t in ordered)

    return encode_many


def _get(row: Mapping[str, Any], name: str) -> Any:
    try:
        return row[name]
    except KeyError:
        raise ValueError(f"entity row has no join key {name!r}") from None
