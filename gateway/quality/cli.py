"""``gateway quality report``: the payload log joined with labels, scored per version, as HTML
and/or JSON (the live report's shape, for the release gate).

Exit codes: 0 the report is written (some labels may be unmatched, duplicated or invalid: they
are counted and explained in it); 2 bad input, in one ``error:`` line and a ``hint:`` line
(docs/errors.md): no log or no rows of the model in it, a labels file that cannot be read or
lacks the columns a join needs, a log without the columns a join needs, no serving contract in
``--repo``, or no label joined to a logged prediction (a report of zero rows would read as a
pass, so it is refused rather than written); 1 the HTML file cannot be written.

Light at import (``gateway`` imports this module on every start): pandas and pyarrow load when
the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gateway.refusal import refuse

quality_app = typer.Typer(
    help="Model quality: predictions joined with labels (docs/quality.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # Click's plain help: option names are never cut at 80 columns
)


@quality_app.callback()
def quality() -> None:
    """Model quality: predictions joined with labels (docs/quality.md)."""


_HINT = "see `gateway quality report --help` (docs/quality.md: the offline report)"


@quality_app.command("report")
def report(
    model: Annotated[str, typer.Option(help="The model (its folder in the log and in --repo)")],
    repo: Annotated[
        Path, typer.Option(help="Model repository: each version's metadata.json gives its classes")
    ],
    labels: Annotated[
        Path | None,
        typer.Option(
            help="Labels: Parquet or CSV with prediction_id,label or entity keys,event_timestamp,label"
        ),
    ] = None,
    log: Annotated[
        str | None,
        typer.Option(
            help="The payload log: a folder or URL (default: GATEWAY_PAYLOAD_LOG)",
            envvar="GATEWAY_PAYLOAD_LOG",
        ),
    ] = None,
    labels_feature_view: Annotated[
        str | None, typer.Option(help="Labels from this Feast feature view instead of a file")
    ] = None,
    feature_repo: Annotated[Path | None, typer.Option(help="The Feast repo of --labels-feature-view")] = None,
    label_field: Annotated[str, typer.Option(help="The label feature of --labels-feature-view")] = "label",
    out: Annotated[
        Path | None, typer.Option(help="The HTML file [quality-report.html unless --json]")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout")] = False,
    engine: Annotated[
        str, typer.Option(help="pandas (one process) or spark (the label join on Spark: docs/batch.md)")
    ] = "pandas",
    spark_master: Annotated[
        str | None,
        typer.Option(help="With --engine spark: e.g. local[4] (default: spark-submit's, else local[*])"),
    ] = None,
) -> None:
    """Join the payload log with labels and score each version (champion and challenger)."""
    from gateway.quality.offline import LabelSource, OfflineError, build, read_labels

    if not log:
        raise refuse("no payload log given", "pass --log DIR|URL or set GATEWAY_PAYLOAD_LOG", 2)
    if not repo.is_dir():
        raise refuse(
            f"--repo {repo} is not a folder", "pass --repo the model repository the gateway served", 2
        )
    if (labels is None) == (labels_feature_view is None):
        raise refuse("give exactly one of --labels FILE and --labels-feature-view VIEW", _HINT, 2)
    if engine not in ("pandas", "spark"):
        raise refuse(f"--engine {engine!r} is not pandas or spark", _HINT, 2)
    if engine == "spark" and labels_feature_view is not None:
        raise refuse(
            "--engine spark joins labels from a file (--labels); labels from a Feast feature view are "
            "joined by the pandas engine",
            "drop --engine spark, or export the view's labels to a Parquet file",
            2,
        )
    try:
        source: LabelSource
        if labels is not None:
            source = read_labels(labels)
        else:
            from gateway.quality.feast_labels import FeatureViewLabels

            if feature_repo is None:
                raise OfflineError(
                    "--labels-feature-view needs --feature-repo, the Feast repo that defines it"
                )
            source = FeatureViewLabels(feature_repo, str(labels_feature_view), label_field)
        if engine == "spark":
            from gateway.spark.quality import build_with_spark

            built = build_with_spark(log, source, repo, model, spark_master)
        else:
            built = build(log, source, repo, model)
    except OfflineError as exc:
        raise refuse(str(exc), exc.hint or _HINT, 2) from None
    except OSError as exc:  # pyarrow's filesystem errors (a URL it cannot reach, no credentials)
        raise refuse(
            f"cannot read the payload log at {log}: {exc}", "check --log and its credentials", 2
        ) from None
    for note in built.notes:
        typer.echo(f"note: {note}", err=True)
    target = out if out is not None or as_json else Path("quality-report.html")
    if target is not None:
        from gateway.quality.html import render

        try:
            target.write_text(render(built), encoding="utf-8")
        except OSError as exc:
            raise refuse(
                f"cannot write {target}: {exc.strerror or exc}", "pass --out a writable file", 1
            ) from None
        counts = built.report.feedback
        typer.echo(
            f"wrote {target}: {model}, {counts['accepted']} labels joined, "
            f"{len(built.report.versions)} version(s)",
            err=as_json,
        )
    if as_json:
        typer.echo(json.dumps(built.report.to_dict(), indent=2))
