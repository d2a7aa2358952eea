"""builder tune end to end: a real export, the real CLI in a subprocess, a real Triton."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.export import ExportRequest, export_model
from builder.repository.triton_config import parse_pbtxt
from builder.tune.space import Knobs, knobs_of
from support import models

pytestmark = pytest.mark.integration

# Two candidates of ~1 s per level keep each run to seconds; the budget is loose so the
# winner is decided by throughput, not by this shared machine's latency noise.
QUICK = ["--max-candidates", "2", "--measure-seconds", "1", "--concurrency", "1,4"]


@pytest.fixture(scope="module")
def exported(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("tune") / "model_repo"
    models.sklearn_classifier("tune-clf")
    export_model(ExportRequest("models:/tune-clf@champion", repo))
    return repo


@pytest.fixture
def repo(exported: Path, tmp_path: Path, triton_runtime: object) -> Path:
    copy = tmp_path / "model_repo"
    shutil.copytree(exported, copy)
    return copy


def builder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=240
    )


def test_tune_writes_the_winner_and_records_it(repo: Path) -> None:
    model_dir = repo / "tune-clf"
    before = (model_dir / "config.pbtxt").read_text()
    # --min-gain 0: any better candidate is written, so the rewrite path runs more often.
    args = ["--latency-budget-ms", "1000", *QUICK, "--min-gain", "0", "--json"]
    cli = builder("tune", "tune-clf", "--repo", str(repo), *args)
    assert cli.returncode == 0, cli.stderr
    result = json.loads(cli.stdout)
    assert len(result["candidates"]) == 2
    assert all(c["error"] is None and len(c["measurements"]) == 2 for c in result["candidates"])
    winner = Knobs.from_dict(result["winner"]["knobs"])
    config = parse_pbtxt((model_dir / "config.pbtxt").read_text())
    assert knobs_of(config) == winner
    assert (config.max_batch_size == 64) == (before == (model_dir / "config.pbtxt").read_text())
    metadata = json.loads((model_dir / "1" / "metadata.json").read_text())
    assert metadata["tune"]["winner"] == result["winner"]
    assert "source" in metadata  # the export's facts are kept
    assert (model_dir / "tune" / "tune.png").stat().st_size > 0
    validate = builder("validate", "--repo", str(repo))
    assert validate.returncode == 0, validate.stderr


def test_dry_run_leaves_the_config_byte_identical(repo: Path) -> None:
    model_dir = repo / "tune-clf"
    before = (model_dir / "config.pbtxt").read_bytes()
    meta_before = (model_dir / "1" / "metadata.json").read_bytes()
    cli = builder("tune", "tune-clf", "--repo", str(repo), "--latency-budget-ms", "1000", *QUICK, "--dry-run")
    assert cli.returncode == 0, cli.stderr
    assert "winner: candidate" in cli.stderr
    assert (model_dir / "config.pbtxt").read_bytes() == before
    assert (model_dir / "1" / "metadata.json").read_bytes() == meta_before
    assert (model_dir / "tune" / "tune.png").is_file()


def test_a_budget_no_candidate_meets_fails_and_keeps_the_config(repo: Path, tmp_path: Path) -> None:
    model_dir = repo / "tune-clf"
    before = (model_dir / "config.pbtxt").read_bytes()
    reports = tmp_path / "reports"
    cli = builder(
        "tune",
        "tune-clf",
        "--repo",
        str(repo),
        "--latency-budget-ms",
        "0.000001",
        "--max-candidates",
        "1",
        "--measure-seconds",
        "0.5",
        "--concurrency",
        "1",
        "--report-dir",
        str(reports),
    )
    assert cli.returncode == 13
    assert "error: no candidate" in cli.stderr and "hint:" in cli.stderr
    assert (model_dir / "config.pbtxt").read_bytes() == before
    assert (reports / "tune.png").is_file() and (reports / "tune.json").is_file()


def test_an_unknown_model_is_refused(repo: Path) -> None:
    cli = builder("tune", "nope", "--repo", str(repo), "--latency-budget-ms", "10")
    assert cli.returncode == 6 and "error: unknown model 'nope'" in cli.stderr
