"""Helpers of the gateway's tests"""

from __future__ import annotations

import functools
import json
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import requests

from builder.runtime.server import TritonServer
from support import servers

MODEL = "fraud-detector"


SOURCE = Path(__file__).resolve().parents[2] / "feature_repo"


@dataclass
class Stack:
    feature_repo: Path
    store: Any
    model_repo: Path
    trained: Any
    triton: TritonServer


def copy_feature_repo(dest: Path) -> Path:
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("data", "__pycache__"))
    return dest


# What decides which feature specs a gateway needs: with any of these set, it compiles its own.
_FEATURE_SETTINGS = (
    "GATEWAY_FEATURE_REPO",
    "GATEWAY_ONLINE_STORE",
    "GATEWAY_FEATURE_SPECS",
    "GATEWAY_FEATURE_READER",
)


def gateway_env(stack: Stack, *, compiled: bool = True, **extra: str) -> dict[str, str]:
    """`gateway serve`'s environment on ``stack``. ``compiled``: with the stack's feature specs,
    compiled once (as a deployment does with `gateway compile-features`), so that each gateway
    a test starts does not compile them again in a child process at its start (seconds of CPU
    each); tests of that start path pass ``compiled=False``."""
    env = {
        "GATEWAY_TRITON_URL": f"http://{stack.triton.http_url}",
        "GATEWAY_FEATURE_REPO": str(stack.feature_repo),
        "GATEWAY_MODELS": f'["{MODEL}"]',
        "GATEWAY_MAX_BATCH_ROWS": "16",
        "GATEWAY_MAX_BODY_BYTES": "65536",
    }
    if compiled and not set(_FEATURE_SETTINGS) & set(extra):
        env["GATEWAY_FEATURE_SPECS"] = str(compiled_specs(stack.feature_repo))
    return {**env, **extra}


@functools.cache
def compiled_specs(feature_repo: Path) -> Path:
    """``feature_repo``'s services compiled once for the direct reader, beside the repository."""
    from gateway.feature_specs import compile_into
    from gateway.settings import FeatureSettings

    folder = feature_repo.parent / f"{feature_repo.name}-specs"
    compile_into(FeatureSettings(feature_repo=feature_repo), folder)
    return folder


def flood_labels(job: tuple[str, str, list[dict[str, Any]], int, Any, float]) -> list[int]:
    """Batches of 100 labels to ``url``'s ``model`` as fast as the gateway answers, for
    ``seconds`` from when every sender and the test have reached ``ready`` (a Manager's
    Barrier: on a loaded machine, starting 8 interpreters took longer than any fixed lead);
    the statuses got (-1: a 503 without Retry-After)."""
    url, model, labels, seed, ready, seconds = job
    rng = np.random.default_rng(seed)
    statuses = []
    ready.wait(timeout=120)
    end = time.time() + seconds
    with requests.Session() as session:
        while time.time() < end:
            picked = [labels[i] for i in rng.integers(0, len(labels), 100)]
            response = session.post(f"{url}/v1/models/{model}/feedback", json={"labels": picked}, timeout=30)
            told = response.status_code != 503 or bool(response.headers.get("Retry-After"))
            statuses.append(response.status_code if told else -1)
    return statuses


ROWS = [
    {"user_id": 17, "merchant_id": 3, "amount": 42.5, "hour": 13, "channel": "web"},
    {"user_id": 250, "merchant_id": 88, "amount": 980.0, "hour": 3, "channel": "app"},
    {"user_id": 401, "merchant_id": 12, "amount": 12.0, "hour": 20, "channel": "pos"},
]


def expected_scores(stack: Stack, rows: list[dict[str, Any]]) -> np.ndarray:
    """The trained model on the same online features, assembled in training column order."""
    from feature_repo import SERVICE

    service = stack.store.get_feature_service(SERVICE)
    keys = [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in rows]
    online = stack.store.get_online_features(features=service, entity_rows=keys).to_dict()
    trained = stack.trained
    full = [{c: r[c] if c in r else online[c][i] for c in trained.columns} for i, r in enumerate(rows)]
    frame = trained.input_frame(full)
    for column in frame.columns:  # the model input carries numbers as float32, as Triton gets them
        if column not in trained.string_columns:
            frame[column] = frame[column].astype(np.float32).astype(np.float64)
    return trained.model.predict_proba(frame)[:, 1]


def online_complete(stack: Stack, row: dict[str, Any]) -> bool:
    from feature_repo import SERVICE

    keys = {"user_id": row["user_id"], "merchant_id": row["merchant_id"]}
    values = stack.store.get_online_features(
        features=stack.store.get_feature_service(SERVICE), entity_rows=[keys]
    ).to_dict()
    return all(v[0] is not None for k, v in values.items() if k not in keys)


def predict(gw: servers.Gateway, body: Any, model: str = MODEL, **kwargs: Any) -> requests.Response:
    return requests.post(f"{gw.url}/v1/models/{model}/predict", json=body, timeout=10, **kwargs)


