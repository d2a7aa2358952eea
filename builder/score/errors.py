"""Errors of ``builder score``, in the builder's tree (exit codes after ``builder tune``'s 13,
leaving room for the commands between)."""

from __future__ import annotations

from builder.errors import BuilderError


class ScoreInputError(BuilderError):
    """The entity table or the model's feature service cannot be scored as asked: no timestamp
    column, a missing join key or request field, an unknown feature service."""

    exit_code = 20


class SkewError(BuilderError):
    """A skew check found batch answers that differ from Triton's or the gateway's (``problems``
    names each row); nothing was written."""

    exit_code = 21

    def __init__(self, message: str, problems: list[str], *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems


class SparkUnavailableError(BuilderError):
    """pyspark (the ``spark`` extra) or the Java runtime it needs is missing, or Spark failed."""

    exit_code = 22
