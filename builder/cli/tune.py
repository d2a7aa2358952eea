"""``builder tune MODEL --repo DIR --latency-budget-ms P99``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from builder.cli.common import console, emit_json, run_json_aware
from builder.cli.main import app
from builder.tune.run import DEFAULT_MAX_CANDIDATES, DEFAULT_MEASURE_S, DEFAULT_MIN_GAIN


@app.command("tune")
def tune(
    model: Annotated[str, typer.Argument(help="Model folder name in the repository")],
    repo: Annotated[Path, typer.Option(help="Triton model repository holding the model")],
    latency_budget_ms: Annotated[
        float, typer.Option("--latency-budget-ms", help="p99 budget a candidate must keep, in ms")
    ],
    concurrency: Annotated[
        str, typer.Option(help="Closed-loop client counts to measure at, comma-separated")
    ] = "1,16,64",
    max_candidates: Annotated[
        int, typer.Option("--max-candidates", help="Configs to measure, the current one included")
    ] = DEFAULT_MAX_CANDIDATES,
    measure_seconds: Annotated[
        float, typer.Option("--measure-seconds", help="Measured window per concurrency level")
    ] = DEFAULT_MEASURE_S,
    min_gain: Annotated[
        float,
        typer.Option("--min-gain", help="Fraction a candidate must beat the current config's score by"),
    ] = DEFAULT_MIN_GAIN,
    report_dir: Annotated[
        Path | None,
        typer.Option("--report-dir", help="Where tune.png and tune.json go [default: <repo>/<model>/tune/]"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Measure and report; write no config or metadata")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout")] = False,
) -> None:
    """Quick-search max batch size, queue delay, preferred batch sizes and instance count on a
    real Triton; keep the best config whose p99 stays within the budget.

    Score: the sum of throughput over the concurrency levels whose p99 is within the budget.
    """
    from builder.tune.report import results_table
    from builder.tune.run import TuneRequest, parse_concurrency
    from builder.tune.run import tune as run_tune
    from builder.tune.search import CandidateResult

    def progress(result: CandidateResult) -> None:
        if json_output:
            return
        verdict = "failed" if result.error else ("within budget" if result.within_budget else "over budget")
        console.print(
            f"candidate {result.index}: {result.knobs.label()}: {verdict}, score {result.score:,.0f}"
        )

    def go() -> None:
        request = TuneRequest(
            model=model,
            repo=repo,
            latency_budget_ms=latency_budget_ms,
            concurrency=parse_concurrency(concurrency),
            max_candidates=max_candidates,
            measure_seconds=measure_seconds,
            min_gain=min_gain,
            dry_run=dry_run,
            report_dir=report_dir,
        )
        outcome = run_tune(request, on_candidate=progress)
        if json_output:
            emit_json(
                {
                    "ok": True,
                    **outcome.data,
                    "plot": str(outcome.plot),
                    "report": str(outcome.report),
                    "metadata": None if outcome.metadata is None else str(outcome.metadata),
                    "dry_run": dry_run,
                }
            )
            return
        console.print(results_table(outcome.results, outcome.winner, latency_budget_ms))
        for result in outcome.results:
            if result.error is not None:
                console.print(f"[red]candidate {result.index} failed:[/] {result.error}", soft_wrap=True)
        assert outcome.winner is not None  # run_tune raises TuneError otherwise
        what = "would write" if dry_run else ("wrote" if outcome.data["applied"] else "kept (already best)")
        console.print(
            f"winner: candidate {outcome.winner.index} ({outcome.winner.knobs.label()}): {what} config"
        )
        console.print("to keep it on re-export: builder export ... " + " ".join(outcome.data["export_flags"]))
        console.print(f"plot: {outcome.plot}  report: {outcome.report}")

    run_json_aware(json_output, go)