def like_training(stack: Stack, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows drawn from the rows the model was fitted on (the training frame's first 80 %,
    as demo/train.py splits it): their entity keys and request fields. A row the point-in-time
    join left without user features gets a user the online store does not know, so the gateway
    sees it without them too (18 % of the rows: users who joined late, a snapshot missed)."""
    from support.train import ENTITY_KEYS, REQUEST_FIELDS, demo_training_frame

    frame = demo_training_frame(stack.store)
    frame = frame.head(int(len(frame) * 0.8)).sample(n, random_state=seed)
    kinds = {"amount": float, "hour": int, "channel": str}
    rows = []
    for i, r in enumerate(frame.to_dict("records")):
        row = {**{k: int(r[k]) for k in ENTITY_KEYS}, **{f: kinds[f](r[f]) for f in REQUEST_FIELDS}}
        if np.isnan(r["user_age_days"]):
            row["user_id"] = 10**6 + i  # no such user online
        rows.append(row)
    return rows


def send(gw: servers.Gateway, rows: list[dict[str, Any]]) -> None:
    with requests.Session() as session:
        for i in range(0, len(rows), BATCH):
            response = session.post(
                f"{gw.url}/v1/models/{MODEL}/predict", json={"rows": rows[i : i + BATCH]}, timeout=10
            )
            assert response.status_code == 200, response.text


def rank_auc(truth: np.ndarray, score: np.ndarray) -> float:
    """AUC as the share of (positive, negative) pairs ordered right, ties half."""
    pos, neg = score[truth], score[~truth]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


SOURCE_YAML = Path(__file__).resolve().parents[2] / "feature_repo" / "feature_store.yaml"


SERVICE = "shop_v1"


ONLINE = ["segment", "spend_30d", "visits_30d"]  # the feature view's features (String, Float64, Float64)


REQUEST = ["amount", "channel"]


CHANNELS = ["web", "app", "store"]


SEGMENTS = ["gold", "silver", "bronze"]


CUSTOMERS = [f"C-{i:04d}" for i in range(1, 201)]


def typed_feature_repo(root: Path) -> Any:
    """A Feast repo with a STRING-keyed ``customer`` entity and one view, applied and materialized."""
    from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
    from feast.types import Float64, String

    from feast_access.store import open_store

    (root / "data").mkdir(parents=True)
    shutil.copy(SOURCE_YAML, root / "feature_store.yaml")
    rng = np.random.default_rng(7)
    now = pd.Timestamp.now(tz="UTC")
    snapshot = pd.DataFrame(
        {
            "customer_id": CUSTOMERS,
            "segment": rng.choice(SEGMENTS, len(CUSTOMERS)),
            "spend_30d": rng.gamma(2.0, 50.0, len(CUSTOMERS)).round(2),
            "visits_30d": rng.poisson(4, len(CUSTOMERS)).astype(float),
            "event_timestamp": now - pd.Timedelta(hours=1),
            "created_timestamp": now - pd.Timedelta(hours=1),
        }
    )
    snapshot.to_parquet(root / "data" / "customer_stats.parquet")
    customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.STRING)
    view = FeatureView(
        name="customer_stats",
        entities=[customer],
        ttl=timedelta(days=2),
        schema=[
            Field(name="segment", dtype=String),
            Field(name="spend_30d", dtype=Float64),
            Field(name="visits_30d", dtype=Float64),
        ],
        source=FileSource(
            name="customer_stats_source",
            path="data/customer_stats.parquet",
            timestamp_field="event_timestamp",
            created_timestamp_column="created_timestamp",
        ),
        online=True,
    )
    store = open_store(root)
    store.apply([customer, view, FeatureService(name=SERVICE, features=[view])])
    store.materialize_incremental(end_date=datetime.now(UTC))
    return store, snapshot


def typed_pipeline(final: Any) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    columns = ColumnTransformer(
        [
            ("categories", OneHotEncoder(handle_unknown="ignore"), ["channel", "segment"]),
            # the imputer reads NaN, the stand-in for a missing online number
            (
                "numbers",
                make_pipeline(SimpleImputer(), StandardScaler()),
                ["amount", "spend_30d", "visits_30d"],
            ),
        ]
    )
    return Pipeline([("columns", columns), ("model", final)])


def register_typed(name: str, model: Any, X: pd.DataFrame, params: dict[str, float] | None = None) -> None:
    import mlflow
    from mlflow import MlflowClient
    from skops.io import dumps, get_untrusted_types

    with mlflow.start_run():
        mlflow.set_tags(
            {
                "feast.feature_service": SERVICE,
                "feast.entity_keys": "customer_id",
                "feast.request_fields": ",".join(REQUEST),
            }
        )
        if params:
            mlflow.log_params(params)
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=get_untrusted_types(data=dumps(model)),
            pip_requirements=["scikit-learn"],  # given: inferring them takes seconds
        )
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


BATCH = 16  # the session env's GATEWAY_MAX_BATCH_ROWS


def served_frame(
    stack: Stack, columns: list[str], strings: list[str], rows: list[dict[str, Any]]
) -> pd.DataFrame:
    """The model input the gateway assembles for ``rows``: their request fields and the online
    features the store has now (a missing number NaN, a missing string ``""``, the gateway's
    stand-ins under GATEWAY_MISSING_ENTITIES=default), numbers as float32, as Triton gets them."""
    from feature_repo import SERVICE
    from support.train import model_frame

    service = stack.store.get_feature_service(SERVICE)
    keys = [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in rows]
    online = stack.store.get_online_features(features=service, entity_rows=keys).to_dict()
    full = [{c: r[c] if c in r else online[c][i] for c in columns} for i, r in enumerate(rows)]
    frame = model_frame(pd.DataFrame(full, columns=columns), strings)
    for column in frame.columns:
        if column not in strings:
            frame[column] = frame[column].astype(np.float32).astype(np.float64)
    return frame


def shap_by_column(pipeline: Any, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """shap's TreeExplainer (tree_path_dependent) on the Pipeline's final model, its values
    summed back per original column through the ColumnTransformer (a one-hot group is one
    column): ``(rows, columns, outputs)`` and the base values ``(outputs,)``."""
    import warnings

    with warnings.catch_warnings():  # matplotlib's deprecations, at shap's import
        warnings.simplefilter("ignore")
        import shap

    pre, model = pipeline[:-1], pipeline.steps[-1][1]
    features = pre.transform(frame)
    features = np.asarray(features.toarray() if hasattr(features, "toarray") else features, dtype=np.float64)
    transformer = pre.steps[0][1]  # the ColumnTransformer
    groups: list[int] = []
    for name, fitted, columns in transformer.transformers_:
        if name == "remainder" or fitted == "drop":
            continue
        encoder = fitted.steps[-1][1] if hasattr(fitted, "steps") else fitted
        widths = (
            [len(c) for c in encoder.categories_] if hasattr(encoder, "categories_") else [1] * len(columns)
        )
        for column, width in zip(columns, widths, strict=True):
            groups += [list(frame.columns).index(column)] * width
    assert len(groups) == features.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explainer = shap.TreeExplainer(model, feature_perturbation="tree_path_dependent")
        values = np.asarray(explainer.shap_values(features), dtype=np.float64)
    values = values if values.ndim == 3 else values[:, :, None]
    out = np.zeros((len(frame), len(frame.columns), values.shape[2]))
    for f, column in enumerate(groups):
        out[:, column, :] += values[:, f, :]
    return out, np.atleast_1d(np.asarray(explainer.expected_value, dtype=np.float64)).reshape(-1)


def register_multiclass(stack: Stack, name: str) -> Any:
    """A three-class RandomForest Pipeline on the demo's features (0: a small amount, 1: a large
    one, 2: fraud), tagged with the fraud model's feature service, ``name@champion``.
    Not HistGradientBoosting: its bin thresholds are interpolated percentiles, some within a
    float32 step of a data value, so on some days' demo data its float32 ONNX graph answered a
    few parity rows differently and the export was (rightly) refused; scikit-learn's own trees
    split float32 values, as the ONNX graph compares them. (shap has no multi-class
    GradientBoosting.)"""
    import mlflow
    from mlflow import MlflowClient
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder
    from skops.io import dumps, get_untrusted_types

    from feast_access.service import feature_names, string_features
    from feature_repo import SERVICE
    from serving_contract import keys
    from support.train import (
        ENTITY_KEYS,
        REQUEST_FIELDS,
        STRING_REQUEST_FIELDS,
        demo_training_frame,
        model_frame,
    )

    features = feature_names(stack.store, SERVICE)
    strings = [*STRING_REQUEST_FIELDS, *string_features(stack.store, SERVICE)]
    frame = demo_training_frame(stack.store)
    columns = [*REQUEST_FIELDS, *features]
    X = model_frame(frame[columns].reset_index(drop=True), strings)
    y = np.where(frame["is_fraud"].to_numpy() == 1, 2, (X["amount"] > X["amount"].median()).astype(int))
    numeric = [c for c in columns if c not in strings]
    preprocess = ColumnTransformer(
        [
            ("num", SimpleImputer(strategy="median"), numeric),
            (
                "cat",
                OneHotEncoder(handle_unknown="ignore", sparse_output=False),
                [c for c in columns if c in strings],
            ),
        ]
    )
    forest = RandomForestClassifier(n_estimators=15, max_depth=6, random_state=0)
    model = Pipeline([("preprocess", preprocess), ("model", forest)])
    model.fit(X, y)
    with mlflow.start_run():
        mlflow.set_tags(
            {
                keys.FEATURE_SERVICE: SERVICE,
                keys.ENTITY_KEYS: ",".join(ENTITY_KEYS),
                keys.REQUEST_FIELDS: ",".join(REQUEST_FIELDS),
                keys.FEATURES: json.dumps(features),
            }
        )
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=get_untrusted_types(data=dumps(model)),  # our own, just fitted
            pip_requirements=["scikit-learn"],
        )
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))
    return model, columns, strings
