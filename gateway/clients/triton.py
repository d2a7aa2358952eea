"""What the gateway asks Triton, and ``connect``, which picks the client by the URL's scheme.

``http://host:8000`` (the default) is gateway/clients/triton_http.py, the cheaper one per call
(its docstring says why); ``grpc://host:8001``, or ``host:port`` with no scheme, is
gateway/clients/triton_grpc.py. Both put a deadline on every call and translate every failure
into the gateway's error tree by its status (HTTP code or gRPC status), never by message text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from gateway.clients.triton_grpc import TritonClient
from gateway.clients.triton_http import TritonHTTPClient


class Triton(Protocol):
    """What the gateway asks Triton, whichever protocol carries it."""

    url: str

    async def close(self) -> None: ...
    async def model_config(self, model: str) -> dict: ...
    async def model_ready_version(self, model: str) -> str | None: ...
    async def ready_versions(self, model: str) -> list[str]: ...
    async def is_live(self) -> bool: ...
    async def infer(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict[str, np.ndarray], str]: ...


def connect(url: str, timeout_s: float, reconnect_max_s: float = 0.5) -> Triton:
    """The client for ``url``: HTTP for ``http://``, gRPC for ``grpc://`` or no scheme."""
    scheme, sep, address = url.partition("://")
    if not sep:
        return TritonClient(url, timeout_s, reconnect_max_s)
    if scheme == "http":
        return TritonHTTPClient(url, timeout_s)
    if scheme == "grpc":
        return TritonClient(address, timeout_s, reconnect_max_s)
    raise ValueError(f"Triton URL {url!r}: the scheme must be http:// or grpc://")
