"""builder tune without servers: the search space, the winner, the config rewrite, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from builder.errors import RepositoryError, UsageError
from builder.repository.triton_config import ModelConfig, parse_pbtxt, to_pbtxt
from builder.tune.report import record_in_metadata, rewrite_config, write_plot
from builder.tune.run import TuneRequest, load_config, parse_concurrency
from builder.tune.search import CandidateResult, Measurement, QuickSearch, failed, pick_winner, plan, scored
from builder.tune.space import KNOBS, Knobs, apply, knobs_of, neighbours, tunable

CONFIG = {
    "name": "clf",
    "backend": "onnxruntime",
    "max_batch_size": 64,
    "version_policy": {"latest": {"num_versions": 1}},
    "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [5]}],
    "output": [{"name": "label", "data_type": "TYPE_INT64", "dims": [1]}],
    "instance_group": [{"count": 1}],
    "dynamic_batching": {"max_queue_delay_microseconds": 1000},
    "parameters": {"serving.layout": {"string_value": "matrix"}},
    "model_warmup": [
        {
            "name": "input_example",
            "batch_size": 1,
            "inputs": {"input": {"data_type": "TYPE_FP32", "dims": [5], "input_data_file": "input"}},
        }
    ],
}


def config(**overrides: object) -> ModelConfig:
    return json_format.ParseDict({**CONFIG, **overrides}, ModelConfig())


def m(concurrency: int, throughput: float, p99: float) -> Measurement:
    return Measurement(concurrency, throughput, p50_ms=p99 / 2, p99_ms=p99, requests=int(throughput))


BASE = Knobs(max_batch_size=64, max_queue_delay_us=1000, instances=1)


# ---- the search space ------------------------------------------------------------------------
def test_knobs_read_from_the_config() -> None:
    assert knobs_of(config()) == BASE
    assert tunable(config()) == KNOBS


def test_neighbours_move_one_knob_up_then_down() -> None:
    assert neighbours(BASE, "max_batch_size") == [Knobs(128, 1000, 1), Knobs(32, 1000, 1)]
    assert neighbours(BASE, "max_queue_delay_us") == [Knobs(64, 2000, 1), Knobs(64, 500, 1)]
    assert neighbours(BASE, "instances") == [Knobs(64, 1000, 2)]  # never below one instance
    assert neighbours(BASE, "preferred_batch_sizes") == [Knobs(64, 1000, 1, (64,))]


def test_queue_delay_never_goes_below_zero() -> None:
    assert neighbours(Knobs(8, 0, 1), "max_queue_delay_us") == [Knobs(8, 100, 1)]
    assert neighbours(Knobs(8, 150, 1), "max_queue_delay_us") == [Knobs(8, 300, 1), Knobs(8, 0, 1)]
    for knobs in (Knobs(8, 0, 1), Knobs(8, 1, 1), Knobs(8, 100, 1)):
        assert all(n.max_queue_delay_us >= 0 for n in neighbours(knobs, "max_queue_delay_us"))


def test_preferred_sizes_stay_within_max_batch_size() -> None:
    start = Knobs(64, 1000, 1, (16, 64))
    down = neighbours(start, "max_batch_size")[1]
    assert down == Knobs(32, 1000, 1, (16,))
    for knobs in (start, Knobs(1, 0, 1), Knobs(1024, 10, 8, (1024,))):
        for knob in KNOBS:
            for n in neighbours(knobs, knob):
                assert all(1 <= b <= n.max_batch_size for b in n.preferred_batch_sizes)
                assert n.max_batch_size >= 1 and n.instances >= 1


def test_unbatched_model_tunes_instances_only() -> None:
    unbatched = config(max_batch_size=0)
    unbatched.ClearField("dynamic_batching")
    assert tunable(unbatched) == ("instances",)


def test_plan_is_bounded_by_max_candidates() -> None:
    assert plan(BASE, KNOBS, 2) == [BASE, Knobs(128, 1000, 1)]
    full = plan(BASE, KNOBS, 100)
    assert len(full) == len(set(full)) == 7


def test_quick_search_climbs_from_the_best_so_far() -> None:
    # Doubling max_batch_size helps; the next knob's neighbours are taken from that point.
    def measure(index: int, knobs: Knobs) -> CandidateResult:
        return scored(index, knobs, [m(16, 1000.0 * knobs.max_batch_size / 64, 5.0)], budget_ms=10)

    results = QuickSearch(BASE, KNOBS, max_candidates=4).run(measure)
    # mbs 32 (worse) is measured, then the delay steps start from mbs 128, the best so far.
    assert [r.knobs for r in results] == [BASE, Knobs(128, 1000, 1), Knobs(32, 1000, 1), Knobs(128, 2000, 1)]


# ---- scoring and the winner ------------------------------------------------------------------
def test_score_sums_throughput_of_levels_within_budget() -> None:
    r = scored(0, BASE, [m(1, 500, 2.0), m(16, 4000, 8.0), m(64, 7000, 16.0)], budget_ms=10)
    assert r.within_budget and r.score == 4500


def test_winner_is_the_best_within_budget() -> None:
    results = [
        scored(0, BASE, [m(1, 500, 2.0), m(16, 4000, 8.0)], budget_ms=10),
        scored(1, Knobs(128, 1000, 1), [m(1, 600, 2.0), m(16, 9000, 12.0)], budget_ms=10),  # 600
        scored(2, Knobs(64, 2000, 1), [m(1, 450, 3.0), m(16, 5000, 9.0)], budget_ms=10),  # 5450
        failed(3, Knobs(64, 1000, 2), "Triton did not load it"),
    ]
    winner = pick_winner(results)
    assert winner is not None and winner.index == 2


def test_ties_keep_the_current_config() -> None:
    same = [m(1, 500, 2.0)]
    results = [scored(0, BASE, same, 10), scored(1, Knobs(128, 1000, 1), same, 10)]
    winner = pick_winner(results)
    assert winner is not None and winner.index == 0


def test_a_winner_must_beat_the_current_config_by_min_gain() -> None:
    results = [
        scored(0, BASE, [m(16, 4000, 8.0)], budget_ms=10),
        scored(1, Knobs(128, 1000, 1), [m(16, 4100, 8.0)], budget_ms=10),  # +2.5%: noise
    ]
    assert pick_winner(results, min_gain=0.05) is results[0]
    assert pick_winner(results, min_gain=0.0) is results[1]
    # A current config over the budget has no claim to stay.
    results[0] = scored(0, BASE, [m(16, 4000, 12.0)], budget_ms=10)
    assert pick_winner(results, min_gain=0.05) is results[1]


def test_no_winner_when_every_candidate_misses_the_budget() -> None:
    results = [scored(0, BASE, [m(1, 500, 20.0)], 10), failed(1, Knobs(128, 1000, 1), "boom")]
    assert pick_winner(results) is None


# ---- writing the result ----------------------------------------------------------------------
def test_rewrite_changes_only_the_tuned_fields(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    original = config()
    path.write_text(to_pbtxt(original))
    winner = Knobs(32, 250, 2, (16, 32))
    rewrite_config(path, winner)
    after = parse_pbtxt(path.read_text())
    assert knobs_of(after) == winner
    # Put the tuned fields back: what is left must be the original, field for field.
    restored = apply(after, knobs_of(original))
    assert restored == original
    assert (
        json_format.MessageToDict(after)["modelWarmup"] == json_format.MessageToDict(original)["modelWarmup"]
    )
    assert not list(tmp_path.glob(".config.pbtxt.*"))  # no temp file left behind


def test_metadata_gets_a_tune_key_in_the_latest_version(tmp_path: Path) -> None:
    for v in (1, 2):
        (tmp_path / str(v)).mkdir()
        (tmp_path / str(v) / "metadata.json").write_text('{"builder_version": "x"}')
    path = record_in_metadata(tmp_path, {"winner": None})
    assert path == tmp_path / "2" / "metadata.json"
    assert json.loads(path.read_text()) == {"builder_version": "x", "tune": {"winner": None}}
    assert "tune" not in json.loads((tmp_path / "1" / "metadata.json").read_text())


def test_plot_is_written(tmp_path: Path) -> None:
    results = [scored(0, BASE, [m(1, 500, 2.0), m(16, 4000, 8.0)], 10), failed(1, BASE, "x")]
    write_plot(tmp_path / "tune.png", results, 10, "clf")
    assert (tmp_path / "tune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- refusals --------------------------------------------------------------------------------
def _repo(tmp_path: Path, name: str, cfg: ModelConfig) -> Path:
    (tmp_path / name).mkdir(parents=True)
    (tmp_path / name / "config.pbtxt").write_text(to_pbtxt(cfg))
    return tmp_path


def test_unknown_model_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "clf", config())
    with pytest.raises(RepositoryError, match="unknown model 'nope'") as exc:
        load_config(TuneRequest("nope", repo, 10))
    assert exc.value.hint is not None and "clf" in exc.value.hint


def test_ensemble_is_refused_naming_its_steps(tmp_path: Path) -> None:
    ens = json_format.ParseDict(
        {
            "name": "ens",
            "platform": "ensemble",
            "max_batch_size": 64,
            "ensemble_scheduling": {"step": [{"model_name": "clf", "model_version": -1}]},
        },
        ModelConfig(),
    )
    repo = _repo(tmp_path, "ens", ens)
    with pytest.raises(UsageError, match="ensemble") as exc:
        load_config(TuneRequest("ens", repo, 10))
    assert exc.value.hint is not None and "clf" in exc.value.hint


@pytest.mark.parametrize(
    "kwargs",
    [
        {"latency_budget_ms": 0},
        {"concurrency": ()},
        {"concurrency": (0,)},
        {"max_candidates": 0},
        {"measure_seconds": 0},
        {"min_gain": -0.1},
    ],
)
def test_bad_options_are_usage_errors(tmp_path: Path, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"model": "clf", "repo": tmp_path, "latency_budget_ms": 10, **kwargs}
    with pytest.raises(UsageError):
        TuneRequest(**args)  # type: ignore[arg-type]


def test_concurrency_parsing() -> None:
    assert parse_concurrency("1,16,64") == (1, 16, 64)
    with pytest.raises(UsageError):
        parse_concurrency("1,many")


def test_knobs_round_trip_through_the_report_json() -> None:
    knobs = Knobs(32, 250, 2, (16, 32))
    assert Knobs.from_dict(json.loads(json.dumps(knobs.to_dict()))) == knobs


def test_export_flags_reproduce_the_winner() -> None:
    flags = Knobs(32, 250, 2, (16, 32)).export_flags()
    assert flags == [
        "--max-batch-size=32",
        "--max-queue-delay-us=250",
        "--instances=2",
        "--preferred-batch-size=16",
        "--preferred-batch-size=32",
    ]


def test_cli_refuses_an_ensemble_with_error_and_hint(tmp_path: Path) -> None:
    import subprocess
    import sys

    ens = json_format.ParseDict(
        {"name": "ens", "platform": "ensemble", "ensemble_scheduling": {"step": [{"model_name": "clf"}]}},
        ModelConfig(),
    )
    repo = _repo(tmp_path, "ens", ens)
    args = ["tune", "ens", "--repo", str(repo), "--latency-budget-ms", "10", "--json"]
    cli = subprocess.run([sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=60)
    assert cli.returncode == UsageError.exit_code
    assert "error:" in cli.stderr and "hint:" in cli.stderr and "clf" in cli.stderr

    assert json.loads(cli.stdout)["kind"] == "UsageError"
