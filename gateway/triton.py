"""The gateway's Triton client: one asyncio gRPC client for the process, every call with a
deadline, every failure translated into the gateway's error tree by its gRPC status."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from gateway.errors import DeadlineExceeded, GatewayError, ModelNotFound, Unavailable

# numpy dtype -> Triton datatype; strings travel as object arrays of str, Triton's BYTES
_TRITON_DTYPES = {"float32": "FP32", "int64": "INT64", "bool": "BOOL", "object": "BYTES"}


def infer_inputs(inputs: Mapping[str, np.ndarray]) -> list[grpcclient.InferInput]:
    """Triton inputs for named arrays, each typed by its numpy dtype."""
    request = []
    for name, array in inputs.items():
        datatype = _TRITON_DTYPES.get(array.dtype.name)
        if datatype is None:
            raise GatewayError(f"input {name!r} is {array.dtype}, which the gateway does not send to Triton")
        inp = grpcclient.InferInput(name, list(array.shape), datatype)
        inp.set_data_from_numpy(array)
        request.append(inp)
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


class TritonClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client = grpcclient.InferenceServerClient(url)

    async def close(self) -> None:
        await self._client.close()

    async def model_config(self, model: str) -> dict:
        try:
            reply = await self._client.get_model_config(model, as_json=True, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise translate(exc, f"the config of {model!r}") from exc
        return reply["config"]

    async def model_ready_version(self, model: str) -> str | None:
        """The newest ready version of ``model``, or None when it is not ready."""
        try:
            if not await self._client.is_model_ready(model, client_timeout=self.timeout_s):
                return None
            meta = await self._client.get_model_metadata(model, as_json=True, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            if "NOT_FOUND" in (exc.status() or "").upper():
                return None
            raise translate(exc, f"the state of {model!r}") from exc
        versions = meta.get("versions") or ["1"]
        return str(max(versions, key=int))

    async def is_live(self) -> bool:
        try:
            return bool(await self._client.is_server_live(client_timeout=self.timeout_s))
        except InferenceServerException:
            return False

    async def infer(
        self, model: str, inputs: Mapping[str, np.ndarray], outputs: tuple[str, ...]
    ) -> dict[str, np.ndarray]:
        """One inference call: named input arrays in (their dtype gives the Triton type), the
        named outputs back (BYTES outputs as object arrays of bytes)."""
        request = infer_inputs(inputs)
        requested = [grpcclient.InferRequestedOutput(o) for o in outputs]
        try:
            result = await self._client.infer(
                model, request, outputs=requested, client_timeout=self.timeout_s
            )
        except InferenceServerException as exc:
            raise translate(exc, f"inference on {model!r}") from exc
        return {o: result.as_numpy(o) for o in outputs}
