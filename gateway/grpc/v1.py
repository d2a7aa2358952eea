"""The gateway's own gRPC API: ``gateway.v1.Gateway`` (gateway/proto/gateway.proto) over the core.

Only translation: a ``PredictRequest`` message becomes the typed ``PredictRequest`` every
transport parses into (gateway/request.py), each ``Value``'s kind its type, and a
``PredictResult`` goes back as a ``PredictResponse``. Auth, decoding and error statuses are
gateway/grpc/handling.py's, as for the Open Inference Protocol's service.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import unknown_fields

from gateway.errors import InvalidInput
from gateway.grpc.handling import Context, Handlers, Rpc, method_handlers
from gateway.proto import gateway_pb2, to_value
from gateway.request import PredictRequest, Row
from gateway.responses import Explanation, Prediction, PredictResult
from gateway.service import Service
from gateway.values import Scalar

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


_EXPLAIN = gateway_pb2.PredictRequest.DESCRIPTOR.fields_by_name["explain"].number


def parse_request(request: gateway_pb2.PredictRequest) -> PredictRequest:
    explain = request.explain if request.HasField("explain") else None
    # A value of another wire type on ``explain``'s number (a double, a string) is not an
    # int64: protobuf keeps it aside as an unknown field, which would silently ask nothing.
    if explain is None and any(f.field_number == _EXPLAIN for f in unknown_fields.UnknownFieldSet(request)):
        raise InvalidInput("explain must be a whole number of reason codes (an int64)", field="explain")
    rows = tuple(_row(i, r) for i, r in enumerate(request.rows))
    return PredictRequest(request.model, rows, explain)


def _explanation(e: Explanation) -> gateway_pb2.Explanation:
    message = gateway_pb2.Explanation(
        explains=to_value(e.explains), units=e.units, base_value=e.base_value, raw_score=e.raw_score
    )
    for r in e.reasons:
        reason = message.reasons.add(column=r.column, contribution=r.contribution)
        if r.value is not None:
            reason.value.CopyFrom(to_value(r.value))
    return message


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
    if p.explanation is not None:
        message.explanation.CopyFrom(_explanation(p.explanation))
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

    async def Predict(
        self, request: gateway_pb2.PredictRequest, context: Context
    ) -> gateway_pb2.PredictResponse:
        return to_response(await self.service.predictor.predict(parse_request(request)))


def handlers(service: Service) -> Handlers:
    """``gateway.v1.Gateway``'s one method, for ``add_registered_method_handlers``."""
    predict = Rpc(
        GatewayServicer(service).Predict,
        gateway_pb2.PredictRequest,
        gateway_pb2.PredictResponse,
        route="grpc_predict",
        model_of=lambda request: str(request.model),
    )
    return method_handlers(service, SERVICE, {"Predict": predict})
