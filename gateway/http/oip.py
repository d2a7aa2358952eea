"""The Open Inference Protocol over HTTP: the infer route, and the metadata and health routes.

``POST /v2/models/{m}[/versions/{v}]/infer`` is on the hot path: a bare ASGI route
(``OipInferRoute``, gateway/http/asgi.py) like the ``/v1`` predict route, with the same auth,
body limit and core; here it only translates (``parse_infer``, ``infer_body``), through the
protocol's transport-free mapping (gateway/oip/). The other routes are few and cold: FastAPI
routes (``add_routes``). Errors take the protocol's shape, ``{"error": "..."}``
(gateway/http/handling.py).

Inputs come as JSON ``data`` or in Triton's binary-data extension (tritonclient's default):
the body is the JSON header (``Inference-Header-Content-Length`` bytes), then each input's raw
bytes in order, sized by its ``binary_data_size`` parameter. Outputs are always JSON ``data``
(a client asking for binary outputs gets JSON, which tritonclient reads the same). Shared
memory and the classification extension are refused (400).

A version in the path must be the one the gateway serves (``spec.version``), else a 404.
Model routes take the ``/v1`` routes' auth; the server's health and metadata stay open, as
``/healthz`` and ``/readyz`` do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from gateway.catalog import ModelSpec
from gateway.errors import BadRequest
from gateway.http.asgi import BareRoute, Target
from gateway.http.bodies import parse_json, to_json
from gateway.oip import mapping
from gateway.oip.tensors import DATATYPES, elements, from_json, from_raw
from gateway.request import PredictRequest
from gateway.responses import PredictResult
from gateway.service import Service

_PREFIX: Final = "/v2/models/"
_INFER: Final = "/infer"
_REQUEST_KEYS: Final = frozenset({"id", "parameters", "inputs", "outputs"})

__all__ = [
    "InferCall",
    "OipInferRoute",
    "add_routes",
    "infer_body",
    "infer_target",
    "parse_infer",
    "split_body",
]


def infer_target(path: str) -> tuple[str, str] | None:
    """``(model, version)`` of ``/v2/models/{m}[/versions/{v}]/infer`` (version "" when none)."""
    if not (path.startswith(_PREFIX) and path.endswith(_INFER)):
        return None
    parts = path[len(_PREFIX) : -len(_INFER)].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], ""
    if len(parts) == 3 and parts[0] and parts[1] == "versions" and parts[2]:
        return parts[0], parts[2]
    return None


def split_body(body: bytes, header_length: bytes | None) -> tuple[bytes, bytes]:
    """The JSON header and the binary tail of a binary-data request (all JSON without the header)."""
    if header_length is None:
        return body, b""
    if not header_length.isdigit() or int(header_length) > len(body):
        raise BadRequest(
            f"Inference-Header-Content-Length {header_length[:20]!r} is not a length within the body"
        )
    size = int(header_length)
    return body[:size], body[size:]


@dataclass(frozen=True, slots=True)
class InferCall:
    """One parsed infer request: the typed request, the outputs to answer, the caller's id."""

    request: PredictRequest
    outputs: tuple[mapping.TensorSpec, ...]
    id: str


def _head(item: Any) -> tuple[str, str, list[int]]:
    if not isinstance(item, dict):
        raise BadRequest("each input must be an object with name, datatype, shape and data")
    name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
    if not isinstance(name, str) or not name:
        raise BadRequest("an input has no name")
    if datatype not in DATATYPES:
        raise BadRequest(
            f"input {name!r}: datatype {str(datatype)[:20]!r} is not one of {', '.join(DATATYPES)}"
        )
    if not isinstance(shape, list):
        raise BadRequest(f"input {name!r}: shape must be a list")
    elements(name, shape)  # whole numbers >= 0, before anything is read against it
    return name, datatype, shape


def _binary_size(name: str, item: dict[str, Any]) -> int | None:
    params = item.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest(f"input {name!r}: parameters must be an object")
    if "shared_memory_region" in params:
        raise BadRequest(f"input {name!r}: shared memory is not supported by the gateway")
    size = params.get("binary_data_size")
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BadRequest(f"input {name!r}: binary_data_size must be a whole number >= 0")
    if "data" in item:
        raise BadRequest(f"input {name!r} has both data and binary_data_size")
    return size


def _tensors(spec: ModelSpec, items: list[Any], binary: bytes) -> list[mapping.Tensor]:
    at = 0
    tensors = []
    for item in items:
        name, datatype, shape = _head(item)
        mapping.rows_in(spec, name, datatype, shape)
        count = elements(name, shape)
        size = _binary_size(name, item)
        if size is not None:
            if at + size > len(binary):
                raise BadRequest(f"input {name!r}: binary_data_size {size} runs past the body")
            values = from_raw(name, datatype, count, binary[at : at + size])
            at += size
        elif "data" in item:
            values = from_json(name, datatype, count, item["data"])
        else:
            raise BadRequest(f"input {name!r} has no data (nor binary_data_size)")
        tensors.append(mapping.Tensor(name, datatype, values))
    if at != len(binary):
        raise BadRequest(f"{len(binary) - at} bytes of binary data follow the last input")
    return tensors


