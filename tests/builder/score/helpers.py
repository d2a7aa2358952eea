"""Helpers of builder score's tests: the demo's Feast repository with three models over its
feature service (the demo's typed Pipeline, an XGBoost booster, a multi-class Pipeline with
string classes), and entity rows to score."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from serving_contract import keys

SOURCE = Path(__file__).resolve().parents[3] / "feature_repo"
PIPELINE, BOOSTER, MULTICLASS = "score-fraud", "score-booster", "score-tier"
TIERS = np.array(["low", "mid", "high"])


@dataclass
class ScoringStack:
    feature_repo: Path
    store: Any
    model_repo: Path
    triton: Any  # support.servers' TritonServer
    gateway: Any  # support.servers.Gateway
    frame: pd.DataFrame  # the demo's training frame (point-in-time features)


def copy_feature_repo(dest: Path) -> Path:
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("data", "__pycache__"))
    return dest


def _log(name: str, experiment_id: str, request_fields: list[str], log: Any) -> None:
    import mlflow
    from mlflow import MlflowClient

    from feature_repo import SERVICE
    from support.train import ENTITY_KEYS

    with mlflow.start_run(experiment_id=experiment_id):
        mlflow.set_tags(
            {
                keys.FEATURE_SERVICE: SERVICE,
                keys.ENTITY_KEYS: ",".join(ENTITY_KEYS),
                keys.REQUEST_FIELDS: ",".join(request_fields),
            }
        )
        info = log(name)
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


NUMERIC = ["amount", "hour", "user_age_days", "tx_last_24h", "avg_amount_30d", "merchant_risk",
           "merchant_fraud_rate_30d"]  # fmt: skip


def register_booster(frame: pd.DataFrame, name: str, experiment_id: str) -> None:
    """An XGBoost classifier over the numeric columns, NaN where a feature is missing (XGBoost
    reads NaN as missing): the matrix layout."""
    import mlflow
    import xgboost as xgb

    X = frame[NUMERIC].astype("float64").reset_index(drop=True)
    model = xgb.XGBClassifier(n_estimators=15, max_depth=3, tree_method="hist").fit(X, frame["is_fraud"])
    _log(
        name,
        experiment_id,
        ["amount", "hour"],
        lambda n: mlflow.xgboost.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=n,
            pip_requirements=["xgboost"],
        ),
    )


def register_multiclass(frame: pd.DataFrame, name: str, experiment_id: str) -> None:
    """A Pipeline (impute, scale, one-hot) over typed columns with three string classes."""
    import mlflow
    from sklearn.linear_model import LogisticRegression

    from support.train import REQUEST_FIELDS, build_pipeline, model_frame

    strings = ["channel", "merchant_category"]
    columns = [*REQUEST_FIELDS, "user_age_days", "tx_last_24h", "avg_amount_30d", "merchant_risk",
               "merchant_fraud_rate_30d", "merchant_category"]  # fmt: skip
    X = model_frame(frame[columns].reset_index(drop=True), strings)
    tier = TIERS[np.digitize(frame["amount"].to_numpy(), [40.0, 150.0])]
    pipeline = build_pipeline([c for c in columns if c not in strings], strings, 1)
    pipeline.steps[-1] = ("model", LogisticRegression(max_iter=300))
    pipeline.fit(X, tier)
    _log(
        name,
        experiment_id,
        REQUEST_FIELDS,
        lambda n: mlflow.sklearn.log_model(
            pipeline,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=n,
            skops_trusted_types=["numpy.dtype"],
            pip_requirements=["scikit-learn"],
        ),
    )


def entity_rows(store: Any, n: int, at: pd.Timestamp, seed: int = 0) -> pd.DataFrame:
    """``n`` entity rows stamped ``at``: known users and merchants, a few users the store does not
    know (their user features missing: NaN stands in), request fields drawn like the demo's."""
    rng = np.random.default_rng(seed)
    users = pd.read_parquet(Path(store.repo_path) / "data" / "user_stats.parquet")["user_id"].unique()
    merchants = pd.read_parquet(Path(store.repo_path) / "data" / "merchant_stats.parquet")[
        "merchant_id"
    ].unique()
    user = rng.choice(users, n)
    unknown = rng.random(n) < 0.15
    user[unknown] = 10**6 + np.arange(int(unknown.sum()))
    return pd.DataFrame(
        {
            "user_id": user.astype("int64"),
            "merchant_id": rng.choice(merchants, n).astype("int64"),
            "event_timestamp": at,
            "amount": rng.lognormal(3.5, 1.0, n).round(2),
            "hour": rng.integers(0, 24, n),
            "channel": rng.choice(["web", "app", "pos"], n),
            "row": np.arange(n),  # a column of the table's own, which the output keeps
        }
    )


def metadata(model_repo: Path, model: str, version: int) -> dict[str, Any]:
    return json.loads((model_repo / model / str(version) / "metadata.json").read_text())
