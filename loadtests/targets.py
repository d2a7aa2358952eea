"""What the gate can load-test, and how a target address is written for each.

``--user-class`` picks one of three Locust users (defined in ``loadtests.users``); the gate
probes the target the way that user will talk to it, so a down target is caught before Locust
starts. Addresses: ``http(s)://host:port`` for the HTTP users; ``host:port``, ``grpc://host:port``
or ``grpcs://host:port`` (TLS, e.g. a KServe ingress on 443) for gRPC.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from loadtests.errors import UsageError


@dataclass(frozen=True)
class UserClass:
    """One kind of load: the Locust class that sends it and how its target is addressed."""

    key: str
    locust_class: str
    protocol: str  # "http" or "grpc"
    example_target: str
    description: str


USER_CLASSES: dict[str, UserClass] = {
    "gateway": UserClass(
        "gateway",
        "GatewayUser",
        "http",
        "http://127.0.0.1:8080",
        "POST /v1/models/{model}/predict on the gateway, rows drawn from the feature repo's entity ids",
    ),
    "triton-http": UserClass(
        "triton-http",
        "TritonHttpUser",
        "http",
        "http://127.0.0.1:8000",
        "POST /v2/models/{model}/infer (KServe v2 JSON) on Triton, rows from the model's input example",
    ),
    "triton-grpc": UserClass(
        "triton-grpc",
        "TritonGrpcUser",
        "grpc",
        "127.0.0.1:8001",
        "ModelInfer over gRPC (tritonclient.grpc) on Triton, rows from the model's input example",
    ),
}


@dataclass(frozen=True)
class GrpcTarget:
    """A gRPC address as tritonclient.grpc wants it (``host:port``), and whether to use TLS."""

    address: str
    ssl: bool


def parse_grpc_target(target: str) -> GrpcTarget:
    """``host:port``, ``grpc://host:port`` or ``grpcs://host:port`` (port 443 by default)."""
    text = target.strip()
    ssl = text.startswith("grpcs://")
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme not in ("grpc", "grpcs") or not parts.hostname:
            raise UsageError(
                f"bad gRPC target {target!r}",
                hint="write host:port, grpc://host:port or grpcs://host:port",
            )
        try:
            port = parts.port or (443 if ssl else 8001)
        except ValueError as exc:
            raise UsageError(f"bad port in gRPC target {target!r}") from exc
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return GrpcTarget(f"{host}:{port}", ssl)
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise UsageError(
            f"bad gRPC target {target!r}", hint="write host:port, grpc://host:port or grpcs://host:port"
        )
    return GrpcTarget(text, False)


def normalize_http_target(target: str) -> str:
    """An ``http(s)://host[:port][/prefix]`` base URL without a trailing slash."""
    parts = urlsplit(target.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"bad HTTP target {target!r}", hint="write http://host:port (or https://host for an ingress)"
        )
    try:
        _ = parts.port
    except ValueError as exc:
        raise UsageError(f"bad port in HTTP target {target!r}") from exc
    return target.strip().rstrip("/")


def normalize_target(user_class: UserClass, target: str) -> str:
    """The target checked for the user class's protocol (UsageError when malformed)."""
    if user_class.protocol == "grpc":
        parse_grpc_target(target)
        return target.strip()
    return normalize_http_target(target)
