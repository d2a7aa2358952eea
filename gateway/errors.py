"""The gateway's one exception tree: each error carries its HTTP status, gRPC code and a cause.

Transports never decide statuses: the HTTP and gRPC adapters each have one handler that
reads these attributes (gateway/http/handling.py, gateway/grpc/handling.py). A client's mistake
is a 4xx, never a 500; a dependency that is down is a 503 with ``Retry-After``; a deadline that
passes is a 504.
"""

from __future__ import annotations

import grpc


class GatewayError(Exception):
    http_status = 500
    grpc_code = grpc.StatusCode.INTERNAL
    cause = "internal"
    retry_after: int | None = None

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field  # the request field path, for input errors ("rows[2].user_id")

    @property
    def detail(self) -> str:
        """One line, the field path first when there is one: what gRPC's status details and the
        Open Inference Protocol's ``{"error": ...}`` carry (neither has a field of its own)."""
        return f"{self.field}: {self.message}" if self.field else self.message

    def to_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"error": self.message, "cause": self.cause}
        if self.field:
            body["field"] = self.field
        return body


class BadRequest(GatewayError):
    """Malformed JSON or a body that is not an object."""

    http_status = 400
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT
    cause = "bad_request"


class InvalidInput(GatewayError):
    """Well-formed, but a field is missing, unknown or of the wrong type."""

    http_status = 422
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT
    cause = "invalid_input"


class RefusedByStore(InvalidInput):
    """The online store raised on a request's entity keys themselves (a value its key encoding
    refuses), not because it is down. A batch of requests that hits it is read again request by
    request (gateway/core.py), so only the request whose keys it refuses answers with it."""

    cause = "refused_by_store"


class NoExplainer(InvalidInput):
    """Reason codes asked of a model exported without an explainer (``builder export --explain``
    writes one), or of a model whose answers the explainer cannot match (several targets)."""

    cause = "no_explainer"


class Unauthenticated(GatewayError):
    http_status = 401
    grpc_code = grpc.StatusCode.UNAUTHENTICATED
    cause = "unauthenticated"


class Forbidden(GatewayError):
    http_status = 403
    grpc_code = grpc.StatusCode.PERMISSION_DENIED
    cause = "forbidden"


class ModelNotFound(GatewayError):
    http_status = 404
    grpc_code = grpc.StatusCode.NOT_FOUND
    cause = "unknown_model"


class SpecError(ModelNotFound):
    """Triton serves the model, but its config does not say how the gateway can call it: it was
    not exported from a Feast run, its serving parameters are malformed, or its layout
    (``tensors``) is not one the gateway assembles from features."""

    cause = "unservable_model"


class OutputMismatch(SpecError):
    """Triton answered, but not in the shape the model's serving contract promises (a K-column
    value for a one-target regressor, no score output, a label outside -1/1 for an outlier
    detector). The export and the model disagree, so every request would fail the same way:
    the model is unservable as it stands, like a malformed contract (not a client's mistake,
    and not a crash of the gateway's either). HTTP 502: the upstream (Triton) gave an answer
    the gateway cannot use; gRPC has no such code, and INTERNAL says an invariant broke."""

    http_status = 502
    grpc_code = grpc.StatusCode.INTERNAL
    cause = "output_mismatch"


class EntityNotFound(GatewayError):
    http_status = 404
    grpc_code = grpc.StatusCode.NOT_FOUND
    cause = "unknown_entity"


class MethodNotAllowed(GatewayError):
    """An HTTP method the route does not serve (HTTP only: gRPC has no methods to get wrong)."""

    http_status = 405
    grpc_code = grpc.StatusCode.UNIMPLEMENTED
    cause = "method_not_allowed"


class TooLarge(GatewayError):
    """Body or batch beyond the configured limits."""

    http_status = 413
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED
    cause = "too_large"


class Unavailable(GatewayError):
    """Triton or the online store cannot be reached; retrying later may succeed."""

    http_status = 503
    grpc_code = grpc.StatusCode.UNAVAILABLE
    retry_after = 1

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class DeadlineExceeded(GatewayError):
    http_status = 504
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause
