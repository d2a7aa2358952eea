"""The new model kinds end to end: the real gateway, the real Triton, real Feast online features.

One Feast repo (the demo's ``fraud_v1`` service, SQLite online store), one MLflow registry, one
model repository and one Triton serving three scikit-learn Pipelines trained on the feature
service's point-in-time join, each logged with the run's ``feast.*`` tags and exported by the
builder; one `gateway serve` in front. The kinds (docs/serving-contract.md):

- an outlier detector (IsolationForest): ``kind`` ``outlier``; ``outlier``, ``label`` -1/1 and
  ``score`` (the decision function);
- a classifier without probabilities (LinearSVC, binary): ``label`` and ``scores`` (one signed
  distance);
- a two-target regressor (Ridge): ``value`` a list of two floats.

Each answer is checked against the native model on the same rows, assembled by the test from the
online store the way the gateway assembles them (request fields + online features, numbers as
float32 on the wire), over HTTP and over the gateway's gRPC API, with the gateway calling
Triton through its HTTP client and through its gRPC client.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pandas as pd
import pytest
import requests

from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value
from support import servers
from support.models import register_fitted
from tests.gateway.conftest import copy_feature_repo

pytestmark = pytest.mark.integration

OUTLIER, LINSVC, TWO_TARGETS = "fraud-iforest", "fraud-linsvc", "fraud-two-targets"
MODELS = (OUTLIER, LINSVC, TWO_TARGETS)

# The gateway suite's rows, plus extreme request values an isolation forest isolates quickly.
ROWS = [
    {"user_id": 17, "merchant_id": 3, "amount": 42.5, "hour": 13, "channel": "web"},
    {"user_id": 250, "merchant_id": 88, "amount": 980.0, "hour": 3, "channel": "app"},
    {"user_id": 401, "merchant_id": 12, "amount": 12.0, "hour": 20, "channel": "pos"},
    {"user_id": 33, "merchant_id": 41, "amount": 25000.0, "hour": 4, "channel": "kiosk"},
    {"user_id": 120, "merchant_id": 7, "amount": 60.0, "hour": 11, "channel": "web"},
]


@dataclass
class KindsStack:
    feature_repo: Path
    store: Any
    columns: list[str]  # the models' input columns, in training order
    strings: list[str]  # which of them are strings
    models: dict[str, Any]  # registered name -> the fitted native Pipeline
    versions: dict[str, str]
    triton: Any


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


def _register(name: str, model: Any, X: pd.DataFrame, features: list[str]) -> str:
    from support.train import ENTITY_KEYS, REQUEST_FIELDS

    tags = {
        "feast.feature_service": "fraud_v1",
        "feast.entity_keys": ",".join(ENTITY_KEYS),
        "feast.request_fields": ",".join(REQUEST_FIELDS),
        "feast.features": json.dumps(features),
    }
    return str(register_fitted(name, model, X, tags=tags))


@pytest.fixture(scope="module")
def kinds_stack(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KindsStack]:
    from sklearn.ensemble import IsolationForest
    from sklearn.linear_model import Ridge
    from sklearn.svm import LinearSVC

    from builder.export import ExportRequest, export_model
    from feature_repo import store as feast_store
    from support.train import REQUEST_FIELDS, STRING_REQUEST_FIELDS, model_frame, prepare_feature_store

    root = tmp_path_factory.mktemp("kinds-stack")
    repo = copy_feature_repo(root / "feature_repo")
    fs = prepare_feature_store(repo)
    service = feast_store.SERVICE
    assert service == "fraud_v1"
    features = feast_store.feature_names(fs, service)
    strings = [*STRING_REQUEST_FIELDS, *feast_store.string_features(fs, service)]
    frame = feast_store.training_frame(fs, service)
    columns = [*REQUEST_FIELDS, *features]
    X = model_frame(frame[columns].reset_index(drop=True), strings)
    y = frame["is_fraud"].to_numpy()
    categorical = [c for c in columns if c in strings]
    numeric = [c for c in columns if c not in strings]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LinearSVC's convergence warning
        models = {
            OUTLIER: _pipeline(
                numeric, categorical, IsolationForest(n_estimators=30, contamination=0.05, random_state=0)
            ).fit(X),
            LINSVC: _pipeline(numeric, categorical, LinearSVC(C=0.5)).fit(X, y),
            TWO_TARGETS: _pipeline(numeric, categorical, Ridge()).fit(X, _targets(X, numeric)),
        }
    versions = {name: _register(name, model, X, features) for name, model in models.items()}
    model_repo = root / "model_repo"
    for name in models:
        export_model(ExportRequest(f"models:/{name}@champion", model_repo))
    with servers.serving(model_repo, triton_runtime, root / "tritonserver.log") as triton:
        yield KindsStack(repo, fs, columns, categorical, models, versions, triton)


@pytest.fixture(scope="module", params=["http", "grpc"])
def kinds_gateway(
    request: pytest.FixtureRequest, kinds_stack: KindsStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[servers.Gateway]:
    """One gateway per Triton client (HTTP and gRPC decode the new outputs each their own way)."""
    triton = kinds_stack.triton
    url = f"http://{triton.http_url}" if request.param == "http" else f"grpc://{triton.grpc_url}"
    env = {
        "GATEWAY_TRITON_URL": url,
        "GATEWAY_FEATURE_REPO": str(kinds_stack.feature_repo),
        "GATEWAY_MODELS": json.dumps(list(MODELS)),  # /readyz waits for all three
    }
    with servers.gateway_process(tmp_path_factory.mktemp("kinds-gw"), env) as gw:
        yield gw


def native_frame(stack: KindsStack, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows with their online features, read from the store by the test, in training column
    order; numbers rounded through float32 as the model's inputs carry them."""
    from feature_repo.store import SERVICE
    from support.train import model_frame

    keys = [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in rows]
    online = stack.store.get_online_features(
        features=stack.store.get_feature_service(SERVICE), entity_rows=keys
    ).to_dict()
    full = [{c: r[c] if c in r else online[c][i] for c in stack.columns} for i, r in enumerate(rows)]
    frame = model_frame(pd.DataFrame(full, columns=stack.columns), stack.strings)
    for column in frame.columns:
        if column not in stack.strings:
            frame[column] = frame[column].astype(np.float32).astype(np.float64)
    return frame


