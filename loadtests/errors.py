"""The gate's one exception tree, and its exit codes.

Every failure a user can cause is a ``GateError`` carrying a one-line reason, an optional hint
and the exit code ``loadtests gate`` returns, so a pipeline can tell "the candidate is too slow"
(an SLA miss) from "the gate could not judge it" (bad SLA file, target down, Locust failed).
"""

from __future__ import annotations

EXIT_PASS = 0
EXIT_SLA_MISSED = 1
EXIT_USAGE = 2  # also what Typer/Click return for a bad option
EXIT_BAD_SLA = 3
EXIT_TARGET_DOWN = 4
EXIT_LOCUST_FAILED = 5

EXIT_CODES = {
    EXIT_PASS: "every SLA line passed",
    EXIT_SLA_MISSED: "at least one SLA line missed",
    EXIT_USAGE: "bad command-line option (target URL, run time, ...)",
    EXIT_BAD_SLA: "the SLA file cannot be read or is invalid",
    EXIT_TARGET_DOWN: "the target did not answer, or is not ready",
    EXIT_LOCUST_FAILED: "Locust crashed, timed out, or recorded no requests",
}


class GateError(Exception):
    """Base of every error the gate reports: one line of reason and a hint."""

    exit_code = EXIT_USAGE
    kind = "error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(GateError):
    """A bad option value that Typer could not catch (a malformed target URL, run time)."""

    exit_code = EXIT_USAGE
    kind = "usage"


class SlaFileError(GateError):
    """The SLA file is missing, is not YAML, or fails validation; ``problems`` names each field."""

    exit_code = EXIT_BAD_SLA
    kind = "bad-sla"

    def __init__(self, message: str, *, problems: list[str] | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems or []


class TargetDownError(GateError):
    """The target refused the connection, timed out, or answered "not ready"."""

    exit_code = EXIT_TARGET_DOWN
    kind = "target-down"


class LocustFailedError(GateError):
    """The Locust subprocess crashed, ran past its hard timeout, or produced no usable stats."""

    exit_code = EXIT_LOCUST_FAILED
    kind = "locust-failed"
