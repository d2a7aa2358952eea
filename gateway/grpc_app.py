"""gRPC transport: the Gateway service of gateway/proto/gateway.proto over the same core."""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc

from gateway import metrics
from gateway.errors import GatewayError, InvalidInput
from gateway.proto import gateway_pb2, gateway_pb2_grpc
from gateway.service import Service

log = logging.getLogger("gateway")


def _row(row: gateway_pb2.Row) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.fields.items():
        kind = value.WhichOneof("kind")
        if kind is None:
            raise InvalidInput(f"field {key!r} has no value", field=key)
        out[key] = getattr(value, kind)
    return out


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, service: Service) -> None:
        self.service = service

    async def Predict(
        self, request: gateway_pb2.PredictRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PredictResponse:
        start = time.perf_counter()
        metrics.IN_FLIGHT.inc()
        status = "OK"
        try:
            md = {k.lower(): v for k, v in context.invocation_metadata() or ()}
            self.service.auth.check(md.get("x-api-key"), md.get("authorization"))
            result = await self.service.predictor.predict(request.model, [_row(r) for r in request.rows])
            return gateway_pb2.PredictResponse(
                model=result.model,
                model_version=result.version,
                feature_age_seconds=result.feature_age_s,
                predictions=[
                    gateway_pb2.Prediction(
                        score=p.score,
                        label=p.label,
                        probabilities=p.probabilities,
                        defaults_used=p.defaults_used,
                    )
                    for p in result.predictions
                ],
            )
        except GatewayError as exc:
            status = exc.grpc_code.name
            metrics.ERRORS.labels(exc.cause).inc()
            detail = f"{exc.field}: {exc.message}" if exc.field else exc.message
            await context.abort(exc.grpc_code, detail)
            raise  # unreachable: abort raises
        except Exception:
            status = "INTERNAL"
            log.exception("unexpected error serving %s", request.model)
            metrics.ERRORS.labels("internal").inc()
            await context.abort(grpc.StatusCode.INTERNAL, "internal error")
            raise
        finally:
            metrics.IN_FLIGHT.dec()
            # unknown model names would explode label cardinality: record them as one label
            known = status != "NOT_FOUND" or request.model in self.service.models
            label = request.model if known else "other"
            metrics.REQUEST_SECONDS.labels("grpc_predict", label, status).observe(time.perf_counter() - start)


def create_server(service: Service, address: str) -> grpc.aio.Server:
    limit = service.settings.max_body_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit)])
    gateway_pb2_grpc.add_GatewayServicer_to_server(GatewayServicer(service), server)
    server.add_insecure_port(address)
    return server
