"""``builder score``: batch scoring with the served graph on Spark (docs/batch.md).

Registered on import (``builder.cli.main._register_commands``); the command only translates
options into a ``ScoreRequest``; every failure is a BuilderError that ``main()`` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from builder.cli.common import console, emit_json, run_json_aware
from builder.cli.main import app
from feast_access import EVENT_TIMESTAMP


@app.command("score")
def score(
    entities: Annotated[
        str,
        typer.Argument(help="Entity table: a Parquet file or folder, a .csv with a header, or table:NAME"),
    ],
    repo: Annotated[Path, typer.Option(help="The Triton model repository the model is served from")],
    model: Annotated[str, typer.Option(help="The model's name in the repository (builder export's)")],
    feature_repo: Annotated[
        Path, typer.Option(help="The Feast repository whose registry holds the model's feature service")
    ],
    output: Annotated[str, typer.Option(help="Where to write the scores (a Parquet folder: path or URI)")],
    version: Annotated[
        int | None,
        typer.Option(help="The version to score (default: the one the gateway calls: champion, else newest)"),
    ] = None,
    timestamp_column: Annotated[
        str, typer.Option(help="The entity table's as-of time column")
    ] = EVENT_TIMESTAMP,
    master: Annotated[
        str | None,
        typer.Option(help="Spark master, e.g. local[4] (default: spark-submit's, else local[*])"),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing --output (once the new one is whole)")
    ] = False,
    check_triton: Annotated[
        str | None, typer.Option(help="Triton HTTP URL: a sample's answers must equal Triton's")
    ] = None,
    check_gateway: Annotated[
        str | None, typer.Option(help="Gateway URL: a sample's answers must equal the gateway's")
    ] = None,
    check_rows: Annotated[int, typer.Option(help="Rows in the checks' sample")] = 100,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout")] = False,
) -> None:
    """Score an entity table with the model's exported graph: features by Feast's point-in-time
    rule, the version's model.onnx in onnxruntime on Spark's executors, Parquet out."""
    from builder.score.run import ScoreRequest
    from builder.score.run import score as run_score

    request = ScoreRequest(
        entities=entities,
        repo=repo,
        model=model,
        feature_repo=feature_repo,
        output=output,
        version=version,
        timestamp=timestamp_column,
        master=master,
        overwrite=overwrite,
        check_triton=check_triton,
        check_gateway=check_gateway,
        check_rows=check_rows,
    )
    result = run_json_aware(json_output, lambda: run_score(request))
    if json_output:
        emit_json(result.to_dict())
        return
    checks = ", ".join(f"{who} {c['rows']} rows equal" for who, c in result.checks.items())
    console.print(
        f"scored {result.scored} of {result.rows} rows with {result.model} v{result.version} "
        f"(export {result.export_identity[:12]}…) in {result.seconds:.1f} s -> {result.output}"
        + (f"; {result.defaults_used} with stand-ins for missing features" if result.defaults_used else "")
        + (f"; checked: {checks}" if checks else ""),
        soft_wrap=True,
    )
