"""The gRPC server of one gateway process: the gateway's own ``gateway.v1.Gateway``
(gateway/grpc/v1.py) and the Open Inference Protocol's ``inference.GRPCInferenceService``
(gateway/grpc/oip.py) on one port, with message size and idle connections bounded."""

from __future__ import annotations

import grpc

from gateway.grpc import oip, v1
from gateway.service import Service


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
    options = server_options(settings.limits.max_body_bytes, settings.server.idle_timeout_s)
    if reuse_port:  # workers share the port (gateway serve --workers)
        options.append(("grpc.so_reuseport", 1))
    server = grpc.aio.server(options=options)
    for name, methods in (v1.handlers(service), oip.handlers(service)):
        server.add_registered_method_handlers(name, methods)
    server.add_insecure_port(address)
    return server
