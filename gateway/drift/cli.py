"""``gateway drift``: each served model's drift, window vs reference, as a table (or ``--json``).

Subcommands live beside it: ``gateway drift report`` (gateway/payload_log/cli.py) turns the
payload log into an HTML report.
"""

from __future__ import annotations

import typer

drift_app = typer.Typer(
    help="Drift of what the models see against their training reference (docs/drift.md).",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@drift_app.callback()
def drift(ctx: typer.Context) -> None:
    """Show each model's drift table (TODO: built in the drift-gw branch)."""
    if ctx.invoked_subcommand is None:
        typer.echo("gateway drift: not built yet", err=True)
        raise typer.Exit(2)
