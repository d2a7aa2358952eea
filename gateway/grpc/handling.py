"""Every gRPC method's auth check and error status, in one place, for both services.

Each method is registered by hand with no request deserializer (``unary``): the handler gets the
raw bytes, checks the key (``authorize``: ``ApiKeys.check`` of gateway/auth.py on the
``x-api-key`` or ``authorization`` metadata) unless the method is one of the open probes, decodes
the message itself, so bytes that do not decode are an INVALID_ARGUMENT from the error tree (the
generated servicers deserialize inside grpc, where a failure is UNKNOWN to clients), and turns a
GatewayError into its status and one-line detail (gateway/errors.py), counted by cause. The
HTTP side's twin is gateway/http/handling.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import DecodeError, Message

from gateway import metrics
from gateway.errors import BadRequest, GatewayError
from gateway.service import Service

log = logging.getLogger("gateway")

Context: TypeAlias = grpc.aio.ServicerContext
Method = Callable[[Any, Context], Awaitable[Any]]


@dataclass(frozen=True)
class Rpc:
    """One unary method: the servicer's coroutine over the decoded request, its message types,
    whether it is open (no key: the probes, as HTTP's ``/healthz``), and, for the request
    metrics (``gateway_request_seconds``), its route label and how to read a request's model."""

    method: Method
    request_type: Any
    response_type: Any
    public: bool = False
    route: str = ""  # "": not in the request metrics
    model_of: Callable[[Any], str] | None = None


def authorize(service: Service, context: Context) -> None:
    """Raise Unauthenticated or Forbidden unless the call's metadata carries a known key."""
    if not service.auth.enabled:  # no keys: no metadata to read (a tuple built per call)
        return
    md = {k.lower(): v for k, v in context.invocation_metadata() or ()}
    service.auth.check(md.get("x-api-key"), md.get("authorization"))


def decode(message_type: Any, raw: bytes) -> Any:
    """The wire bytes as ``message_type``; bytes that are not one (truncated, garbage, a string
    that is not UTF-8) are the caller's mistake."""
    try:
        return message_type.FromString(raw)
    except DecodeError as exc:
        name = message_type.DESCRIPTOR.full_name
        article = "an" if name[0] in "aeiou" else "a"
        raise BadRequest(f"the request is not {article} {name}: {exc}") from None


def unary(service: Service, rpc: Rpc) -> grpc.RpcMethodHandler:
    """``rpc`` as a handler over raw bytes, its errors answered as the tree's statuses."""
    name = getattr(rpc.method, "__name__", "a gRPC call")

    async def handle(raw: bytes, context: Context) -> Message:
        meter: Any = (
            metrics.request(rpc.route, service.models) if rpc.route else nullcontext(metrics.Call(""))
        )
        with meter as call:
            call.status = "OK"  # the model is labelled once the bytes decode
            try:
                if not rpc.public:
                    authorize(service, context)
                request = decode(rpc.request_type, raw)
                if rpc.model_of is not None:
                    call.model = rpc.model_of(request)
                response: Message = await rpc.method(request, context)
                return response
            except GatewayError as exc:
                call.status = exc.grpc_code.name
                metrics.count_error(exc.cause)
                await context.abort(exc.grpc_code, exc.detail)
                raise  # unreachable: abort raises
            except Exception:
                call.status = "INTERNAL"
                log.exception("unexpected error in %s (model %s)", name, call.model or "unknown")
                metrics.count_error("internal")
                await context.abort(grpc.StatusCode.INTERNAL, "internal error")
                raise

    return grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=None, response_serializer=rpc.response_type.SerializeToString
    )


Handlers = tuple[str, dict[str, grpc.RpcMethodHandler]]


def method_handlers(service: Service, full_name: str, rpcs: dict[str, Rpc]) -> Handlers:
    """The methods of the gRPC service ``full_name``, for ``add_registered_method_handlers``:
    registered, each call is matched to its method in gRPC's core, not by a generic handler's
    lookup in Python on every call."""
    return full_name, {n: unary(service, r) for n, r in rpcs.items()}
