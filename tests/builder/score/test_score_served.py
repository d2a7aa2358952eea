"""``builder score`` against the served stack: the batch's answers equal the real Triton's for the
same inputs and the real gateway's for the same entities at the same time, for the demo's typed
Pipeline (string columns, NaN standing in for a missing user), an XGBoost booster (the matrix
layout) and a multi-class Pipeline with string classes; the output names the model, version and
export identity the repository records. A value changed in the online store fails the job with
the row named, and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.score.errors import SkewError
from builder.score.run import ScoreRequest, score
from tests.builder.score.helpers import (
    BOOSTER,
    MULTICLASS,
    PIPELINE,
    TIERS,
    ScoringStack,
    entity_rows,
    metadata,
)

pytestmark = pytest.mark.integration


def _request(stack: ScoringStack, table: Path, out: Path, model: str, **checks: Any) -> ScoreRequest:
    return ScoreRequest(
        entities=str(table),
        repo=stack.model_repo,
        model=model,
        feature_repo=stack.feature_repo,
        output=str(out),
        check_rows=48,
        **checks,
    )


@pytest.mark.parametrize("model", [PIPELINE, BOOSTER, MULTICLASS])
def test_batch_answers_equal_triton_s_and_the_gateway_s(
    scoring_stack: ScoringStack, spark: Any, tmp_path: Path, model: str
) -> None:
    rows = entity_rows(scoring_stack.store, 120, pd.Timestamp.now(tz="UTC"), seed=len(model))
    rows.to_parquet(tmp_path / "entities.parquet")
    out = tmp_path / "scores"
    triton = f"http://{scoring_stack.triton.http_url}"
    request = _request(
        scoring_stack,
        tmp_path / "entities.parquet",
        out,
        model,
        check_triton=triton,
        check_gateway=scoring_stack.gateway.url,
    )
    result = score(request)

    assert result.checks["triton"]["mismatches"] == 0 and result.checks["triton"]["rows"] >= 20
    assert result.checks["gateway"]["mismatches"] == 0 and result.checks["gateway"]["rows"] >= 20
    written = pd.read_parquet(out).sort_values("row").reset_index(drop=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entities.parquet", "scores"]  # no temp left
    assert written["row"].tolist() == list(range(120)) and result.rows == result.scored == 120
    recorded = metadata(scoring_stack.model_repo, model, result.version)
    assert set(written["model"]) == {model} and set(written["version"]) == {result.version}
    assert set(written["export_identity"]) == {recorded["identity"]}
    assert (written["user_id"] == rows["user_id"]).all() and (written["amount"] == rows["amount"]).all()
    unknown = written["user_id"] >= 10**6
    assert unknown.any() and written.loc[unknown, "defaults_used"].all()
    assert all("user_age_days" in m for m in written.loc[unknown, "missing_features"])
    if model == PIPELINE:  # the run's decision threshold decides the label
        assert (written["label"] == (written["score"] >= 0.35).astype(int)).all()
        assert np.allclose([p[1] for p in written["probabilities"]], written["score"])
    if model == MULTICLASS:  # string classes, in serving.classes order
        classes = recorded["serving"]["classes"]
        assert sorted(classes) == sorted(TIERS) and set(written["label"]) <= set(TIERS)
        best = [classes[int(np.argmax(p))] for p in written["probabilities"]]
        assert written["label"].tolist() == best


def test_a_value_changed_online_fails_the_job_naming_the_row(
    scoring_stack: ScoringStack, spark: Any, tmp_path: Path
) -> None:
    store = scoring_stack.store
    rows = entity_rows(store, 30, pd.Timestamp.now(tz="UTC"), seed=5)
    rows = rows[rows["user_id"] < 10**6].reset_index(drop=True)
    user = int(rows["user_id"][0])
    rows.to_parquet(tmp_path / "entities.parquet")
    names = ["avg_amount_30d", "user_age_days", "tx_last_24h"]
    current = store.get_online_features(
        features=[f"user_stats:{n}" for n in names], entity_rows=[{"user_id": user}]
    ).to_dict()
    changed = pd.DataFrame(
        {
            "user_id": [user],
            **{n: [current[n][0] + (5000.0 if n == "avg_amount_30d" else 0)] for n in names},
            "event_timestamp": [pd.Timestamp.now(tz="UTC")],
            "created_timestamp": [pd.Timestamp.now(tz="UTC")],
        }
    )
    request = _request(
        scoring_stack,
        tmp_path / "entities.parquet",
        tmp_path / "scores",
        MULTICLASS,  # linear in every feature: a changed value changes its probabilities
        check_gateway=scoring_stack.gateway.url,
    )
    try:
        store.write_to_online_store("user_stats", changed)
        with pytest.raises(SkewError) as caught:
            score(request)
    finally:
        changed["avg_amount_30d"] = [current["avg_amount_30d"][0]]
        store.write_to_online_store("user_stats", changed)
    assert "differ between the batch and gateway" in caught.value.message
    assert caught.value.problems and all(f"user_id={user}" in p for p in caught.value.problems)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entities.parquet"]  # nothing written
