"""``gateway drift report``: a payload log written by the real writer, a model repository's
metadata.json with a reference, and the report's counts against an independent binning."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from gateway.payload_log import ParquetSink
from gateway.payload_log.report import build_report
from tests.gateway.payload_log.helpers import SPEC, observation, opened

EDGES = {"tx_last_24h": [2.0, 4.0, 6.0], "avg_amount_30d": [40.0, 50.0, 60.0], "amount": [100.0, 500.0]}
CATEGORIES = {"merchant_category": ["travel", "grocery"], "channel": ["web", "pos"]}


def reference() -> dict:
    features = []
    for column in SPEC.columns:
        if column.name in EDGES:
            edges = EDGES[column.name]
            features.append({"name": column.name, "kind": "numeric", "edges": edges,
                             "counts": [10] * (len(edges) + 1), "nulls": 1})  # fmt: skip
        else:
            cats = CATEGORIES[column.name]
            features.append({"name": column.name, "kind": "categorical", "categories": cats,
                             "counts": [20, 10, 5], "nulls": 0})  # fmt: skip
    score = {"name": "score", "kind": "numeric", "edges": [0.25, 0.5, 0.75], "counts": [25] * 4, "nulls": 0}
    return {"format": 1, "rows": 41, "source": "test", "features": features, "prediction": score}


@pytest.fixture()
def logged(tmp_path: Path) -> tuple[Path, Path, list]:
    log_dir, repo = tmp_path / "log", tmp_path / "repo"
    batches = [observation(40, seed=s, at=time.time() - 5) for s in range(3)]
    log = opened(ParquetSink(str(log_dir)))
    for batch in batches:
        log.observe(batch)
    log.observe(observation(10, seed=9, at=time.time() - 3 * 86400))  # outside any recent window
    log.close()
    version = repo / SPEC.name / "3"
    version.mkdir(parents=True)
    serving = {"layout": "columns", "columns": [{"name": c.name, "dtype": c.dtype} for c in SPEC.columns],
               "kind": "binary", "classes": [0, 1]}  # fmt: skip
    (version / "metadata.json").write_text(
        json.dumps({"serving": serving, "drift": {"reference": reference()}})
    )
    return log_dir, repo, batches


def independent_counts(name: str, batches: list) -> np.ndarray:
    """The window's rows per bin (null last), by docs/drift.md's rules, from what was observed."""
    if name == "score":
        values = np.concatenate([[p.score for p in b.predictions] for b in batches])
        return np.bincount(np.searchsorted([0.25, 0.5, 0.75], values, side="right"), minlength=5)
    values = np.concatenate([b.inputs[name].reshape(-1) for b in batches])
    if name in EDGES:
        x = values.astype(np.float64)
        bins = np.where(np.isnan(x), len(EDGES[name]) + 1, np.searchsorted(EDGES[name], x, side="right"))
        return np.bincount(bins, minlength=len(EDGES[name]) + 2)
    cats = CATEGORIES[name]
    bins = [3 if v == "" else cats.index(v) if v in cats else 2 for v in values]
    return np.bincount(bins, minlength=4)


def test_the_report_counts_each_feature_in_its_reference_bins(logged: tuple[Path, Path, list]) -> None:
    log_dir, repo, batches = logged
    now = dt.datetime.now(dt.UTC)
    report = build_report(str(log_dir), None, now - dt.timedelta(hours=1), now, repo)
    (version,) = report.versions
    assert version.version == "3" and version.rows == 120 and version.reference is not None
    assert [f.name for f in version.features] == [*SPEC.feature_names, "score"]
    for feature in version.features:
        expected = independent_counts(feature.name, batches)
        assert feature.counts is not None and feature.counts.tolist() == expected.tolist(), feature.name
        assert feature.drift is not None
        ref = ({f["name"]: f for f in reference()["features"]} | {"score": reference()["prediction"]})[
            feature.name
        ]
        # PSI over the present values' bins (the null bin is judged by its rate apart)
        counts = np.array(ref["counts"], dtype=float)
        present = expected[:-1].astype(float)
        p = np.maximum(counts / counts.sum(), 1e-4)
        q = np.maximum(present / present.sum(), 1e-4)
        assert feature.drift.psi == pytest.approx(float(np.sum((q - p) * np.log(q / p))))


def test_the_command_writes_a_self_contained_html_report(
    logged: tuple[Path, Path, list], tmp_path: Path
) -> None:
    log_dir, repo, _ = logged
    out = tmp_path / "report.html"
    args = ["drift", "report", "--log", str(log_dir), "--repo", str(repo), "--since", "1h", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "120 rows" in result.output
    html = out.read_text()
    for name in (*SPEC.feature_names, "score"):
        assert f"<h3>{name}</h3><svg" in html
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_a_version_without_reference_is_reported_without_comparison(
    logged: tuple[Path, Path, list], tmp_path: Path
) -> None:
    log_dir, _, _ = logged
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["drift", "report", "--log", str(log_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "no reference for version(s) 3" in result.output
    html = out.read_text()
    assert "No reference to compare with" in html and "user_stats__avg_amount_30d" in html


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--since", "2h"], 0, "wrote"),
        (["--since", "yesterday"], 2, "neither a span"),
        (["--since", "2999-01-01"], 1, "no rows of 'fraud-detector' logged"),
        (["--model", "other"], 1, "no payload log of model 'other'"),
        (["--log", "/nonexistent/log"], 1, "no payload log at /nonexistent/log"),
        (["--repo", "/nonexistent/repo"], 2, "is not a folder"),
    ],
)
def test_exit_codes_and_one_line_errors(
    logged: tuple[Path, Path, list], tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    log_dir, repo, _ = logged
    base = ["drift", "report", "--log", str(log_dir), "--repo", str(repo), "--out", str(tmp_path / "r.html")]
    result = CliRunner().invoke(app, [*base, *args])
    assert result.exit_code == code, result.output
    assert message in result.output and "Traceback" not in result.output


def test_an_ensembles_reference_is_read_against_the_bare_models_columns(
    logged: tuple[Path, Path, list],
) -> None:
    """As `builder export --ensemble` writes it: the ensemble's metadata.json carries the drift
    reference but not the ``serving`` facts, which are the bare model's of the same export."""
    log_dir, repo, _ = logged
    bare = repo / SPEC.name / "3" / "metadata.json"
    ensemble = repo / f"{SPEC.name}_ensemble" / "3"
    ensemble.mkdir(parents=True)
    (ensemble / "metadata.json").write_text(json.dumps({"drift": {"reference": reference()}}))
    bare.write_text(json.dumps({**json.loads(bare.read_text()), "drift": {"reason": "not this one"}}))
    now = dt.datetime.now(dt.UTC)
    (version,) = build_report(str(log_dir), None, now - dt.timedelta(hours=1), now, repo).versions
    assert version.reference is not None, version.why_not
    assert [f.name for f in version.features] == [*SPEC.feature_names, "score"]
