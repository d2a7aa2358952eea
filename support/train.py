"""Training from the feature store, as the demo, the tests and the benchmarks do it.

Rows come from Feast's point-in-time join over the feature service ``fraud_v1`` (never from
ad-hoc feature code), so the features the model is trained on are, by construction, the ones
the gateway reads online. The model is one scikit-learn Pipeline (impute + scale the numeric
columns, one-hot the string ones, gradient boosting), so its preprocessing is exported inside
the ONNX graph and nothing outside the model re-implements it. The run records what serving
needs: the feature service, the entity keys, the request-time fields and the ordered feature
list (``feast.*`` tags), the decision threshold (param ``decision_threshold``, which
``builder export`` publishes as ``serving.decision_threshold``), and the training rows
(``serving/reference.parquet``, the version's drift reference).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from serving_contract import keys

REQUEST_FIELDS = ["amount", "hour", "channel"]  # sent by the caller with each request
STRING_REQUEST_FIELDS = ["channel"]
# The oldest share of the rows is fitted on, the rest tests it (a time-ordered split).
TRAIN_SHARE = 0.8
ENTITY_KEYS = ["user_id", "merchant_id"]
# What the gateway sends for a missing string feature (docs/serving-contract.md); training fills
# the same value, so a missing category means the same thing offline and online.
MISSING_STRING = ""
# Types skops must be told to load (it refuses anything off its default list, naming it): the
# trees' Cython class, and numpy.dtype (a fitted SimpleImputer keeps its input dtype).
SKOPS_TRUSTED_TYPES = ["sklearn.tree._tree.Tree", "numpy.dtype"]


@dataclass
class Trained:
    """A registered version and what tests compare the served model against.

    ``model`` is the fitted Pipeline; feed it ``input_frame(rows)``, not a raw array.
    """

    name: str
    version: int
    run_id: str
    model: Any
    columns: list[str]
    auc: float
    string_columns: list[str] = field(default_factory=list)

    def input_frame(self, rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
        """Rows (column -> value, None for missing) as the frame the model was fitted on."""
        frame = pd.DataFrame([{c: row.get(c) for c in self.columns} for row in rows], columns=self.columns)
        return model_frame(frame, self.string_columns)


def model_frame(frame: pd.DataFrame, string_columns: Sequence[str]) -> pd.DataFrame:
    """The model's input frame: numeric columns float64 (so the MLflow signature says double, and
    a missing value is NaN for the imputer), string columns str with missing as ``""``."""
    out = frame.copy()
    for name in out.columns:
        if name in string_columns:
            out[name] = out[name].where(out[name].notna(), MISSING_STRING).astype(str).astype(object)
        else:
            out[name] = pd.to_numeric(out[name]).astype("float64")
    return out


def prepare_feature_store(repo: Path) -> Any:
    """Generate the demo data, `feast apply`, materialize the online store; return the store."""
    from feast_access.store import apply, materialize
    from feature_repo import generate
    from feature_repo.definitions import OBJECTS

    generate.generate(repo / "data")
    fs = apply(repo, OBJECTS)
    materialize(fs)
    return fs


def demo_training_frame(fs: Any) -> pd.DataFrame:
    """The demo's training rows, oldest first: its transactions joined point in time with the
    features of its service (feast_access's training frame, the skew check's too)."""
    from feast_access import EVENT_TIMESTAMP
    from feast_access.training import training_frame
    from feature_repo import SERVICE

    return training_frame(fs, SERVICE).sort_values(EVENT_TIMESTAMP, kind="stable")


def build_pipeline(numeric: list[str], categorical: list[str], n_estimators: int) -> Any:
    """Impute (median) + scale the numeric columns, one-hot the string ones, then boost.

    ``handle_unknown="ignore"``: a category the model never saw (or ``""``, missing) encodes as
    all zeros instead of failing the request.
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    preprocess = ColumnTransformer(
        [
            ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric),
            ("cat", OneHotEncoder(handle_unknown="ignore"), categorical),
        ]
    )
    model = GradientBoostingClassifier(n_estimators=n_estimators, max_depth=3, random_state=0)
    return Pipeline([("preprocess", preprocess), ("model", model)])


def train_and_register(
    fs: Any,
    name: str,
    experiment_id: str,
    *,
    threshold: float = 0.35,
    n_estimators: int = 60,
    alias: str = "champion",
) -> Trained:
    """Train on the point-in-time join, log the Pipeline, register it as ``name@alias`` (a
    ``challenger`` is another version of the same model, trained with other settings)."""
    import mlflow
    from mlflow import MlflowClient
    from sklearn.metrics import roc_auc_score

    from builder.reference import log_reference
    from feast_access.service import feature_names, string_features
    from feature_repo import SERVICE

    features = feature_names(fs, SERVICE)
    strings = [*STRING_REQUEST_FIELDS, *string_features(fs, SERVICE)]
    frame = demo_training_frame(fs)
    columns = [*REQUEST_FIELDS, *features]
    X, y = model_frame(frame[columns].reset_index(drop=True), strings), frame["is_fraud"].to_numpy()
    categorical = [c for c in columns if c in strings]
    numeric = [c for c in columns if c not in strings]
    split = int(len(frame) * TRAIN_SHARE)  # time-ordered: train on the past, test on the future
    model = build_pipeline(numeric, categorical, n_estimators)
    model.fit(X.iloc[:split], y[:split])
    auc = float(roc_auc_score(y[split:], model.predict_proba(X.iloc[split:])[:, 1]))
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"{name}-gbm") as run:
        mlflow.set_tags(
            {
                keys.FEATURE_SERVICE: SERVICE,
                keys.ENTITY_KEYS: ",".join(ENTITY_KEYS),
                keys.REQUEST_FIELDS: ",".join(REQUEST_FIELDS),
                keys.FEATURES: json.dumps(features),
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
        # The rows the model was fitted on, as it takes them: `builder export` bins them into the
        # version's drift reference (docs/drift.md).
        log_reference(X.iloc[:split])
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=SKOPS_TRUSTED_TYPES,
            # given, not inferred: MLflow infers them by loading the model in a subprocess that
            # imports every library this process has (4-5 s; nothing reads them)
            pip_requirements=["scikit-learn"],
        )
    version = int(info.registered_model_version)
    MlflowClient().set_registered_model_alias(name, alias, str(version))
    return Trained(name, version, run.info.run_id, model, columns, auc, categorical)
