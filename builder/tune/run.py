"""``builder tune``'s one entry point: refuse what cannot be tuned, search, write the result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from builder.errors import RepositoryError, TuneError, UsageError
from builder.repository.triton_config import ModelConfig, parse_pbtxt
from builder.tune import report
from builder.tune.search import CandidateResult, QuickSearch, pick_winner
from builder.tune.session import REPORT_FOLDER
from builder.tune.space import knobs_of, tunable

DEFAULT_CONCURRENCY = (1, 16, 64)
DEFAULT_MAX_CANDIDATES = 8
DEFAULT_MEASURE_S = 2.0
DEFAULT_MIN_GAIN = 0.05


@dataclass(frozen=True)
class TuneRequest:
    """Everything ``builder tune`` was asked, checked once at construction."""

    model: str
    repo: Path
    latency_budget_ms: float
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    measure_seconds: float = DEFAULT_MEASURE_S
    min_gain: float = DEFAULT_MIN_GAIN  # fraction of the current score a winner must add
    dry_run: bool = False
    report_dir: Path | None = None  # default: <repo>/<model>/tune/

    def __post_init__(self) -> None:
        if not self.latency_budget_ms > 0:
            raise UsageError("--latency-budget-ms must be > 0")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise UsageError("--concurrency must list levels >= 1, e.g. 1,16,64")
        if self.max_candidates < 1:
            raise UsageError("--max-candidates must be >= 1 (1 measures the current config only)")
        if not self.measure_seconds > 0:
            raise UsageError("--measure-seconds must be > 0")
        if self.min_gain < 0:
            raise UsageError("--min-gain must be >= 0 (a fraction: 0.05 is 5%)")

    @property
    def model_dir(self) -> Path:
        return self.repo / self.model

    @property
    def reports(self) -> Path:
        # `tune/` is not a number, so Triton never takes it for a version folder.
        return self.report_dir or self.model_dir / REPORT_FOLDER

    @property
    def warmup_seconds(self) -> float:
        # Enough to fill the batcher and the client's connection, short next to the window.
        return min(0.5, self.measure_seconds / 4)


def parse_concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise UsageError(f"--concurrency {text!r} is not a list of integers", hint="e.g. 1,16,64") from exc
    return levels


def load_config(request: TuneRequest) -> ModelConfig:
    """The model's current config, or the refusal: unknown model, unreadable config, ensemble."""
    if not request.repo.is_dir():
        raise RepositoryError(f"model repository {request.repo} does not exist")
    path = request.model_dir / "config.pbtxt"
    if not path.is_file():
        known = sorted(p.name for p in request.repo.iterdir() if (p / "config.pbtxt").is_file())
        raise RepositoryError(
            f"unknown model '{request.model}' in {request.repo}",
            hint="models there: " + (", ".join(known) or "none"),
        )
    try:
        config = parse_pbtxt(path.read_text())
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        raise RepositoryError(f"{path}: not a valid config.pbtxt: {exc}") from exc
    if config.platform == "ensemble":
        steps = sorted({s.model_name for s in config.ensemble_scheduling.step})
        raise UsageError(
            f"'{request.model}' is an ensemble: it has no batcher or instances of its own",
            hint="tune its composing model(s) instead: " + ", ".join(steps),
        )
    return config


@dataclass
class TuneOutcome:
    results: list[CandidateResult]
    winner: CandidateResult | None
    data: dict[str, Any]
    plot: Path
    report: Path
    metadata: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def tune(request: TuneRequest, on_candidate: Callable[[CandidateResult], None] | None = None) -> TuneOutcome:
    """Search, write the report and plot, then (unless a dry run) the winner's config and the
    metadata record. Raises TuneError, after the report is written, when no candidate meets
    the budget."""
    from builder.tune.loadgen import request_inputs
    from builder.tune.session import TuneSession

    config = load_config(request)
    inputs = request_inputs(config, request.model_dir)
    session = TuneSession(
        request.model_dir,
        config,
        inputs,
        concurrency=request.concurrency,
        measure_s=request.measure_seconds,
        warmup_s=request.warmup_seconds,
        budget_ms=request.latency_budget_ms,
    )

    def measure(index: int, knobs: Any) -> CandidateResult:
        result = session.run(index, knobs)
        if on_candidate is not None:
            on_candidate(result)
        return result

    search = QuickSearch(knobs_of(config), tunable(config), request.max_candidates)
    with session:
        results = search.run(measure)
    winner = pick_winner(results, request.min_gain)
    changed = winner is not None and winner.knobs != knobs_of(config)
    apply_it = changed and not request.dry_run
    data = report.report_data(
        request.model,
        request.latency_budget_ms,
        request.concurrency,
        results,
        winner,
        apply_it,
        request.min_gain,
    )
    request.reports.mkdir(parents=True, exist_ok=True)
    plot = request.reports / report.PLOT_FILE
    report.write_plot(plot, results, request.latency_budget_ms, f"{request.model}: throughput vs p99")
    report_path = report.write_report(request.reports, data)
    outcome = TuneOutcome(results, winner, data, plot, report_path)
    if winner is None:
        raise TuneError(
            f"no candidate of {len(results)} kept p99 within {request.latency_budget_ms:g} ms "
            "at any concurrency; config unchanged",
            hint=f"raise --latency-budget-ms or lower --concurrency; measurements in {report_path}",
        )
    if not request.dry_run:
        if apply_it:
            assert winner is not None
            report.rewrite_config(request.model_dir / "config.pbtxt", winner.knobs)
        outcome.metadata = report.record_in_metadata(request.model_dir, data)
    return outcome
