"""The plugin's refusals as MLflow wants them: an ``MlflowException`` with an error code.

A ``BuilderError`` becomes one line, its reason then its hint (``reason; hint: …``), with the
MLflow error code of its class. The exception is also a ``click.ClickException``, so the
``mlflow deployments`` CLI prints ``Error: <the line>`` and exits 1 instead of a traceback;
Python callers catch it as the ``MlflowException`` it is.
"""

from __future__ import annotations

import click
from mlflow.exceptions import MlflowException
from mlflow.protos import databricks_pb2

from builder.errors import (
    BuilderError,
    ConversionError,
    ParityError,
    RegistryError,
    RepositoryError,
    RuntimeSetupError,
    UsageError,
)

# Most specific first: the first class an error is an instance of names its code.
_CODES: tuple[tuple[type[BuilderError], int], ...] = (
    (UsageError, databricks_pb2.INVALID_PARAMETER_VALUE),
    (RegistryError, databricks_pb2.RESOURCE_DOES_NOT_EXIST),
    (ConversionError, databricks_pb2.BAD_REQUEST),
    (ParityError, databricks_pb2.BAD_REQUEST),
    (RepositoryError, databricks_pb2.INVALID_STATE),
    (RuntimeSetupError, databricks_pb2.TEMPORARILY_UNAVAILABLE),
)


class DeploymentNotFound(BuilderError):
    """The target has no deployment (Triton model) of that name."""


class DeploymentExists(BuilderError):
    """``create`` of a name the repository already holds."""


class TritonUnavailable(RuntimeSetupError):
    """The Triton server does not answer, or refused a repository call."""


class PredictionError(BuilderError):
    """The inputs do not fit the deployment's serving contract, or Triton refused them."""


_OWN_CODES: dict[type[BuilderError], int] = {
    DeploymentNotFound: databricks_pb2.RESOURCE_DOES_NOT_EXIST,
    DeploymentExists: databricks_pb2.RESOURCE_ALREADY_EXISTS,
    PredictionError: databricks_pb2.INVALID_PARAMETER_VALUE,
}


class DeploymentRefused(MlflowException, click.ClickException):
    """An ``MlflowException`` that the ``mlflow`` CLI (click) shows as one ``Error:`` line."""

    exit_code = 1

    def __init__(self, message: str, error_code: int) -> None:
        MlflowException.__init__(self, message, error_code=error_code)

    def format_message(self) -> str:
        return str(self.message)


def one_line(exc: BuilderError) -> str:
    """The refusal's reason and hint on one line."""
    reason = " ".join(exc.message.split("\n", 1)[0].split())
    return f"{reason}; hint: {exc.hint}" if exc.hint else reason


def error_code(exc: BuilderError) -> int:
    """MLflow's error code for a builder refusal (INTERNAL_ERROR for a class not listed)."""
    if type(exc) in _OWN_CODES:
        return _OWN_CODES[type(exc)]
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return databricks_pb2.INTERNAL_ERROR


def to_mlflow(exc: BuilderError) -> DeploymentRefused:
    """The ``MlflowException`` to raise (``from None``: the reason is the whole story)."""
    return DeploymentRefused(one_line(exc), error_code(exc))
