"""Load on Triton over gRPC (KServe v2 ``ModelInfer``), reported through ``events.request``.

gRPC's C core does its own I/O; ``init_gevent()`` makes it cooperate with gevent's loop, so many
simulated users share one process. It must run before any channel exists, hence at import.

The user calls the v2 service through a plain ``grpc`` channel and tritonclient's generated
stubs (``service_pb2_grpc``) rather than ``tritonclient.grpc.InferenceServerClient``: that
client closes its channel again in ``__del__``, and under gevent a channel closed during
interpreter shutdown hangs the process, so Locust would never exit after a run. A plain
channel, closed in ``on_stop``, leaves nothing to do at shutdown (and skips a client layer
the load generator does not need).
"""

from __future__ import annotations

import time
from typing import Any

import grpc
import grpc.experimental.gevent as grpc_gevent

grpc_gevent.init_gevent()

from locust import User, task  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402

from loadtests.responses import grpc_problem  # noqa: E402
from loadtests.targets import parse_grpc_target  # noqa: E402
from loadtests.users.model_inputs import model_inputs  # noqa: E402
from loadtests.users.options import load_options, user_seed  # noqa: E402
from loadtests.v2_grpc import infer_request  # noqa: E402


class BadAnswer(Exception):
    """A ModelInfer answer that arrived but is wrong (missing outputs, wrong row count)."""


class RpcFailed(Exception):
    """A failed RPC, as ``StatusCode: details`` (what Locust's failure table shows)."""

    @classmethod
    def of(cls, error: grpc.RpcError) -> RpcFailed:
        code = error.code() if hasattr(error, "code") else None
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(f"{getattr(code, 'name', code)}: {details}")


class TritonGrpcUser(User):
    """One gRPC client of Triton: its own channel, the input example jittered, one ModelInfer per
    task; each request is recorded as type ``grpc``, name ``infer``."""

    def on_start(self) -> None:
        if not self.host:
            raise ValueError("TritonGrpcUser needs --host host:port (or grpc:// / grpcs://)")
        self.options = load_options(self.environment)
        target = parse_grpc_target(self.host)
        self.channel = (
            grpc.secure_channel(target.address, grpc.ssl_channel_credentials())
            if target.ssl
            else grpc.insecure_channel(target.address)
        )
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        key = self.options.api_key
        self.metadata = (("authorization", f"Bearer {key}"),) if key else ()
        self.inputs = model_inputs(self.options, user_seed(self.options, "triton-grpc"), self._model_metadata)

    def _model_metadata(self) -> dict[str, Any]:
        request = service_pb2.ModelMetadataRequest(
            name=self.options.model, version=self.options.model_version
        )
        response = self.stub.ModelMetadata(
            request, timeout=self.options.request_timeout, metadata=self.metadata
        )
        return {
            "inputs": [
                {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in response.inputs
            ]
        }

    def on_stop(self) -> None:
        channel = getattr(self, "channel", None)
        if channel is not None:
            channel.close()

    def wait_time(self) -> float:
        return self.options.think_time

    def _request(self, rows: int) -> Any:
        return infer_request(self.options.model, self.options.model_version, self.inputs.batch(rows))

    @task
    def infer(self) -> None:
        n = self.options.rows_per_request
        request = self._request(n)  # built before the clock starts: only the RPC is timed
        exception: Exception | None = None
        length = 0
        start = time.perf_counter()
        try:
            response = self.stub.ModelInfer(
                request, timeout=self.options.request_timeout, metadata=self.metadata
            )
            elapsed_ms = (time.perf_counter() - start) * 1000
            length = response.ByteSize()
            problem = grpc_problem([(o.name, list(o.shape)) for o in response.outputs], n)
            if problem:
                exception = BadAnswer(problem)
        except grpc.RpcError as error:
            elapsed_ms = (time.perf_counter() - start) * 1000
            exception = RpcFailed.of(error)
        self.environment.events.request.fire(
            request_type="grpc",
            name="infer",
            response_time=elapsed_ms,
            response_length=length,
            exception=exception,
            context={},
        )
