"""The ``builder`` command: one Typer app, commands registered from small modules.

Errors: every ``BuilderError`` becomes one red line (plus a hint) on stderr and its exit code;
with ``--json`` the same facts go to stdout as an object, so pipelines can read them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape
from typer._click import exceptions as click  # Typer 0.29 vendors Click: its own exception classes

from builder.errors import BuilderError, UsageError

app = typer.Typer(
    name="builder",
    help="Turn MLflow registry models into Triton model repositories, and serve them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# rich_markup_mode=None: Click's plain help, which wraps at the terminal width (COLUMNS) but never
# cuts an option's name (Typer's rich panels cut them to `--max-queue-dela…` at 80 columns)
runtime_app = typer.Typer(
    help="The embedded Triton runtime (install, locate).", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(runtime_app, name="runtime")

err_console = Console(stderr=True, highlight=False)


def report_error(exc: BuilderError) -> None:
    """Print a BuilderError the way every command does: one line, then the hint."""
    # escaped: a message or hint is text, and `[N, 2]` or `.[boosting]` in it is no style tag
    err_console.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
    for problem in getattr(exc, "problems", []) or []:
        err_console.print(f"  - {escape(str(problem))}", soft_wrap=True)
    if exc.hint:
        err_console.print(f"[dim]hint:[/] {escape(exc.hint)}", soft_wrap=True)


def _register_commands() -> None:
    # Imported here, not at module top, so `builder --help` stays fast and each command
    # module only pulls its heavy dependencies (mlflow, onnx, torch) when it runs.
    from builder.cli import export, release, score, serve, tune, validate  # noqa: F401


def main() -> None:
    """Console-script entry point."""
    _register_commands()
    sys.exit(run_app(app, "builder", report_error))


def run_app(typer_app: typer.Typer, prog: str, report: Callable[[BuilderError], None]) -> int:
    """Run a Typer app under the error contract and return its exit code: a BuilderError and
    Click's own usage errors (missing option, bad value, unknown flag) both become one
    ``error:`` line and a ``hint:`` line, exit 2 for usage."""
    try:
        code = typer_app(prog_name=prog, standalone_mode=False)
    except BuilderError as exc:
        report(exc)
        return exc.exit_code
    except click.NoArgsIsHelpError as exc:  # `builder` alone: the help, as before
        exc.show()
        return exc.exit_code
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else prog
        report(UsageError(exc.format_message(), hint=f"see `{command} --help`"))
        return UsageError.exit_code
    except click.ClickException as exc:  # e.g. a file option that cannot be opened
        report(UsageError(exc.format_message(), hint=f"see `{prog} --help`"))
        return UsageError.exit_code
    except typer.Abort:
        err_console.print("[bold red]error:[/] interrupted", soft_wrap=True)
        err_console.print("[dim]hint:[/] run the command again to finish", soft_wrap=True)
        return 130
    return code if isinstance(code, int) else 0
