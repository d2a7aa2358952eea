"""The two families of new-kind models (issue 19) that ``tests/builder/export/test_export_kinds.py``
trains, registers, exports into ONE model repository and serves from ONE Triton, so the suite
pays for one registry's worth of exports and one server start instead of two.

- ``kind-*``: small models on ``support.models.dataset()`` (five float columns, one ``input``
  tensor): an outlier detector, classifiers without ``predict_proba``, multi-target regressors,
  QuadraticDiscriminantAnalysis and a DataFrame pipeline that picks its numeric columns by name;
- ``fraud-*``: three scikit-learn Pipelines trained on the Feast feature service ``fraud_v1``'s
  point-in-time join (SQLite online store), logged with the run's ``feast.*`` tags, so the real
  gateway can serve them from the online store: an outlier detector, a LinearSVC and a two-target
  Ridge.

No pytest here: the test module's fixtures call these.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from support import models

OUTLIER, LINSVC, TWO_TARGETS = "fraud-iforest", "fraud-linsvc", "fraud-two-targets"
FRAUD_MODELS = (OUTLIER, LINSVC, TWO_TARGETS)


def fitted(make: Callable[[], Any]) -> Any:
    """``make()`` with its warnings (convergence, ...) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def register(name: str, model: Any, X: pd.DataFrame, *, reference: bool = False) -> Any:
    """Register ``model`` (fitted) as ``name@champion``; returns the model."""
    models.register_fitted(name, model, X, reference=reference)
    return model


def typed_frame() -> pd.DataFrame:
    X, _ = models.dataset()
    return X.assign(hour=X.hour.astype("int64"), tx_last_24h=X.tx_last_24h.astype("int64"))


# -- kind-*: on the synthetic data set -----------------------------------------------------------


def register_kind_models() -> dict[str, Any]:
    """Fit and register the ``kind-*`` models in the current MLflow registry; name -> native."""
    from sklearn.compose import ColumnTransformer
    from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis
    from sklearn.ensemble import IsolationForest
    from sklearn.linear_model import LinearRegression, LogisticRegression, MultiTaskLasso, RidgeClassifier
    from sklearn.multioutput import MultiOutputRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC, LinearSVC

    X, y = models.dataset()
    targets = np.c_[X.amount * 0.1 + y, X.merchant_risk - 0.001 * X.user_age_days]
    three = np.digitize(X.merchant_risk, [0.33, 0.66])
    made = {
        "kind-iforest": fitted(lambda: IsolationForest(n_estimators=20, random_state=0).fit(X)),
        "kind-linsvc": fitted(lambda: make_pipeline(StandardScaler(), LinearSVC()).fit(X, y)),
        "kind-svc": fitted(lambda: make_pipeline(StandardScaler(), SVC()).fit(X, y)),
        "kind-ridge3": fitted(lambda: make_pipeline(StandardScaler(), RidgeClassifier()).fit(X, three)),
        "kind-mtlasso": fitted(lambda: MultiTaskLasso(alpha=0.01).fit(X, targets)),
        "kind-multiout": fitted(lambda: MultiOutputRegressor(LinearRegression()).fit(X, targets)),
        "kind-qda": fitted(lambda: QuadraticDiscriminantAnalysis().fit(X, three)),
    }
    for name, model in made.items():
        register(name, model, X, reference=name in ("kind-iforest", "kind-linsvc", "kind-mtlasso"))
    frame = typed_frame()
    by_name = ColumnTransformer(
        [
            ("scaled", StandardScaler(), ["amount", "merchant_risk"]),
            ("kept", "passthrough", ["hour", "tx_last_24h"]),
        ]
    )
    made["kind-bycolumn"] = register(
        "kind-bycolumn", fitted(lambda: make_pipeline(by_name, LogisticRegression()).fit(frame, y)), frame
    )
    return made


# -- fraud-*: on the Feast feature service -------------------------------------------------------


