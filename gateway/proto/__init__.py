"""The gateway's gRPC API (``gateway.proto``; ``gateway_pb2*`` are generated from it), and the one
helper every client of it needs: a typed scalar as a ``Value``."""

from __future__ import annotations

from gateway.proto import gateway_pb2


def to_value(value: bool | int | float | str) -> gateway_pb2.Value:
    """``Value`` of the scalar's own kind (bool before int: Python's True is an int too)."""
    if isinstance(value, bool):
        return gateway_pb2.Value(bool_value=value)
    if isinstance(value, int):
        return gateway_pb2.Value(int_value=value)
    if isinstance(value, float):
        return gateway_pb2.Value(double_value=value)
    return gateway_pb2.Value(string_value=value)
