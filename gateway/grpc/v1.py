"""gRPC transport: the Gateway service of gateway/proto/gateway.proto over the same core.

The method is registered by hand with no request deserializer: the servicer gets the raw bytes
and parses them itself, so a message that does not decode is an INVALID_ARGUMENT from the error
tree. (The generated servicer deserializes inside grpc, where a failure is UNKNOWN to clients.)
"""

from __future__ import annotations

import logging

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from gateway import metrics
from gateway.errors import BadRequest, GatewayError, InvalidInput
from gateway.oip import grpc as oip_grpc
from gateway.proto import gateway_pb2, to_value
from gateway.request import PredictRequest, Row
from gateway.responses import Prediction, PredictResult
from gateway.service import Service
from gateway.values import Scalar

log = logging.getLogger("gateway")

SERVICE = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name  # gateway.v1.Gateway


def _row(i: int, row: gateway_pb2.Row) -> Row:
    """A protobuf Row as a typed Row: each Value's kind is its type (bool_value a bool, never an int)."""
    fields: dict[str, Scalar] = {}
    for key, value in row.fields.items():
        kind = value.WhichOneof("kind")
        if kind is None:
            raise InvalidInput(f"field {key!r} has no value", field=f"rows[{i}].{key}")
        fields[key] = getattr(value, kind)
    return Row(fields)


def decode(raw: bytes) -> gateway_pb2.PredictRequest:
    """The wire bytes as a PredictRequest; bytes that are not one (truncated, garbage, a string
    that is not UTF-8) are the caller's mistake."""
    try:
        return gateway_pb2.PredictRequest.FromString(raw)
    except DecodeError as exc:
        raise BadRequest(f"the request is not a gateway.v1.PredictRequest: {exc}") from None


def parse_request(request: gateway_pb2.PredictRequest) -> PredictRequest:
    return PredictRequest(request.model, tuple(_row(i, r) for i, r in enumerate(request.rows)))


def _output(array: np.ndarray) -> gateway_pb2.Output:
    shape = list(array.shape)
    if array.dtype == object:
        return gateway_pb2.Output(strings=[str(v) for v in array.ravel()], shape=shape)
    return gateway_pb2.Output(values=array.astype(np.float64).ravel().tolist(), shape=shape)


def _prediction(p: Prediction) -> gateway_pb2.Prediction:
    message = gateway_pb2.Prediction(probabilities=p.probabilities, defaults_used=p.defaults_used)
    if p.score is not None:
        message.score = p.score
    if p.label is not None:
        message.class_label.CopyFrom(to_value(p.label))
        if isinstance(p.label, int) and not isinstance(p.label, bool):
            message.label = p.label  # the field older clients read
    if p.value is not None:
        message.value = p.value
    if p.values is not None:
        message.values.extend(p.values)
    if p.scores is not None:
        message.scores.extend(p.scores)
    if p.outlier is not None:
        message.outlier = p.outlier
    if p.distances is not None:
        message.distances.extend(p.distances)
    for name, array in p.outputs.items():
        message.outputs[name].CopyFrom(_output(array))
    return message


def to_response(result: PredictResult) -> gateway_pb2.PredictResponse:
    predictions = [_prediction(p) for p in result.predictions]
    for message, prediction_id in zip(predictions, result.prediction_ids(), strict=False):
        message.id = prediction_id
    return gateway_pb2.PredictResponse(
        model=result.model,
        model_version=result.version,
        feature_age_seconds=result.feature_age_s,
        kind=result.kind,
        classes=[to_value(c) for c in result.classes or ()],
        predictions=predictions,
        id=result.id,
    )


class GatewayServicer:
    def __init__(self, service: Service) -> None:
        self.service = service

    async def Predict(self, raw: bytes, context: grpc.aio.ServicerContext) -> gateway_pb2.PredictResponse:
        with metrics.request("grpc_predict", self.service.models) as call:
            call.status = "OK"  # the model is labelled once the bytes decode
            try:
                md = {k.lower(): v for k, v in context.invocation_metadata() or ()}
                self.service.auth.check(md.get("x-api-key"), md.get("authorization"))
                request = decode(raw)
                call.model = request.model
                result = await self.service.predictor.predict(parse_request(request))
                return to_response(result)
            except GatewayError as exc:
                call.status = exc.grpc_code.name
                metrics.count_error(exc.cause)
                detail = f"{exc.field}: {exc.message}" if exc.field else exc.message
                await context.abort(exc.grpc_code, detail)
                raise  # unreachable: abort raises
            except Exception:
                call.status = "INTERNAL"
                log.exception("unexpected error serving %s", call.model)
                metrics.count_error("internal")
                await context.abort(grpc.StatusCode.INTERNAL, "internal error")
                raise


def server_options(max_message_bytes: int, idle_timeout_s: float) -> list[tuple[str, int]]:
    """Limits for the gRPC server: message size, and idle connections closed (docs/gateway-limits.md).

    ``max_connection_idle_ms`` sends GOAWAY to a connection with no call for that long; the
    handshake timeout closes one that never completes HTTP/2's preface (gRPC's default: 120 s).
    Keepalive pings from the server find peers that vanished without a FIN."""
    idle_ms = max(1, int(idle_timeout_s * 1000))
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_connection_idle_ms", idle_ms),
        ("grpc.server_handshake_timeout_ms", idle_ms),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]


def create_server(service: Service, address: str, reuse_port: bool = False) -> grpc.aio.Server:
    settings = service.settings
    options = server_options(settings.max_body_bytes, settings.idle_timeout_s)
    if reuse_port:  # workers share the port (gateway serve --workers)
        options.append(("grpc.so_reuseport", 1))
    server = grpc.aio.server(options=options)
    predict = grpc.unary_unary_rpc_method_handler(
        GatewayServicer(service).Predict,
        request_deserializer=None,  # raw bytes: decoded (and refused) by the servicer
        response_serializer=gateway_pb2.PredictResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Predict": predict}),))
    server.add_generic_rpc_handlers((oip_grpc.handler(service),))  # KServe v2 / OIP (gateway/oip/)
    server.add_insecure_port(address)
    return server
