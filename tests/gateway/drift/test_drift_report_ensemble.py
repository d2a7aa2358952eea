"""``gateway drift report`` over a model exported WITH ``--ensemble`` (fused, as the demo exports
it): the gateway calls ``NAME_ensemble``, whose metadata.json holds the drift reference but no
``serving`` facts; the report takes them from the bare model's metadata of the same export,
else from the ensemble's config parameters, and shows a shifted column drifting and the
unshifted ones not.

No server: the export is the real builder's (in-process, the session's SQLite MLflow
registry), the payload log is written in the gateway's layout from rows drawn like the
reference rows (one column shifted).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

MODEL = "dr-ensemble"
VIEW = "shop_stats"  # the feature view of the online columns, as the log names them
NUMERIC, STRINGS = ["amount", "merchant_risk"], ["channel", "merchant_category"]
ROWS = 800


def training_rows(seed: int, rows: int = ROWS) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 0.6, rows),
            "merchant_risk": rng.uniform(0, 1, rows),
            "channel": rng.choice(["web", "app", "pos"], rows).astype(object),
            "merchant_category": rng.choice(["grocery", "travel", "gaming"], rows).astype(object),
        }
    )


@pytest.fixture(scope="module")
def exported(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo's shape: a Pipeline over numeric and string columns, a decision threshold, its
    training rows as the drift reference, exported with ``--ensemble --ensemble-mode fused``."""
    from mlflow import MlflowClient

    from builder.export import ExportRequest, export_model
    from support.models import register_fitted
    from support.train import build_pipeline

    X = training_rows(0)
    y = (X.merchant_risk + 0.3 * (X.channel == "web") > 0.7).astype(int)
    model = build_pipeline(NUMERIC, STRINGS, n_estimators=5).fit(X, y)
    tags = {
        "feast.feature_service": "shop_v1",
        "feast.entity_keys": "customer_id",
        "feast.request_fields": "amount,channel",
    }
    version = register_fitted(MODEL, model, X, tags=tags, reference=True)
    client = MlflowClient()
    run_id = client.get_model_version(MODEL, str(version)).run_id
    assert run_id is not None
    client.log_param(run_id, "decision_threshold", 0.4)
    repo = tmp_path_factory.mktemp("drift-ensemble") / "model_repo"
    export_model(ExportRequest(f"models:/{MODEL}@champion", repo, ensemble=True, ensemble_mode="fused"))
    return repo, str(version)


def write_log(root: Path, version: str, shifted: str | None) -> Path:
    """Rows in the payload log's layout (gateway/payload_log/layout.py): request fields under
    their names, online features as ``{view}__{feature}``, the prediction, ``__log_timestamp``,
    in the ``{model}/log_date=...`` folder the gateway writes."""
    rows = training_rows(1)
    if shifted:
        rows[shifted] = rows[shifted] * 3
    now = dt.datetime.now(dt.UTC)
    frame = pd.DataFrame(
        {
            "customer_id": [f"C-{i}" for i in range(ROWS)],
            "amount": rows.amount.astype("float32"),
            "channel": rows.channel.astype(str),
            f"{VIEW}__merchant_risk": rows.merchant_risk.astype("float32"),
            f"{VIEW}__merchant_category": rows.merchant_category.astype(str),
            "__model": MODEL,
            "__model_version": version,
            "__score": np.random.default_rng(2).uniform(0, 1, ROWS).astype("float32"),
            "__log_timestamp": pd.Series([now] * ROWS, dtype="datetime64[us, UTC]"),
        }
    )
    folder = root / MODEL / f"log_date={now.date().isoformat()}"
    folder.mkdir(parents=True)
    frame.to_parquet(folder / "part-0.parquet", index=False)
    return root


def verdicts(log: Path, repo: Path) -> dict[str, str]:
    from gateway.payload_log.report import build_report

    now = dt.datetime.now(dt.UTC)
    (version,) = build_report(
        str(log), MODEL, now - dt.timedelta(hours=1), now + dt.timedelta(seconds=1), repo
    ).versions
    assert version.reference is not None, version.why_not
    return {f.name: f.drift.verdict for f in version.features if f.drift is not None}


def test_the_fused_ensembles_metadata_has_a_reference_and_no_serving_facts(exported: tuple[Path, str]):
    """What the report has to cope with, as `builder export --ensemble` writes it."""
    repo, version = exported
    ensemble = json.loads((repo / f"{MODEL}_ensemble" / version / "metadata.json").read_text())
    assert ensemble["drift"]["reference"] and "serving" not in ensemble
    assert json.loads((repo / MODEL / version / "metadata.json").read_text())["serving"]["columns"]


def test_the_report_shows_a_shifted_column_drifting_over_the_ensembles_reference(
    exported: tuple[Path, str], tmp_path: Path
):
    from typer.testing import CliRunner

    from gateway.cli import app

    repo, version = exported
    log = write_log(tmp_path / "log", version, shifted="amount")
    got = verdicts(log, repo)
    assert got["amount"] == "alert"
    assert all(got[c] == "ok" for c in ("merchant_risk", "channel", "merchant_category")), got
    out = tmp_path / "report.html"
    args = ["drift", "report", "--log", str(log), "--repo", str(repo), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "no reference" not in result.output, result.output
    html = out.read_text()
    assert "unusable" not in html and "No reference" not in html
    for name in (*NUMERIC, *STRINGS, "score"):
        assert f"<h3>{name}</h3><svg" in html, name

    calm = write_log(tmp_path / "calm", version, shifted=None)
    assert verdicts(calm, repo)["amount"] == "ok"


def test_without_the_bare_models_facts_the_ensembles_config_gives_them(
    exported: tuple[Path, str], tmp_path: Path
):
    """A repository that holds the ensemble's version without the bare model's metadata (or one
    written before metadata had ``serving``): the serving contract of the ensemble's config."""
    import shutil

    repo, version = exported
    copy = tmp_path / "model_repo"
    shutil.copytree(repo, copy)
    (copy / MODEL / version / "metadata.json").unlink()
    log = write_log(tmp_path / "log", version, shifted="merchant_risk")
    got = verdicts(log, copy)
    assert got["merchant_risk"] == "alert" and got["amount"] == "ok", got
