"""The builder's one exception tree.

Every error a user can cause is a ``BuilderError``: one line of reason, an optional hint,
and the process exit code the CLI returns. Third-party exceptions are translated into this
tree where they are caught (``raise ... from exc``), never leaked to the CLI.
"""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message as one line for an ``error:`` line: its first non-empty line, cut
    at ``limit`` characters; the exception's type name when it has no message."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


class BuilderError(Exception):
    """Base of every error the builder reports to a user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(BuilderError):
    """Bad command-line input: a malformed URI, an illegal name, conflicting options."""

    exit_code = 2


class RegistryError(BuilderError):
    """The registry cannot give us the model: unknown name, alias, version or run."""

    exit_code = 3


class ConversionError(BuilderError):
    """The model cannot become ONNX: no signature, unsupported flavor, unconvertible op."""

    exit_code = 4


class MissingExtraError(ConversionError):
    """A flavor's libraries are not installed: the error names the project extra that brings
    them (pyproject.toml's optional dependencies), so the refusal says what to install."""

    def __init__(self, flavor: str, extra: str, missing: str, packages: tuple[str, ...]) -> None:
        super().__init__(
            f"the {flavor} flavor needs the {extra} extra, which is not installed ({missing})",
            hint=f"install the {extra} extra ({', '.join(packages)}) with the lock's versions and "
            "hashes, in the project's checkout: make venv (every extra, from requirements/project.lock)",
        )
        self.flavor = flavor
        self.extra = extra


class ParityError(BuilderError):
    """The converted model does not reproduce the original's outputs within tolerance."""

    exit_code = 5


class RepositoryError(BuilderError):
    """The model repository cannot be written or read as asked."""

    exit_code = 6


class ValidationError(BuilderError):
    """``builder validate`` found problems; ``problems`` lists every one."""

    exit_code = 7

    def __init__(self, problems: list[str], *, hint: str | None = None) -> None:
        super().__init__(
            f"{len(problems)} problem(s) in the model repository",
            hint=hint or "fix each problem listed above, then run `builder validate` again",
        )
        self.problems = problems


class RuntimeSetupError(BuilderError):
    """The embedded Triton runtime is missing, broken, or failed to start."""

    exit_code = 8


class GpuUnavailableError(BuilderError):
    """A GPU-only step (a TensorRT engine build) was asked for where there is no GPU."""

    exit_code = 9


class TuneError(BuilderError):
    """``builder tune`` found no candidate within the latency budget (the config is unchanged)."""

    exit_code = 13  # 10-12 are builder release's (builder/release/errors.py)
