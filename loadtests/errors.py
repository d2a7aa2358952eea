"""The gate's one exception tree, and its exit codes.

Every failure a user can cause is a ``GateError`` carrying a one-line reason, an optional hint
and the exit code ``loadtests gate`` returns, so a pipeline can tell "the candidate is too slow"
(an SLA miss) from "the gate could not judge it" (bad SLA file, target down, Locust failed).

The promotion evidence (shadow and quality, ``loadtests evidence`` or a gate whose SLA file has
a ``promotion:`` section) has two codes of its own: 6 when a criterion failed or could not be
judged (missing evidence is a failure), 7 when the evidence could not be had at all (gateway
unreachable, key refused, endpoint or file missing, a document that is not the gateway's).
When latency and evidence both miss, the gate returns 1: the latency miss is reported first.
"""

from __future__ import annotations

EXIT_PASS = 0
EXIT_SLA_MISSED = 1
EXIT_USAGE = 2  # also what Typer/Click return for a bad option
EXIT_BAD_SLA = 3
EXIT_TARGET_DOWN = 4
EXIT_LOCUST_FAILED = 5
EXIT_EVIDENCE_MISSED = 6
EXIT_EVIDENCE_UNAVAILABLE = 7

EXIT_CODES = {
    EXIT_PASS: "every SLA line passed",
    EXIT_SLA_MISSED: "at least one SLA line missed",
    EXIT_USAGE: "bad command-line option (target URL, run time, ...)",
    EXIT_BAD_SLA: "the SLA file cannot be read or is invalid",
    EXIT_TARGET_DOWN: "the target did not answer, or is not ready",
    EXIT_LOCUST_FAILED: "Locust crashed, timed out, or recorded no requests",
    EXIT_EVIDENCE_MISSED: "a promotion criterion (shadow, quality) failed or could not be judged",
    EXIT_EVIDENCE_UNAVAILABLE: "the evidence could not be fetched or read (gateway, file)",
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


class EvidenceUnavailableError(GateError):
    """The shadow or quality document could not be had: gateway down, 401/404, bad file."""

    exit_code = EXIT_EVIDENCE_UNAVAILABLE
    kind = "evidence-unavailable"
