"""The gateway's Triton client over gRPC (``grpc://host:8001``, or ``host:port`` with no scheme;
gateway/clients/triton.py picks it by the URL). Every call has a deadline, and every failure is
translated into the gateway's error tree by its gRPC status, never by message text.

Inference skips tritonclient's per-call objects: ``infer_request`` writes the arrays straight
into the ``ModelInferRequest`` protobuf (tensor metadata plus raw contents, the bytes tritonclient's
``InferInput.set_data_from_numpy`` would hold) and sends it on the generated stub, where
``InferenceServerClient.infer`` builds an InferInput and an InferRequestedOutput per tensor per
call and copies each into the request (~60 µs of GIL per call with nine inputs; py-spy, ``make
bench``). Answers are still read by tritonclient's ``InferResult``, and the model queries
(config, readiness) still go through its client.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.grpc._client import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions
from tritonclient.utils import InferenceServerException

from gateway.clients.triton_http import bytes_tensor, triton_datatype
from gateway.errors import DeadlineExceeded, GatewayError, ModelNotFound, Unavailable


def infer_inputs(inputs: Mapping[str, np.ndarray]) -> list[grpcclient.InferInput]:
    """Triton inputs for named arrays, each typed by its numpy dtype."""
    request = []
    for name, array in inputs.items():
        datatype = triton_datatype(name, array)
        inp = grpcclient.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array)
        request.append(inp)
    return request


def infer_request(
    model: str, inputs: Mapping[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
) -> service_pb2.ModelInferRequest:
    """The ModelInferRequest tritonclient would send for these arrays: per input its name, Triton
    datatype (by numpy dtype) and shape, its data in ``raw_input_contents`` (numbers as C-order
    bytes, strings in Triton's length-prefixed BYTES layout); the named outputs asked for."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, array in inputs.items():
        datatype = triton_datatype(name, array)
        request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        raw = bytes_tensor(array) if datatype == "BYTES" else array.tobytes()  # C order, any strides
        request.raw_input_contents.append(raw)
    for output in outputs:
        request.outputs.add(name=output)
    return request


def translate(exc: InferenceServerException, what: str) -> GatewayError:
    """Map a tritonclient error by its status (never by message text)."""
    status = (exc.status() or "").upper()
    if "DEADLINE_EXCEEDED" in status:
        return DeadlineExceeded(f"Triton did not answer {what} in time", cause="triton_timeout")
    if "NOT_FOUND" in status:
        return ModelNotFound(f"Triton has no ready model for {what}")
    if "UNAVAILABLE" in status or "UNKNOWN" in status or not status:
        return Unavailable(f"Triton is unreachable ({what})", cause="triton_unavailable")
    return GatewayError(f"Triton failed {what}: {exc.message()}")


def channel_args(reconnect_max_s: float) -> list[tuple[str, int]]:
    """tritonclient's own channel options, plus a short reconnect back-off.

    gRPC backs off between reconnects up to 120 s by default, and every call in the meantime
    fails at once with UNAVAILABLE: after an outage of a few seconds the gateway kept answering
    503 for seconds more, though Triton was ready. Capped at ``reconnect_max_s``, the channel
    tries again that often (loopback or in-cluster, a refused connect costs nothing), and the
    first request after Triton is back finds it connected. The connect deadline
    (``min_reconnect_backoff_ms``) stays at 1 s, so a slow network still gets to finish a connect.
    """
    keepalive = KeepAliveOptions()
    reconnect_max_ms = max(1, int(reconnect_max_s * 1000))
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(keepalive.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.initial_reconnect_backoff_ms", min(100, reconnect_max_ms)),
        ("grpc.min_reconnect_backoff_ms", 1000),
        ("grpc.max_reconnect_backoff_ms", reconnect_max_ms),
    ]


class TritonClient:
    def __init__(self, url: str, timeout_s: float, reconnect_max_s: float = 0.5) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client = grpcclient.InferenceServerClient(url, channel_args=channel_args(reconnect_max_s))
        # inference on a channel of its own, same options: the generated stub, no per-call objects
        self._channel = grpc.aio.insecure_channel(url, options=channel_args(reconnect_max_s))
        self._infer = service_pb2_grpc.GRPCInferenceServiceStub(self._channel).ModelInfer

    async def close(self) -> None:
        await self._client.close()
        await self._channel.close()

    async def model_config(self, model: str) -> dict:
        try:
            reply = await self._client.get_model_config(model, as_json=True, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise translate(exc, f"the config of {model!r}") from exc
        return reply["config"]

    async def model_ready_version(self, model: str) -> str | None:
        """The newest ready version of ``model``, or None when it is not ready."""
        versions = await self.ready_versions(model)
        return versions[-1] if versions else None

    async def ready_versions(self, model: str) -> list[str]:
        """The versions of ``model`` Triton serves, oldest first; empty when it is not ready."""
        try:
            if not await self._client.is_model_ready(model, client_timeout=self.timeout_s):
                return []
            meta = await self._client.get_model_metadata(model, as_json=True, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            if "NOT_FOUND" in (exc.status() or "").upper():
                return []
            raise translate(exc, f"the state of {model!r}") from exc
        return sorted((str(v) for v in meta.get("versions") or ["1"]), key=int)

    async def is_live(self) -> bool:
        try:
            return bool(await self._client.is_server_live(client_timeout=self.timeout_s))
        except InferenceServerException:
            return False

    async def infer(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict[str, np.ndarray], str]:
        """One inference call: named input arrays in (their dtype gives the Triton type), the
        named outputs back (BYTES outputs as object arrays of bytes), and the version Triton ran
        (``version`` pins one; "" is Triton's choice, its newest loaded version).

        The version comes from Triton's answer, not from the gateway's cached spec: right after
        a new version is loaded, the spec may still name the old one for up to ``spec_ttl_s``."""
        request = infer_request(model, inputs, outputs, version)
        try:
            response = await self._infer(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:  # as tritonclient reports it: the status code's name
            error = InferenceServerException(msg=exc.details(), status=str(exc.code()))
            raise translate(error, f"inference on {model!r}") from exc
        result = InferResult(response)
        return {o: result.as_numpy(o) for o in outputs}, response.model_version
