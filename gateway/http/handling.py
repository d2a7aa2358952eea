"""Every HTTP route's auth check and error answer, in one place.

One auth check (``authorize``: ``ApiKeys.check`` of gateway/auth.py on the ``X-API-Key`` or
``Authorization: Bearer`` header) serves the bare ASGI routes (gateway/http/asgi.py) and, as the
FastAPI dependency ``keyed``, every framework route that needs a key: the ``/v1`` model routes,
the Open Inference Protocol's model routes, and ``/metrics`` when ``metrics_require_key``. The
probes (``/healthz``, ``/readyz``, ``/v2/health/*``, ``/v2``) stay open.

One mapping from the error tree (gateway/errors.py) to a response (``error_body``): the status
and ``Retry-After`` from the error, the body in the protocol's shape (``/v1``: ``{"error",
"cause", "field"}``; the Open Inference Protocol's ``/v2``: ``{"error": "field: message"}``),
the error counted by cause. The bare routes call it; ``install`` registers it as the app's
handler of ``GatewayError``, so a framework route only raises.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response

from gateway import metrics
from gateway.errors import GatewayError, MethodNotAllowed
from gateway.http.bodies import to_json
from gateway.service import Service

Headers = list[tuple[bytes, bytes]]


def authorize(service: Service, api_key: str | None, authorization: str | None) -> None:
    """Raise Unauthenticated (401) or Forbidden (403) unless a header carries a known key."""
    service.auth.check(api_key, authorization)


def is_oip(path: str) -> bool:
    """Whether ``path`` is the Open Inference Protocol's (``/v2``...), whose errors have its shape."""
    return path == "/v2" or path.startswith("/v2/")


def error_body(exc: GatewayError, oip: bool = False) -> tuple[int, bytes, Headers]:
    """``exc`` as an HTTP answer: status, JSON body in the protocol's shape, extra headers."""
    metrics.count_error(exc.cause)
    headers = [(b"retry-after", str(exc.retry_after).encode())] if exc.retry_after else []
    if isinstance(exc, MethodNotAllowed):
        headers.append((b"allow", b"POST"))
    return exc.http_status, to_json({"error": exc.detail} if oip else exc.to_dict()), headers


async def _handle(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)  # registered for GatewayError only
    status, body, headers = error_body(exc, is_oip(request.url.path))
    named = {k.decode(): v.decode() for k, v in headers}
    return Response(body, status, named, media_type="application/json")


def install(app: FastAPI, service: Service) -> tuple[Any, Any]:
    """Register the error handler on ``app``; return its two auth dependencies: ``keyed`` (a
    key always) and ``metrics_key`` (a key when ``metrics_require_key``, else open)."""
    app.add_exception_handler(GatewayError, _handle)

    async def check(request: Request) -> None:
        authorize(service, request.headers.get("x-api-key"), request.headers.get("authorization"))

    async def check_metrics(request: Request) -> None:
        # open by default even with keys on, for in-cluster Prometheus scrapes (docs/gateway-limits.md)
        if service.settings.auth.metrics_require_key:
            await check(request)

    return Depends(check), Depends(check_metrics)