@dataclass
class FraudKinds:
    """The ``fraud-*`` models and the feature store they were trained from."""

    feature_repo: Path
    store: Any
    columns: list[str]  # the models' input columns, in training order
    strings: list[str]  # which of them are strings
    models: dict[str, Any]  # registered name -> the fitted native Pipeline
    versions: dict[str, str]


def _pipeline(numeric: list[str], categorical: list[str], final: Any) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    preprocess = ColumnTransformer(
        [
            ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric),
            ("cat", OneHotEncoder(handle_unknown="ignore"), categorical),
        ]
    )
    return Pipeline([("preprocess", preprocess), ("model", final)])


def _targets(X: pd.DataFrame, numeric: list[str]) -> np.ndarray:
    """Two synthetic targets derived from the features (NaN read as 0)."""
    N = X[numeric].fillna(0.0)
    first = 0.05 * N["amount"] + 2.0 * (X["channel"] == "web") + 0.1 * N["hour"]
    second = N[numeric].sum(axis=1) * 0.01 - 3.0 * (X["channel"] == "pos")
    return np.c_[first, second]


def _register_feast(name: str, model: Any, X: pd.DataFrame, features: list[str]) -> str:
    from support.train import ENTITY_KEYS, REQUEST_FIELDS

    tags = {
        "feast.feature_service": "fraud_v1",
        "feast.entity_keys": ",".join(ENTITY_KEYS),
        "feast.request_fields": ",".join(REQUEST_FIELDS),
        "feast.features": json.dumps(features),
    }
    return str(models.register_fitted(name, model, X, tags=tags))


def register_fraud_models(feature_repo: Path) -> FraudKinds:
    """Prepare the Feast repo copied at ``feature_repo`` (data, apply, materialize), fit the
    ``fraud-*`` Pipelines on its training frame and register them with their ``feast.*`` tags."""
    from sklearn.ensemble import IsolationForest
    from sklearn.linear_model import Ridge
    from sklearn.svm import LinearSVC

    from feast_access.service import feature_names, string_features
    from feature_repo import SERVICE
    from support.train import (
        REQUEST_FIELDS,
        STRING_REQUEST_FIELDS,
        demo_training_frame,
        model_frame,
        prepare_feature_store,
    )

    fs = prepare_feature_store(feature_repo)
    assert SERVICE == "fraud_v1"
    features = feature_names(fs, SERVICE)
    strings = [*STRING_REQUEST_FIELDS, *string_features(fs, SERVICE)]
    frame = demo_training_frame(fs)
    columns = [*REQUEST_FIELDS, *features]
    X = model_frame(frame[columns].reset_index(drop=True), strings)
    y = frame["is_fraud"].to_numpy()
    categorical = [c for c in columns if c in strings]
    numeric = [c for c in columns if c not in strings]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LinearSVC's convergence warning
        fits = {
            OUTLIER: _pipeline(
                numeric, categorical, IsolationForest(n_estimators=30, contamination=0.05, random_state=0)
            ).fit(X),
            LINSVC: _pipeline(numeric, categorical, LinearSVC(C=0.5)).fit(X, y),
            TWO_TARGETS: _pipeline(numeric, categorical, Ridge()).fit(X, _targets(X, numeric)),
        }
    versions = {name: _register_feast(name, model, X, features) for name, model in fits.items()}
    return FraudKinds(feature_repo, fs, columns, categorical, fits, versions)


def native_frame(fraud: FraudKinds, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows with their online features, read from the store by the test, in training column
    order; numbers rounded through float32 as the model's inputs carry them."""
    from feature_repo import SERVICE
    from support.train import model_frame

    keys = [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in rows]
    online = fraud.store.get_online_features(
        features=fraud.store.get_feature_service(SERVICE), entity_rows=keys
    ).to_dict()
    full = [{c: r[c] if c in r else online[c][i] for c in fraud.columns} for i, r in enumerate(rows)]
    frame = model_frame(pd.DataFrame(full, columns=fraud.columns), fraud.strings)
    for column in frame.columns:
        if column not in fraud.strings:
            frame[column] = frame[column].astype(np.float32).astype(np.float64)
    return frame
