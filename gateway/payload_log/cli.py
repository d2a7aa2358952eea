"""``gateway drift report``: the payload log since a time, as an HTML report."""

from __future__ import annotations

import typer


def report() -> None:
    """Turn the payload log into an HTML drift report (TODO: built in the payload-log branch)."""
    typer.echo("gateway drift report: not built yet", err=True)
    raise typer.Exit(2)
