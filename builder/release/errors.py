"""Errors of the rollout commands, in the builder's tree (exit codes after the builder's 2-9)."""

from __future__ import annotations

from builder.errors import BuilderError


class ReleaseError(BuilderError):
    """The Kubernetes API refused the request or cannot be reached, or the object is missing."""

    exit_code = 10


class RolloutTimeoutError(ReleaseError):
    """The new revision (or the traffic split asked for) was not ready before the timeout."""

    exit_code = 11


class ManifestError(BuilderError):
    """A rendered object fails KServe's CRD schema (``problems`` lists each violation)."""

    exit_code = 12

    def __init__(self, message: str, problems: list[str], *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems
