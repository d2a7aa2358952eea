"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService`` on the gateway's
own gRPC server.

The messages are the ones tritonclient ships (``tritonclient.grpc.service_pb2``), so there is no
.proto of ours to keep in step with the protocol. Auth, decoding and error statuses are
gateway/grpc/handling.py's, as for ``gateway.v1.Gateway`` (gateway/grpc/v1.py); the model
methods take the key, the server's liveness, readiness and metadata stay open.

Implemented: ServerLive, ServerReady, ServerMetadata, ModelReady, ModelMetadata, ModelConfig
(what perf_analyzer sizes its requests from) and ModelInfer. The rest of the service
(streaming, repository control, shared memory, statistics, tracing, logging) is not
registered, so grpc answers UNIMPLEMENTED. Inputs come in ``raw_input_contents`` (tritonclient's
way) or typed ``contents``; outputs go out in ``raw_output_contents``, as Triton answers. The
gateway's request id and the features' age are response parameters (``prediction_id``,
``feature_age_seconds``), as over HTTP.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2

from gateway.catalog import ModelSpec
from gateway.errors import BadRequest, ModelNotFound
from gateway.grpc.handling import Context, Handlers, Rpc, method_handlers
from gateway.oip import mapping
from gateway.oip.tensors import DATATYPES, elements, from_raw, text, to_raw
from gateway.responses import PredictResult
from gateway.service import Service
from gateway.values import Scalar

SERVICE: Final = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
_CONTENTS: Final = {
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "BOOL": "bool_contents",
    "BYTES": "bytes_contents",
}


def _values(item: Any, count: int, raw: bytes | None) -> list[Scalar]:
    """One input's values, from its raw bytes or its typed contents (not both)."""
    if raw is not None:
        if item.HasField("contents"):
            raise BadRequest(f"input {item.name!r} has both contents and raw_input_contents")
        return from_raw(item.name, item.datatype, count, raw)
    found = list(getattr(item.contents, _CONTENTS[item.datatype]))
    if len(found) != count:
        raise BadRequest(f"input {item.name!r}: {len(found)} {item.datatype} value(s) for {count} element(s)")
    if item.datatype == "BYTES":
        return [text(item.name, v) for v in found]
    values: list[Scalar] = found
    return values


def tensors(spec: ModelSpec, request: Any) -> list[mapping.Tensor]:
    """A ModelInferRequest's inputs, checked against the model and decoded."""
    raws = list(request.raw_input_contents)
    if raws and len(raws) != len(request.inputs):
        raise BadRequest(f"{len(raws)} raw_input_contents for {len(request.inputs)} inputs")
    out = []
    for i, item in enumerate(request.inputs):
        if item.datatype not in DATATYPES:
            raise BadRequest(
                f"input {item.name!r}: datatype {item.datatype[:20]!r} is not one of {', '.join(DATATYPES)}"
            )
        if "shared_memory_region" in item.parameters:
            raise BadRequest(f"input {item.name!r}: shared memory is not supported by the gateway")
        shape = list(item.shape)
        mapping.rows_in(spec, item.name, item.datatype, shape)
        count = elements(item.name, shape)
        values = _values(item, count, raws[i] if raws else None)
        out.append(mapping.Tensor(item.name, item.datatype, values))
    return out


def infer_response(request: Any, outputs: tuple[mapping.TensorSpec, ...], result: PredictResult) -> Any:
    """The ModelInferResponse: outputs as raw bytes, the gateway's id and the features' age as
    parameters (row ``i``'s prediction id is ``{prediction_id}-{i}``)."""
    response = service_pb2.ModelInferResponse(
        model_name=result.model, model_version=result.version, id=request.id or result.id
    )
    response.parameters["prediction_id"].string_param = result.id
    response.parameters["feature_age_seconds"].double_param = result.feature_age_s
    for output in mapping.answer(result, outputs):
        response.outputs.add(name=output.name, datatype=output.datatype, shape=output.shape)
        response.raw_output_contents.append(to_raw(output.datatype, output.values))
    return response


def _explain_parameter(request: Any) -> Scalar | None:
    """The ``explain`` parameter of the ``explanations`` output asked, in whichever of
    InferParameter's kinds it came (the core refuses all but an integer), or None."""
    for output in request.outputs:
        if output.name == mapping.EXPLANATIONS and "explain" in output.parameters:
            param = output.parameters["explain"]
            kind = param.WhichOneof("parameter_choice")
            value: Scalar | None = getattr(param, kind) if kind else None
            return value
    return None


def _tensor_metadata(tensors: tuple[mapping.TensorSpec, ...]) -> list[Any]:
    TensorMetadata = service_pb2.ModelMetadataResponse.TensorMetadata  # a message class
    return [TensorMetadata(name=t.name, datatype=t.datatype, shape=t.shape) for t in tensors]


class OipServicer:
    """The protocol's RPCs over one Service; the errors they raise become statuses in
    gateway/grpc/handling.py."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def _spec(self, name: str, version: str) -> ModelSpec:
        spec = await self.service.predictor.spec(name)
        mapping.check_version(spec, version)
        return spec

    async def ServerLive(self, request: Any, context: Context) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Context) -> Any:
        return service_pb2.ServerReadyResponse(ready=(await self.service.ready())["ready"] is True)

    async def ServerMetadata(self, request: Any, context: Context) -> Any:
        return service_pb2.ServerMetadataResponse(**mapping.server_metadata())

    async def ModelReady(self, request: Any, context: Context) -> Any:
        try:
            await self._spec(request.name, request.version)
        except ModelNotFound:  # Triton's answer for a model it does not have: not ready
            return service_pb2.ModelReadyResponse(ready=False)
        return service_pb2.ModelReadyResponse(ready=True)

    async def ModelMetadata(self, request: Any, context: Context) -> Any:
        spec = await self._spec(request.name, request.version)
        return service_pb2.ModelMetadataResponse(
            name=spec.name,
            versions=[spec.version],
            platform=mapping.SERVER,
            inputs=_tensor_metadata(mapping.inputs(spec)),
            outputs=_tensor_metadata(mapping.outputs(spec)),
        )

    async def ModelConfig(self, request: Any, context: Context) -> Any:
        spec = await self._spec(request.name, request.version)
        config = mapping.model_config(spec, self.service.settings.limits.max_batch_rows)
        return service_pb2.ModelConfigResponse(
            config=json_format.ParseDict(config, model_config_pb2.ModelConfig())
        )

    async def ModelInfer(self, request: Any, context: Context) -> Any:
        spec = await self._spec(request.model_name, request.model_version)
        wanted = mapping.wanted(spec, [o.name for o in request.outputs])
        predict = mapping.to_request(spec, tensors(spec, request))
        explain = mapping.explain_asked(spec, wanted, _explain_parameter(request))
        if explain is not None:
            predict = dataclasses.replace(predict, explain=explain)
        return infer_response(request, wanted, await self.service.predictor.predict(predict))


_PUBLIC: Final = frozenset({"ServerLive", "ServerReady", "ServerMetadata"})  # open, as HTTP's probes


def handlers(service: Service) -> Handlers:
    """The implemented RPCs of ``inference.GRPCInferenceService``, for ``add_registered_method_handlers``."""
    servicer = OipServicer(service)
    methods = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name
    rpcs = {}
    for name in ("ServerLive", "ServerReady", "ServerMetadata", "ModelReady", "ModelMetadata", "ModelConfig"):
        method = methods[name]
        rpcs[name] = Rpc(
            getattr(servicer, name),
            getattr(service_pb2, method.input_type.name),
            getattr(service_pb2, method.output_type.name),
            public=name in _PUBLIC,
        )
    rpcs["ModelInfer"] = Rpc(
        servicer.ModelInfer,
        service_pb2.ModelInferRequest,
        service_pb2.ModelInferResponse,
        route="oip_grpc_infer",
        model_of=lambda request: str(request.model_name),
    )
    return method_handlers(service, SERVICE, rpcs)
