"""The ``builder`` command: one Typer app, commands registered from small modules.

Errors: every ``BuilderError`` becomes one red line (plus a hint) on stderr and its exit code;
with ``--json`` the same facts go to stdout as an object, so pipelines can read them.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from builder.errors import BuilderError

app = typer.Typer(
    name="builder",
    help="Turn MLflow registry models into Triton model repositories, and serve them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
runtime_app = typer.Typer(help="The embedded Triton runtime (install, locate).", no_args_is_help=True)
app.add_typer(runtime_app, name="runtime")

err_console = Console(stderr=True, highlight=False)


def report_error(exc: BuilderError) -> None:
    """Print a BuilderError the way every command does: one line, then the hint."""
    err_console.print(f"[bold red]error:[/] {exc.message}", soft_wrap=True)
    for problem in getattr(exc, "problems", []) or []:
        err_console.print(f"  - {problem}", soft_wrap=True)
    if exc.hint:
        err_console.print(f"[dim]hint:[/] {exc.hint}", soft_wrap=True)


def _register_commands() -> None:
    # Imported here, not at module top, so `builder --help` stays fast and each command
    # module only pulls its heavy dependencies (mlflow, onnx, torch) when it runs.
    from builder.cli import export, release, serve, tune, validate  # noqa: F401


def main() -> None:
    """Console-script entry point."""
    _register_commands()
    try:
        app()
    except BuilderError as exc:
        report_error(exc)
        sys.exit(exc.exit_code)