def _output_names(raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in raw
    ):
        raise BadRequest("outputs must be a list of objects with a name")
    for item in raw:
        params = item.get("parameters") or {}
        if isinstance(params, dict) and ("classification" in params or "shared_memory_region" in params):
            raise BadRequest(f"output {item['name']!r}: classification and shared memory are not supported")
    return [o["name"] for o in raw]


def _explain_parameter(raw: Any) -> Any:
    """The ``explain`` parameter of the ``explanations`` output a request names, or None."""
    for item in raw or ():
        params = item.get("parameters") or {}
        if item["name"] == mapping.EXPLANATIONS and isinstance(params, dict):
            value = params.get("explain")
            if value is not None and not isinstance(value, bool | int | float | str):
                raise BadRequest("output 'explanations': parameter explain must be a whole number")
            return value
    return None


def parse_infer(spec: ModelSpec, doc: Any, binary: bytes) -> InferCall:
    """An infer body (the JSON header, parsed, and the binary tail) as one InferCall."""
    if not isinstance(doc, dict):
        raise BadRequest('body must be a JSON object: {"inputs": [...]}')
    extra = sorted(set(doc) - _REQUEST_KEYS)
    if extra:
        raise BadRequest(f"unknown field {extra[0]!r} in the infer request")
    items = doc.get("inputs")
    if not isinstance(items, list):
        raise BadRequest("inputs must be a list of tensors")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise BadRequest("id must be a string")
    request = mapping.to_request(spec, _tensors(spec, items, binary))
    outputs = mapping.wanted(spec, _output_names(doc.get("outputs")))
    explain = mapping.explain_asked(spec, outputs, _explain_parameter(doc.get("outputs")))
    return InferCall(dataclasses.replace(request, explain=explain), outputs, request_id)


def infer_body(call: InferCall, result: PredictResult) -> dict[str, Any]:
    """The response: outputs as JSON data; the gateway's request id and the features' age as
    parameters (row ``i``'s prediction id, for feedback, is ``{prediction_id}-{i}``)."""
    return {
        "model_name": result.model,
        "model_version": result.version,
        "id": call.id or result.id,
        "parameters": {"prediction_id": result.id, "feature_age_seconds": result.feature_age_s},
        "outputs": [
            {"name": o.name, "datatype": o.datatype, "shape": list(o.shape), "data": o.values}
            for o in mapping.answer(result, call.outputs)
        ],
    }


class OipInferRoute(BareRoute):
    """``POST /v2/models/{model}[/versions/{v}]/infer``: JSON ``data`` or binary tensors."""

    route = "oip_infer"
    oip = True
    post = "an inference request"

    def target(self, path: str) -> Target | None:
        return infer_target(path)

    async def answer(self, target: Target, headers: dict[bytes, bytes], body: bytes) -> bytes:
        model, version = target
        spec = await self.service.predictor.spec(model)
        mapping.check_version(spec, version)
        head, binary = split_body(body, headers.get(b"inference-header-content-length"))
        parsed = parse_infer(spec, parse_json(head), binary)
        return to_json(infer_body(parsed, await self.service.predictor.predict(parsed.request)))


def add_routes(app: FastAPI, service: Service, keyed: Any) -> None:
    """The protocol's health, server and model routes (everything but infer) on ``app``; the
    model routes behind the ``keyed`` auth dependency, health and server metadata open."""

    async def model_spec(model: str, version: str) -> ModelSpec:
        spec = await service.predictor.spec(model)
        mapping.check_version(spec, version)
        return spec

    @app.get("/v2/health/live")
    async def live() -> JSONResponse:
        return JSONResponse({"live": True})

    @app.get("/v2/health/ready")
    async def ready() -> JSONResponse:
        ok = (await service.ready())["ready"] is True
        return JSONResponse({"ready": ok}, 200 if ok else 503)

    @app.get("/v2")
    async def server() -> JSONResponse:
        return JSONResponse(mapping.server_metadata())

    @app.get("/v2/models/{model}", dependencies=[keyed])
    @app.get("/v2/models/{model}/versions/{version}", dependencies=[keyed])
    async def metadata(model: str, version: str = "") -> JSONResponse:
        return JSONResponse(mapping.model_metadata(await model_spec(model, version)))

    @app.get("/v2/models/{model}/ready", dependencies=[keyed])
    @app.get("/v2/models/{model}/versions/{version}/ready", dependencies=[keyed])
    async def model_ready(model: str, version: str = "") -> JSONResponse:
        spec = await model_spec(model, version)
        return JSONResponse({"name": spec.name, "ready": True})

    @app.get("/v2/models/{model}/config", dependencies=[keyed])
    @app.get("/v2/models/{model}/versions/{version}/config", dependencies=[keyed])
    async def config(model: str, version: str = "") -> JSONResponse:
        spec = await model_spec(model, version)
        return JSONResponse(mapping.model_config(spec, service.settings.limits.max_batch_rows))
