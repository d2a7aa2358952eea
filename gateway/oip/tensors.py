"""OIP tensors on the wire: input values decoded to Python scalars, output values encoded.

Inputs arrive in two forms: JSON ``data`` (HTTP; flat or nested row-major lists) and raw
little-endian bytes (gRPC's ``raw_input_contents``, HTTP's binary-data extension; BYTES elements
each prefixed by a 4-byte little-endian length). Both are read into flat lists of Python values
(float, int, bool, str), the values the typed ``PredictRequest`` carries, so the core's
column check (gateway/values.py) judges them exactly as it judges JSON rows.

Every mismatch between a tensor's datatype, shape and contents is the caller's: a BadRequest
(400 / INVALID_ARGUMENT) naming the tensor, never a numpy error surfacing as a 500. BYTES must
be UTF-8 (Feast keys and Triton's BYTES are text here).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from gateway.errors import BadRequest
from gateway.values import Scalar

# Fixed-width datatypes read from raw bytes: OIP's are little-endian.
_RAW: Final[dict[str, str]] = {"FP32": "<f4", "FP64": "<f8", "INT32": "<i4", "INT64": "<i8"}
_INT_RANGE: Final[dict[str, tuple[int, int]]] = {
    "INT32": (-(2**31), 2**31 - 1),
    "INT64": (-(2**63), 2**63 - 1),
}
DATATYPES: Final = ("FP32", "FP64", "INT32", "INT64", "BOOL", "BYTES")


def elements(name: str, shape: Sequence[int]) -> int:
    """The element count of ``shape``; a negative or absurd dimension is refused."""
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in shape):
        raise BadRequest(f"input {name!r}: shape {list(shape)} must be whole numbers >= 0")
    return math.prod(shape)


def from_raw(name: str, datatype: str, count: int, raw: bytes) -> list[Scalar]:
    """``count`` values of ``datatype`` from raw bytes (exactly: no byte left over)."""
    if datatype == "BYTES":
        return _strings(name, count, raw)
    if datatype == "BOOL":
        if len(raw) != count:
            raise BadRequest(f"input {name!r}: {len(raw)} bytes of BOOL for {count} element(s)")
        flags = np.frombuffer(raw, dtype=np.uint8)
        if not np.isin(flags, (0, 1)).all():
            raise BadRequest(f"input {name!r}: a BOOL byte is neither 0 nor 1")
        return [bool(v) for v in flags.tolist()]
    dtype = np.dtype(_RAW[datatype])
    if len(raw) != count * dtype.itemsize:
        raise BadRequest(
            f"input {name!r}: {len(raw)} bytes of {datatype} for {count} element(s) of {dtype.itemsize}"
        )
    values: list[Scalar] = np.frombuffer(raw, dtype=dtype).tolist()
    return values


def _strings(name: str, count: int, raw: bytes) -> list[Scalar]:
    out: list[Scalar] = []
    at = 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise BadRequest(f"input {name!r}: BYTES data ends inside an element's length")
        (size,) = struct.unpack_from("<I", raw, at)
        at += 4
        if at + size > len(raw):
            raise BadRequest(f"input {name!r}: a BYTES element runs past the end of the data")
        out.append(text(name, raw[at : at + size]))
        at += size
    if len(out) != count:
        raise BadRequest(f"input {name!r}: {len(out)} BYTES element(s) for a shape of {count}")
    return out


def text(name: str, value: bytes) -> str:
    """A BYTES element as text: strict UTF-8, as the entity keys and string columns take."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"input {name!r}: a BYTES element is not UTF-8 text") from None


def _flatten(name: str, data: Any, depth: int) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    if depth > 2:  # the gateway's tensors are [N] or [N, 1]: nothing nests deeper
        raise BadRequest(f"input {name!r}: data nests deeper than the tensor's shape")
    out: list[Any] = []
    for item in data:
        out.extend(_flatten(name, item, depth + 1) if isinstance(item, list) else [item])
    return out


def from_json(name: str, datatype: str, count: int, data: Any) -> list[Scalar]:
    """``count`` values of ``datatype`` from JSON ``data`` (row-major, flat or nested)."""
    if not isinstance(data, list):
        raise BadRequest(f"input {name!r}: data must be a list")
    values = _flatten(name, data, 1)
    if len(values) != count:
        raise BadRequest(f"input {name!r}: {len(values)} value(s) for a shape of {count} element(s)")
    for value in values:
        if not _fits(datatype, value):
            shown = repr(value)[:40]
            raise BadRequest(f"input {name!r}: {shown} is not a {datatype} value")
    return values


def _fits(datatype: str, value: Any) -> bool:
    if datatype == "BOOL":
        return isinstance(value, bool)
    if datatype == "BYTES":
        return isinstance(value, str)
    if isinstance(value, bool):  # JSON true is never a number, though Python calls it an int
        return False
    if datatype in _INT_RANGE:
        low, high = _INT_RANGE[datatype]
        return isinstance(value, int) and low <= value <= high
    return isinstance(value, int | float)  # FP32/FP64; non-finite or out-of-range: the core's 422


def to_raw(datatype: str, values: Sequence[Any]) -> bytes:
    """Output values as OIP raw bytes (gRPC's ``raw_output_contents``)."""
    if datatype == "BYTES":
        parts = [str(v).encode("utf-8", "backslashreplace") for v in values]
        return b"".join(struct.pack("<I", len(p)) + p for p in parts)
    if datatype == "BOOL":
        return np.asarray(values, dtype=np.bool_).tobytes()
    return np.asarray(values, dtype=np.dtype(_RAW[datatype])).tobytes()
