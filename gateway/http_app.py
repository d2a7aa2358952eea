"""HTTP transport: FastAPI routes that only translate to and from the core."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway import metrics
from gateway.errors import BadRequest, GatewayError, InvalidInput, TooLarge
from gateway.service import Service

log = logging.getLogger("gateway")


def error_response(exc: GatewayError) -> JSONResponse:
    metrics.ERRORS.labels(exc.cause).inc()
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)


async def read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"body of {declared} bytes exceeds the limit of {limit}")
    body = bytearray()
    async for chunk in request.stream():  # also bounds chunked bodies with no Content-Length
        body += chunk
        if len(body) > limit:
            raise TooLarge(f"body exceeds the limit of {limit} bytes")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from exc


def rows_of(body: Any) -> list[Any]:
    """``{"rows": [...]}`` for a batch, or one row object on its own."""
    if not isinstance(body, dict):
        raise BadRequest('body must be a JSON object: one row, or {"rows": [...]}')
    if "rows" in body:
        if not isinstance(body["rows"], list):
            raise InvalidInput("rows must be a list of row objects", field="rows")
        if len(body) > 1:
            extra = sorted(set(body) - {"rows"})[0]
            raise InvalidInput(f"unknown top-level field {extra!r}", field=extra)
        return body["rows"]
    return [body]


def create_app(service: Service) -> FastAPI:
    """The HTTP app over an opened Service (closed when the app shuts down)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await service.close()

    app = FastAPI(title="triton-stack gateway", lifespan=lifespan, docs_url=None, redoc_url=None)
    settings = service.settings

    @app.post("/v1/models/{model}/predict")
    async def predict(model: str, request: Request) -> Response:
        start = time.perf_counter()
        metrics.IN_FLIGHT.inc()
        status = 200
        try:
            service.auth.check(request.headers.get("x-api-key"), request.headers.get("authorization"))
            rows = rows_of(await read_json(request, settings.max_body_bytes))
            result = await service.predictor.predict(model, rows)
            return JSONResponse(result.to_dict())
        except GatewayError as exc:
            status = exc.http_status
            return error_response(exc)
        except Exception:
            status = 500
            log.exception("unexpected error serving %s", model)
            return error_response(GatewayError("internal error"))
        finally:
            metrics.IN_FLIGHT.dec()
            # unknown model names would explode label cardinality: record them as one label
            label = model if status != 404 or model in service.models else "other"
            metrics.REQUEST_SECONDS.labels("predict", label, str(status)).observe(time.perf_counter() - start)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await service.ready()
        return JSONResponse(checks, status_code=200 if checks["ready"] else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
