"""``builder validate --repo DIR``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from builder.cli.common import console, emit_json, run_json_aware
from builder.cli.main import app
from builder.errors import ValidationError


@app.command("validate")
def validate(
    repo: Annotated[Path, typer.Option(help="Triton model repository to check")],
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout")] = False,
) -> None:
    """Check every model in a repository (configs, files, ensemble wiring) without starting Triton."""
    from builder.repository.validate import validate_repository

    def go() -> None:
        entries, problems = validate_repository(repo)
        if not repo.is_dir():
            raise ValidationError(
                problems,
                hint="pass --repo pointing at a model repository folder (`builder export --repo DIR` "
                "writes one)",
            )
        if problems:
            raise ValidationError(problems)
        warnings = [w for e in entries for w in e.warnings]
        if json_output:
            models = [{"name": e.name, "versions": e.versions} for e in entries]
            emit_json({"ok": True, "models": models, "warnings": warnings})
            return
        for warning in warnings:
            console.print(f"[yellow]warning:[/] {warning}")
        table = Table(title=f"{repo}: {len(entries)} model(s), no problems")
        for col in ("model", "kind", "versions", "max batch"):
            table.add_column(col)
        for e in entries:
            kind = e.config.platform or e.config.backend
            table.add_row(e.name, kind, ", ".join(map(str, e.versions)), str(e.config.max_batch_size))
        console.print(table)

    run_json_aware(json_output, go)
