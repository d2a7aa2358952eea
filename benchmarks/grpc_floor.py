"""grpcio's own cost per unary call: the floor under the gateway's gRPC figures.

A server built as the gateway builds its own (``grpc.aio``, uvloop, ``gateway.grpc.server``'s
options, the method registered with no deserializer) that answers ``gateway.v1.Gateway/Predict``
with a fixed ``PredictResponse`` (the gateway's real answer to one row, so the bytes on the
wire are the same size) and does nothing else: no auth, no decoding, no features, no Triton.
Driven by the same Python client as the gateway's gRPC (``gateway_loadgen``'s ``grpc`` mode),
its process's CPU per call is what grpcio costs a Python server before any work is done.
gateway_targets.py reports it beside the gateway's gRPC, so the gRPC / HTTP ratio can be read
as transport floor + the gateway's own work.

Run: ``python -m benchmarks.grpc_floor PORT RESPONSE_FILE`` (prints ``serving`` when up).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from gateway.grpc.server import server_options
from gateway.grpc.v1 import SERVICE
from gateway.settings import LimitSettings, ServerSettings
from support.servers import terminate

REPO_ROOT = Path(__file__).resolve().parent.parent


async def _serve(port: int, response: bytes) -> None:
    async def predict(raw: bytes, context: Any) -> bytes:
        return response

    handler = grpc.unary_unary_rpc_method_handler(predict)  # bytes in, bytes out: no (de)serializer
    limits, transport = LimitSettings(), ServerSettings()  # the gateway's defaults
    server = grpc.aio.server(options=server_options(limits.max_body_bytes, transport.idle_timeout_s))
    server.add_registered_method_handlers(SERVICE, {"Predict": handler})
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


@contextmanager
def floor_server(port: int, response: bytes, folder: Path) -> Iterator[subprocess.Popen[str]]:
    """The floor server on ``port`` (its own process group, so the CPU figure is its tree's),
    answering every call with ``response``; stopped on exit."""
    path = folder / "floor-response.bin"
    path.write_bytes(response)
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.grpc_floor", str(port), str(path)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "serving", or "" when it died
        if line.strip() != "serving":
            raise RuntimeError(f"the grpcio floor server did not start (exit {proc.poll()})")
        yield proc
    finally:
        terminate(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def main(argv: list[str]) -> None:
    import uvloop  # the gateway's loop (gateway/processes.py)

    port, response = int(argv[0]), Path(argv[1]).read_bytes()
    uvloop.run(_serve(port, response))


if __name__ == "__main__":
    main(sys.argv[1:])
