"""The Triton calls the plugin makes, over HTTP through ``tritonclient.http``: the repository
API of explicit model control (index, load, unload), a model's config and readiness, inference.

Every failure becomes a ``BuilderError`` here, once: a server that does not answer is
``TritonUnavailable``; a refused load carries Triton's own one-line reason. Branches read the
HTTP status and readiness, never message text.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from builder.errors import first_line
from builder.mlflow_deploy.errors import DeploymentNotFound, PredictionError, TritonUnavailable
from builder.mlflow_deploy.target import Target

T = TypeVar("T")
_UNAVAILABLE_HINT = (
    "start one in explicit model-control mode, e.g. `builder serve --repo DIR "
    "--model-control-mode explicit`, and pass its HTTP URL (?triton=http://HOST:PORT)"
)


class Triton:
    """One Triton server's HTTP endpoint; ``timeout`` bounds every call (loads included)."""

    def __init__(self, target: Target, timeout: float = 120.0) -> None:
        self.url = target.triton_url
        self.timeout = timeout
        self._client = httpclient.InferenceServerClient(
            target.triton_url,
            ssl=target.ssl,
            connection_timeout=min(timeout, 10.0),
            network_timeout=timeout,
        )

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except InferenceServerException as exc:
            said = exc.message() or ""
            explicit = "explicit" in said.lower() or "not allowed" in said.lower()
            raise TritonUnavailable(
                f"Triton at {self.url} refused to {what}: {first_line(Exception(said))}",
                hint="start Triton with --model-control-mode explicit (builder serve --model-control-mode "
                "explicit): the plugin loads models through Triton's repository API"
                if explicit
                else "read the server's log for the model's load error",
            ) from None
        except (OSError, TimeoutError) as exc:  # refused, reset, timed out: no answer
            raise TritonUnavailable(
                f"Triton at {self.url} does not answer ({first_line(exc)})", hint=_UNAVAILABLE_HINT
            ) from None

    def check_live(self) -> None:
        """Refuse at once when the server is down (before an export writes anything)."""
        if not self._call("answer", self._client.is_server_live):
            raise TritonUnavailable(f"Triton at {self.url} is not live", hint=_UNAVAILABLE_HINT)

    def index(self) -> list[dict[str, Any]]:
        """The repository index: ``[{"name", "version"?, "state"?, "reason"?}, ...]``."""
        return list(self._call("list its repository", self._client.get_model_repository_index))

    def load(self, name: str) -> None:
        """Load (or reload) ``name`` from the repository; returns once it is ready."""
        self._call(f"load {name!r}", lambda: self._client.load_model(name))
        if not self.ready(name):
            raise TritonUnavailable(f"Triton at {self.url} loaded {name!r} but it is not ready")

    def unload(self, name: str) -> None:
        """Unload ``name`` (and the ensembles over it) and wait until it no longer serves."""
        self._call(f"unload {name!r}", lambda: self._client.unload_model(name, unload_dependents=True))
        deadline = time.monotonic() + self.timeout
        while self.ready(name):  # Triton unloads in the background
            if time.monotonic() > deadline:
                raise TritonUnavailable(f"Triton at {self.url} still serves {name!r} after unload")
            time.sleep(0.05)

    def ready(self, name: str) -> bool:
        return bool(self._call("answer", lambda: self._client.is_model_ready(name)))

    def config(self, name: str) -> dict[str, Any]:
        """The loaded model's config (Triton's JSON form); DeploymentNotFound when not loaded."""
        if not self.ready(name):
            raise DeploymentNotFound(
                f"deployment {name!r} is not loaded on Triton at {self.url}",
                hint="list the deployments (`mlflow deployments list -t …`), or create it",
            )
        return dict(self._call(f"give {name!r}'s config", lambda: self._client.get_model_config(name)))

    def infer(self, name: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """One inference request; arrays in, arrays out (BYTES as object arrays of str)."""
        tensors = []
        for key, array in inputs.items():
            tensor = httpclient.InferInput(key, list(array.shape), _datatype(array))
            tensor.set_data_from_numpy(array, binary_data=True)
            tensors.append(tensor)
        wanted = [httpclient.InferRequestedOutput(o, binary_data=True) for o in outputs]
        try:
            result = self._client.infer(name, tensors, outputs=wanted)
        except InferenceServerException as exc:
            raise PredictionError(
                f"Triton at {self.url} refused the request to {name!r}: "
                f"{first_line(Exception(exc.message()))}",
                hint="the inputs must match the deployment's serving contract (`get_deployment`)",
            ) from None
        except (OSError, TimeoutError) as exc:
            raise TritonUnavailable(
                f"Triton at {self.url} does not answer ({first_line(exc)})", hint=_UNAVAILABLE_HINT
            ) from None
        return {o: _decoded(result.as_numpy(o)) for o in outputs}


def _datatype(array: np.ndarray) -> str:
    if array.dtype == object:
        return "BYTES"
    return {"float32": "FP32", "float64": "FP64", "int64": "INT64", "int32": "INT32", "bool": "BOOL"}[
        array.dtype.name
    ]


def _decoded(array: Any) -> np.ndarray:
    out = np.asarray(array)
    if out.dtype == object:
        return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(out)
    return out
