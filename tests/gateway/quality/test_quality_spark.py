"""``gateway quality report``'s Spark engine (gateway/spark/quality.py) gives the pandas engine's
report on the same rows: a three-day payload log written with the gateway's own layout (two
versions, a challenger, Hive date partitions) joined with labels by prediction id and by entity
and time: the same join counts (accepted, duplicate, conflicting, unknown, invalid), the same
versions and rows, every metric within 1e-9, the same notes and the same HTML; and through
``gateway quality report --engine spark``, the same JSON and HTML file as ``--engine pandas``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.quality.html import render
from gateway.quality.offline import build, read_labels
from gateway.spark.quality import build_spark
from tests.gateway.quality.helpers import MODEL, BigLog, labels_by_entity, labels_by_id, write_log

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> BigLog:
    return write_log(tmp_path_factory.mktemp("spark-quality"))


@pytest.mark.parametrize("join", ["prediction id", "entity and time"])
def test_the_spark_engine_gives_the_pandas_engine_s_report(
    logged: BigLog, spark: Any, tmp_path: Path, join: str
) -> None:
    write = labels_by_id if join == "prediction id" else labels_by_entity
    labels = read_labels(write(logged, tmp_path / "labels.parquet"))
    pandas = build(str(logged.log), labels, logged.repo, MODEL)
    ours = build_spark(spark, str(logged.log), labels, logged.repo, MODEL)

    theirs, mine = pandas.report.to_dict(), ours.report.to_dict()
    assert mine["feedback"] == theirs["feedback"]
    counts = theirs["feedback"]
    assert counts["accepted"] > 100 and counts["unknown"] >= 1
    if join == "prediction id":
        assert counts["duplicate"] == counts["conflicting"] == counts["invalid"] == 1
    assert [(v["model"], v["version"], v["role"], v["rows"]) for v in mine["versions"]] == [
        (v["model"], v["version"], v["role"], v["rows"]) for v in theirs["versions"]
    ]
    assert len(mine["versions"]) == 3  # versions 2 and 1, and the challenger
    for got, want in zip(mine["versions"], theirs["versions"], strict=True):
        assert got["metrics"].keys() == want["metrics"].keys()
        for name, value in want["metrics"].items():
            if value is None:
                assert got["metrics"][name] is None, name
            else:
                assert math.isclose(got["metrics"][name], value, rel_tol=1e-9, abs_tol=1e-9), name
    assert (mine["window"], mine["window_seconds"]) == (theirs["window"], theirs["window_seconds"])
    assert (ours.log_rows, ours.since, ours.until) == (pandas.log_rows, pandas.since, pandas.until)
    assert (ours.notes, ours.examples) == (pandas.notes, pandas.examples)
    assert render(ours) == render(pandas)


def test_the_command_with_engine_spark_writes_the_pandas_engine_s_evidence(
    logged: BigLog, spark: Any, tmp_path: Path
) -> None:
    labels = labels_by_id(logged, tmp_path / "labels.parquet")
    base = ["quality", "report", "--log", str(logged.log), "--labels", str(labels),
            "--repo", str(logged.repo), "--model", MODEL, "--json"]  # fmt: skip
    runner = CliRunner()
    pandas = runner.invoke(app, [*base, "--out", str(tmp_path / "pandas.html")])
    ours = runner.invoke(app, [*base, "--out", str(tmp_path / "spark.html"), "--engine", "spark"])
    assert pandas.exit_code == 0 and ours.exit_code == 0, ours.output
    mine, theirs = json.loads(ours.stdout), json.loads(pandas.stdout)
    assert mine["feedback"] == theirs["feedback"] and mine["window"] == theirs["window"]
    assert [v["rows"] for v in mine["versions"]] == [v["rows"] for v in theirs["versions"]]
    assert (tmp_path / "spark.html").read_text() == (tmp_path / "pandas.html").read_text()


def test_engine_spark_refuses_feature_view_labels_in_one_line(logged: BigLog, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["quality", "report", "--log", str(logged.log), "--labels-feature-view", "chargebacks",
         "--feature-repo", str(tmp_path), "--repo", str(logged.repo), "--model", MODEL, "--engine", "spark"],
    )  # fmt: skip
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert [ln.split(":")[0] for ln in lines] == ["error", "hint"], result.output
    assert "pandas engine" in lines[0] and not list(tmp_path.iterdir())
