"""Training from the feature store, as the demo (and the tests) do it.

Rows come from Feast's point-in-time join over the feature service ``fraud_v1`` (never from
ad-hoc feature code), so the features the model is trained on are, by construction, the ones
the gateway reads online. The run records what serving needs: the feature service, the entity
keys, the request-time fields and the ordered feature list (``feast.*`` tags), and the
preprocessing + threshold (``serving/ensemble.json``, param ``decision_threshold``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

REQUEST_FIELDS = ["amount", "hour"]  # sent by the caller with each request
ENTITY_KEYS = ["user_id", "merchant_id"]


@dataclass
class Trained:
    name: str
    version: int
    run_id: str
    model: Any
    spec: dict[str, Any]
    columns: list[str]
    auc: float


def prepare_feature_store(repo: Path) -> Any:
    """Generate the demo data, `feast apply`, materialize the online store; return the store."""
    from feature_repo import generate, store

    generate.generate(repo / "data")
    fs = store.apply(repo)
    store.materialize(fs)
    return fs


def train_and_register(
    fs: Any, name: str, experiment_id: str, *, threshold: float = 0.35, n_estimators: int = 60
) -> Trained:
    import mlflow
    from mlflow import MlflowClient
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.metrics import roc_auc_score

    from builder.ensemble_models import transforms
    from feature_repo import store

    service = store.SERVICE
    features = store.feature_names(fs, service)
    frame = store.training_frame(fs, service).sort_values("event_timestamp", kind="stable")
    columns = [*REQUEST_FIELDS, *features]
    X, y = frame[columns].to_numpy(dtype="float64"), frame["is_fraud"].to_numpy()
    split = int(len(frame) * 0.8)  # time-ordered split: train on the past, test on the future
    spec = {"preprocess": transforms.fit_preprocess(X[:split]), "postprocess": {"positive_index": 1}}
    Xp = pd.DataFrame(transforms.preprocess(X, spec["preprocess"]), columns=columns)
    model = GradientBoostingClassifier(n_estimators=n_estimators, max_depth=3, random_state=0)
    model.fit(Xp.iloc[:split], y[:split])
    auc = float(roc_auc_score(y[split:], model.predict_proba(Xp.iloc[split:])[:, 1]))
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"{name}-gbm") as run:
        mlflow.set_tags(
            {
                "feast.feature_service": service,
                "feast.entity_keys": ",".join(ENTITY_KEYS),
                "feast.request_fields": ",".join(REQUEST_FIELDS),
                "feast.features": json.dumps(features),
            }
        )
        mlflow.log_params(
            {
                "n_estimators": n_estimators,
                "max_depth": 3,
                "decision_threshold": threshold,
                "training_rows": split,
            }
        )
        mlflow.log_metric("test_auc", auc)
        mlflow.log_dict(spec, "serving/ensemble.json")
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=Xp.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=["sklearn.tree._tree.Tree"],
        )
    version = int(info.registered_model_version)
    MlflowClient().set_registered_model_alias(name, "champion", str(version))
    return Trained(name, version, run.info.run_id, model, spec, columns, auc)
