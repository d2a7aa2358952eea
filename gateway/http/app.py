"""The gateway's HTTP app: the bare hot routes (``/v1/.../predict``, ``/v2/.../infer``) in front
of the FastAPI app that serves the rest: the probes, ``/metrics``, the ``/v1`` model routes and
the Open Inference Protocol's cold routes. Every route goes through the one auth check and the
one error answer of gateway/http/handling.py."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.http import handling, oip, v1
from gateway.http.asgi import ASGIApp
from gateway.service import Service


def create_app(service: Service) -> ASGIApp:
    """The HTTP app over an opened Service. The app does not close it: whoever opened it does,
    once both servers have stopped (gateway/lifecycle.py)."""
    app = FastAPI(title="triton-stack gateway", docs_url=None, redoc_url=None)
    keyed, metrics_key = handling.install(app, service)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await service.ready()
        return JSONResponse(checks, status_code=200 if checks["ready"] else 503)

    @app.get("/metrics", dependencies=[metrics_key])
    async def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    v1.add_routes(app, service, keyed)
    oip.add_routes(app, service, keyed)
    return v1.PredictRoute(oip.OipInferRoute(app, service), service)
