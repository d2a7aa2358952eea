"""The four column types the gateway serves, and how a value becomes one of them.

A model's columns are ``float32``, ``int64``, ``bool`` or ``string`` (``serving.columns``, see
docs/serving-contract.md). Values reach a column from two places, checked differently:

- **the request** (request fields, entity keys): strictly, because a wrong type is the caller's
  mistake and must be a 422 naming the field. ``float32`` takes an int or a float, finite and
  within float32's range; ``int64`` takes integers only, within int64's range (``1.0`` is not
  an integer); ``bool`` takes true/false only; ``string`` takes strings only, and only valid
  Unicode (no lone surrogate, which JSON can escape but UTF-8 cannot carry). A boolean is
  never a number: ``true`` for a numeric column is refused, though Python calls it an int.
- **the online store**: leniently within the schema's own promotions, because Feast's types are
  the feature view's, not a caller's: an ``Int64`` or ``Bool`` feature feeds a ``float32``
  column (the ``matrix`` layout carries every numeric column as float32). A string where a
  number is expected is a mismatch between the feature view and the model: a server error.

Missing online values: ``float32`` NaN (the model's imputer, if it has one, reads it);
``string`` the empty string (a OneHotEncoder with ``handle_unknown="ignore"`` reads it as an
unseen category: all zeros). ``int64`` and ``bool`` have no missing value: see ``DEFAULTS``.
"""

from __future__ import annotations

import math
from typing import Final, Literal, get_args

import numpy as np

Dtype = Literal["float32", "int64", "bool", "string"]
DTYPES: Final[tuple[str, ...]] = get_args(Dtype)

# A typed value as the transports parse it (JSON and protobuf both have exactly these).
Scalar = bool | int | float | str

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
_FLOAT32_MAX: Final = float(np.finfo(np.float32).max)

NUMPY: Final[dict[str, type]] = {"float32": np.float32, "int64": np.int64, "bool": np.bool_, "string": object}

# What stands in for a missing online value; int64 and bool have none (an entity without them
# cannot be scored, whatever GATEWAY_MISSING_ENTITIES says).
DEFAULTS: Final[dict[str, Scalar]] = {"float32": math.nan, "string": ""}


class Mismatch(ValueError):
    """A value is not of its column's type; the message completes "field X ..."."""


def _describe(dtype: str) -> str:
    return {
        "float32": "a finite number",
        "int64": "an integer",
        "bool": "true or false",
        "string": "a string",
    }[dtype]


def from_request(dtype: str, value: Scalar) -> Scalar:
    """``value`` as the column's Python type, or Mismatch saying what the caller should send."""
    if dtype == "float32":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Mismatch(f"must be {_describe(dtype)} (float32)")
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float at all
            raise Mismatch("is out of the float32 range") from None
        if not math.isfinite(number):
            raise Mismatch(f"must be {_describe(dtype)} (float32), not {value}")
        if abs(number) > _FLOAT32_MAX:
            raise Mismatch("is out of the float32 range")
        return number
    if dtype == "int64":
        if isinstance(value, bool) or not isinstance(value, int):
            raise Mismatch(f"must be {_describe(dtype)} (int64)")
        if not INT64_MIN <= value <= INT64_MAX:
            raise Mismatch("is out of the int64 range")
        return value
    if dtype == "bool":
        if not isinstance(value, bool):
            raise Mismatch(f"must be {_describe(dtype)}")
        return value
    if not isinstance(value, str):
        raise Mismatch(f"must be {_describe(dtype)}")
    if value.isascii():  # nearly every value: nothing to encode to know it is valid
        return value
    try:
        # JSON can escape a lone surrogate ("\ud800"), which Python decodes but no UTF-8 encoder
        # (Feast's key encoding, Triton's BYTES tensors) takes: refused here, as the caller's.
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Mismatch("must be valid Unicode text (it has a lone surrogate escape)") from None
    return value


def from_store(dtype: str, value: object) -> Scalar:
    """An online value as the column's type (see the module docstring); None is not handled here."""
    if dtype == "float32" and isinstance(value, int | float | np.number | np.bool_):
        return float(value)
    if dtype == "int64" and isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    if dtype == "bool" and isinstance(value, bool | np.bool_):
        return bool(value)
    if dtype == "string" and isinstance(value, str):
        return value
    raise Mismatch(f"is {type(value).__name__} in the online store, but the model takes {dtype}")