def predict(gw: servers.Gateway, model: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    response = requests.post(f"{gw.url}/v1/models/{model}/predict", json={"rows": rows}, timeout=20)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == model and len(body["predictions"]) == len(rows)
    return body


def grpc_predict(gw: servers.Gateway, model: str, rows: list[dict[str, Any]]) -> gateway_pb2.PredictResponse:
    with grpc.insecure_channel(gw.grpc) as channel:
        request = gateway_pb2.PredictRequest(
            model=model, rows=[gateway_pb2.Row(fields={k: to_value(v) for k, v in r.items()}) for r in rows]
        )
        return gateway_pb2_grpc.GatewayStub(channel).Predict(request, timeout=20)


def test_an_outlier_detector_answers_the_native_label_and_decision_function(
    kinds_stack: KindsStack, kinds_gateway: servers.Gateway
):
    body = predict(kinds_gateway, OUTLIER, ROWS)
    assert body["kind"] == "outlier" and "classes" not in body
    assert body["version"] == kinds_stack.versions[OUTLIER]
    native = kinds_stack.models[OUTLIER]
    frame = native_frame(kinds_stack, ROWS)
    want_scores, want_labels = native.decision_function(frame), native.predict(frame)
    assert {-1, 1} == set(want_labels.tolist())  # the rows hold both answers
    predictions = body["predictions"]
    assert all(set(p) == {"outlier", "label", "score", "defaults_used"} for p in predictions)
    np.testing.assert_allclose([p["score"] for p in predictions], want_scores, atol=1e-4)
    assert [p["label"] for p in predictions] == want_labels.tolist()
    for p in predictions:
        assert p["outlier"] is (p["label"] == -1)
        assert p["outlier"] == (p["score"] < 0)
    assert not any(p["defaults_used"] for p in predictions)

    reply = grpc_predict(kinds_gateway, OUTLIER, ROWS)
    assert reply.kind == "outlier" and not reply.classes
    assert [p.outlier for p in reply.predictions] == [p["outlier"] for p in predictions]
    assert [p.label for p in reply.predictions] == want_labels.tolist()
    assert [p.score for p in reply.predictions] == pytest.approx([p["score"] for p in predictions], abs=1e-6)


def test_a_classifier_without_probabilities_answers_the_native_label_and_scores(
    kinds_stack: KindsStack, kinds_gateway: servers.Gateway
):
    body = predict(kinds_gateway, LINSVC, ROWS)
    native = kinds_stack.models[LINSVC]
    assert body["kind"] == "binary" and body["classes"] == native.classes_.tolist() == [0, 1]
    frame = native_frame(kinds_stack, ROWS)
    want_labels, want_scores = native.predict(frame), native.decision_function(frame)
    assert set(want_labels.tolist()) == {0, 1}  # the rows hold both answers
    predictions = body["predictions"]
    assert all(set(p) == {"label", "scores", "defaults_used"} for p in predictions)  # no probabilities
    assert [p["label"] for p in predictions] == want_labels.tolist()
    assert all(len(p["scores"]) == 1 for p in predictions)  # binary: one signed distance
    np.testing.assert_allclose([p["scores"][0] for p in predictions], want_scores, atol=1e-4)
    assert [p["label"] for p in predictions] == [int(p["scores"][0] > 0) for p in predictions]

    reply = grpc_predict(kinds_gateway, LINSVC, ROWS)
    assert reply.kind == "binary"
    assert [c.int_value for c in reply.classes] == [0, 1]
    assert [p.class_label.int_value for p in reply.predictions] == want_labels.tolist()
    assert [list(p.scores) for p in reply.predictions] == [
        pytest.approx(p["scores"], abs=1e-6) for p in predictions
    ]
    assert not any(p.probabilities for p in reply.predictions)


def test_a_two_target_regressor_answers_a_list_of_two_native_values(
    kinds_stack: KindsStack, kinds_gateway: servers.Gateway
):
    body = predict(kinds_gateway, TWO_TARGETS, ROWS)
    assert body["kind"] == "regression" and "classes" not in body
    want = kinds_stack.models[TWO_TARGETS].predict(native_frame(kinds_stack, ROWS))
    assert want.shape == (len(ROWS), 2)
    predictions = body["predictions"]
    assert all(isinstance(p["value"], list) and len(p["value"]) == 2 for p in predictions)
    np.testing.assert_allclose([p["value"] for p in predictions], want, rtol=1e-4, atol=1e-3)

    reply = grpc_predict(kinds_gateway, TWO_TARGETS, ROWS)
    assert reply.kind == "regression"
    np.testing.assert_allclose([list(p.values) for p in reply.predictions], want, rtol=1e-4, atol=1e-3)


def test_one_row_body_answers_the_same_as_in_a_batch(kinds_stack: KindsStack, kinds_gateway: servers.Gateway):
    for model in MODELS:
        response = requests.post(f"{kinds_gateway.url}/v1/models/{model}/predict", json=ROWS[3], timeout=20)
        assert response.status_code == 200, response.text
        (one,) = response.json()["predictions"]
        (batched,) = [p for i, p in enumerate(predict(kinds_gateway, model, ROWS)["predictions"]) if i == 3]
        assert one.keys() == batched.keys()
        for key, value in one.items():
            # float32, batched or not: a few ulps apart (at 1250, one ulp is 1.2e-4)
            assert value == pytest.approx(batched[key], rel=1e-6, abs=1e-5), (model, key)
