"""The gateway commands' error contract (as ``builder``'s and ``loadtests``'): one ``error:``
line and one ``hint:`` line on stderr, never wrapped, and a documented exit code; Click's own
usage errors (a missing option, a bad value) take the same shape, exit 2."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from typer._click import exceptions as click  # Typer 0.29 vendors Click: its own exception classes

_err = Console(stderr=True, highlight=False)


def report_error(message: str, hint: str) -> None:
    """Print one refusal: the ``error:`` line, then the ``hint:`` line."""
    _err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    _err.print(f"[dim]hint:[/] {escape(hint)}", soft_wrap=True)


def refuse(message: str, hint: str, code: int) -> typer.Exit:
    """Report a refusal; raise the returned ``typer.Exit`` to end the command with ``code``."""
    report_error(message, hint)
    return typer.Exit(code)


def run_app(app: typer.Typer, prog: str) -> int:
    """Run ``app``; Click's usage errors become one ``error:`` and one ``hint:`` line, exit 2."""
    try:
        code = app(prog_name=prog, standalone_mode=False)
    except click.NoArgsIsHelpError as exc:  # the command alone: its help, as before
        exc.show()
        return exc.exit_code
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else prog
        report_error(exc.format_message(), f"see `{command} --help`")
        return 2
    except click.ClickException as exc:
        report_error(exc.format_message(), f"see `{prog} --help`")
        return 2
    except typer.Abort:
        report_error("interrupted", "run the command again to finish")
        return 130
    return code if isinstance(code, int) else 0
