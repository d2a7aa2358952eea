"""``builder score``'s refusals, through its command line (in this process, on the session's
Spark): a feature service the Feast registry lacks, an entity table without timestamps, a
version the repository no longer holds, an existing output, pyspark missing. Each is one
``error:`` and one ``hint:`` line with its exit code, and nothing is written where the output
would go."""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from builder.cli.main import _register_commands, app, report_error, run_app
from builder.score.session import EXTRA, EXTRA_PACKAGES
from tests.builder.score.helpers import PIPELINE, ScoringStack, entity_rows

ROOT = Path(__file__).resolve().parents[3]


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    _register_commands()
    monkeypatch.setattr(sys, "argv", ["builder", "score", *args])
    code = run_app(app, "builder", report_error)
    return code, capsys.readouterr().err


def _one_line(err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    hints = [ln for ln in lines if ln.startswith("hint:")]
    assert len(errors) == 1 and len(hints) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in errors[0], err


def _args(stack: ScoringStack, table: Path, out: Path, repo: Path | None = None, *more: str) -> list[str]:
    return [
        str(table),
        "--repo", str(repo or stack.model_repo),
        "--model", PIPELINE,
        "--feature-repo", str(stack.feature_repo),
        "--output", str(out),
        *more,
    ]  # fmt: skip


@pytest.fixture
def table(scoring_stack: ScoringStack, tmp_path: Path) -> Path:
    path = tmp_path / "entities.parquet"
    entity_rows(scoring_stack.store, 20, pd.Timestamp.now(tz="UTC")).to_parquet(path)
    return path


def _untouched(tmp_path: Path, *kept: str) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["entities.parquet", *kept])


@pytest.mark.integration
def test_a_feature_service_the_registry_lacks(
    scoring_stack: ScoringStack,
    spark: Any,
    table: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(scoring_stack.model_repo / PIPELINE, repo / PIPELINE)
    (version,) = [p for p in (repo / PIPELINE).iterdir() if p.name.isdigit()]
    meta = json.loads((version / "metadata.json").read_text())
    meta["tags"]["feast.feature_service"] = "fraud_v9"
    (version / "metadata.json").write_text(json.dumps(meta))
    code, err = _run(monkeypatch, capsys, *_args(scoring_stack, table, tmp_path / "out", repo))
    assert code == 20
    _one_line(err, "'fraud_v9'", "fraud_v1")  # the one asked for, and what the registry has
    _untouched(tmp_path, "repo")


@pytest.mark.integration
def test_an_entity_table_without_timestamps(
    scoring_stack: ScoringStack,
    spark: Any,
    table: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    pd.read_parquet(table).drop(columns="event_timestamp").to_parquet(table)
    code, err = _run(monkeypatch, capsys, *_args(scoring_stack, table, tmp_path / "out"))
    assert code == 20
    _one_line(err, "'event_timestamp'")
    _untouched(tmp_path)


@pytest.mark.integration
def test_a_version_the_repository_no_longer_holds(
    scoring_stack: ScoringStack,
    spark: Any,
    table: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    code, err = _run(monkeypatch, capsys, *_args(scoring_stack, table, tmp_path / "out"), "--version", "7")
    assert code == 6
    _one_line(err, "no version 7")
    _untouched(tmp_path)


@pytest.mark.integration
def test_an_existing_output_is_kept(
    scoring_stack: ScoringStack,
    spark: Any,
    table: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-0.parquet").write_bytes(b"yesterday's")
    code, err = _run(monkeypatch, capsys, *_args(scoring_stack, table, tmp_path / "out"))
    assert code == 2
    _one_line(err, "already exists")
    assert (tmp_path / "out" / "part-0.parquet").read_bytes() == b"yesterday's"
    _untouched(tmp_path, "out")


@pytest.mark.integration
def test_without_pyspark_the_extra_is_named(
    scoring_stack: ScoringStack, table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # as if the spark extra were not installed
    code, err = _run(monkeypatch, capsys, *_args(scoring_stack, table, tmp_path / "out"))
    assert code == 22
    _one_line(err, f"the {EXTRA} extra")
    _untouched(tmp_path)


def test_the_refusal_names_what_pyproject_s_spark_extra_installs() -> None:
    from gateway.spark import session as gateway_spark  # --engine spark's refusal names it too

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [r.split(">")[0].split("=")[0] for r in extras[EXTRA]] == list(EXTRA_PACKAGES)
    assert (gateway_spark.EXTRA, gateway_spark.EXTRA_PACKAGES) == (EXTRA, EXTRA_PACKAGES)
