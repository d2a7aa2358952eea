"""Typed models through the real stack: a Feast repo keyed by a STRING entity, scikit-learn
Pipelines over string and numeric columns (``columns`` layout), exported by the builder, served
by the embedded Triton behind `gateway serve`.

Each answer is checked against the native model on the same features, which the test reads
from the online store itself: a binary classifier (with a decision threshold), a regressor and
multi-class classifiers with integer and with string classes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pandas as pd
import pytest
import requests

from gateway.proto import gateway_pb2, gateway_pb2_grpc
from support import servers
from tests.gateway.helpers import (
    CHANNELS,
    SERVICE,
    register_typed,
    typed_feature_repo,
    typed_pipeline,
)

pytestmark = pytest.mark.integration

BINARY, REGRESSOR, MULTICLASS, NAMED = "shop-churn", "shop-spend", "shop-tier", "shop-tier-named"
THRESHOLD = 0.3


@dataclass
class TypedStack:
    feature_repo: Path
    store: Any
    models: dict[str, Any]  # registered name -> the native Pipeline
    triton: Any


def _training_frame(snapshot: pd.DataFrame, rows: int = 600) -> pd.DataFrame:
    rng = np.random.default_rng(11)
    picks = snapshot.iloc[rng.integers(0, len(snapshot), rows)].reset_index(drop=True)
    return pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, rows),
            "channel": rng.choice(CHANNELS, rows),
            "segment": picks["segment"],
            "spend_30d": picks["spend_30d"],
            "visits_30d": picks["visits_30d"],
        }
    )


def _train(X: pd.DataFrame) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression, Ridge

    risky = (X.channel == "web").astype(float) + (X.segment == "bronze") * 1.5
    churn = (
        risky + 0.01 * X.amount - 0.02 * X.spend_30d + np.random.default_rng(1).normal(0, 0.5, len(X))
    ) > 0.8
    spend = 2.0 * X.amount + 0.5 * X.spend_30d + X.visits_30d * 3 + (X.channel == "store") * 20.0
    tier = (X.spend_30d > 60).astype(int) + (X.spend_30d > 130) + (X.channel == "store")
    models = {
        BINARY: typed_pipeline(LogisticRegression(max_iter=500)).fit(X, churn.astype(int)),
        REGRESSOR: typed_pipeline(Ridge()).fit(X, spend),
        MULTICLASS: typed_pipeline(LogisticRegression(max_iter=500)).fit(X, tier),
        NAMED: typed_pipeline(LogisticRegression(max_iter=500)).fit(
            X, np.array(["low", "mid", "high", "top"])[tier]
        ),
    }
    register_typed(BINARY, models[BINARY], X, {"decision_threshold": THRESHOLD})
    for name in (REGRESSOR, MULTICLASS, NAMED):
        register_typed(name, models[name], X)
    return models


@pytest.fixture(scope="module")
def typed_stack(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TypedStack]:
    from builder.export import ExportRequest, export_model

    root = tmp_path_factory.mktemp("typed-stack")
    store, snapshot = typed_feature_repo(root / "feature_repo")
    models = _train(_training_frame(snapshot))
    model_repo = root / "model_repo"
    for name in models:
        export_model(ExportRequest(f"models:/{name}@champion", model_repo))
    with servers.serving(model_repo, triton_runtime, root / "tritonserver.log") as triton:
        yield TypedStack(root / "feature_repo", store, models, triton)


def typed_env(stack: TypedStack, **extra: str) -> dict[str, str]:
    return {
        "GATEWAY_TRITON_URL": f"grpc://{stack.triton.grpc_url}",  # the gRPC client, with typed models
        "GATEWAY_FEATURE_REPO": str(stack.feature_repo),
        "GATEWAY_MODELS": f'["{BINARY}", "{REGRESSOR}", "{MULTICLASS}"]',  # what /readyz checks
        **extra,
    }


@pytest.fixture(scope="module")
def typed_gateway(stack_dir: Path, typed_stack: TypedStack) -> Iterator[servers.Gateway]:
    with servers.gateway_process(stack_dir, typed_env(typed_stack)) as gw:
        yield gw


@pytest.fixture(scope="module")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("typed-gw")


# Chosen so the answers differ where a mistake would show: two churn scores between the
# threshold (0.3) and 0.5, one above, one near 0; every tier of the multi-class models.
ROWS = [
    {"customer_id": "C-0002", "amount": 42.5, "channel": "web"},
    {"customer_id": "C-0004", "amount": 20.0, "channel": "store"},
    {"customer_id": "C-0001", "amount": 5, "channel": "app"},  # an int for a float32 column
    {"customer_id": "C-0005", "amount": 20.0, "channel": "store"},
    {"customer_id": "C-0003", "amount": 7.0, "channel": "kiosk"},  # a channel the model never saw
]


def native_frame(stack: TypedStack, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows with their online features, read from the store by the test, as training saw them
    (a customer the store does not know has NaN numbers and the gateway's "" for its segment)."""
    keys = [{"customer_id": r["customer_id"]} for r in rows]
    online = stack.store.get_online_features(
        features=stack.store.get_feature_service(SERVICE), entity_rows=keys
    ).to_dict()
    frame = pd.DataFrame(
        {
            "amount": [float(r["amount"]) for r in rows],
            "channel": [r["channel"] for r in rows],
            "segment": ["" if v is None else v for v in online["segment"]],
            "spend_30d": [np.nan if v is None else v for v in online["spend_30d"]],
            "visits_30d": [np.nan if v is None else v for v in online["visits_30d"]],
        }
    )
    # the model's numeric inputs are float32 on the wire: round the same way before comparing
    for name in ("amount", "spend_30d", "visits_30d"):
        frame[name] = frame[name].astype(np.float32).astype(np.float64)
    return frame


def predict(gw: servers.Gateway, model: str, body: Any) -> requests.Response:
    return requests.post(f"{gw.url}/v1/models/{model}/predict", json=body, timeout=20)


def grpc_predict(gw: servers.Gateway, model: str, rows: list[dict[str, Any]]) -> gateway_pb2.PredictResponse:
    def value(v: Any) -> gateway_pb2.Value:
        if isinstance(v, str):
            return gateway_pb2.Value(string_value=v)
        return gateway_pb2.Value(double_value=float(v))

    with grpc.insecure_channel(gw.grpc) as channel:
        request = gateway_pb2.PredictRequest(
            model=model, rows=[gateway_pb2.Row(fields={k: value(v) for k, v in r.items()}) for r in rows]
        )
        return gateway_pb2_grpc.GatewayStub(channel).Predict(request, timeout=20)


def test_a_string_key_a_categorical_field_and_a_string_feature_score_as_the_native_model(
    typed_stack: TypedStack, typed_gateway: servers.Gateway
):
    response = predict(typed_gateway, BINARY, {"rows": ROWS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "binary" and body["classes"] == [0, 1]
    want = typed_stack.models[BINARY].predict_proba(native_frame(typed_stack, ROWS))
    scores = [p["score"] for p in body["predictions"]]
    np.testing.assert_allclose(scores, want[:, 1], atol=1e-5)
    np.testing.assert_allclose([p["probabilities"] for p in body["predictions"]], want, atol=1e-5)
    # the run's decision threshold (0.3), not the model's 0.5, decides the label
    assert any(THRESHOLD <= p < 0.5 for p in want[:, 1])  # (rows where the two disagree)
    assert [p["label"] for p in body["predictions"]] == [int(s >= THRESHOLD) for s in want[:, 1]]
    assert not any(p["defaults_used"] for p in body["predictions"])

    reply = grpc_predict(typed_gateway, BINARY, ROWS)
    assert reply.kind == "binary"
    assert [p.score for p in reply.predictions] == pytest.approx(scores, abs=1e-6)
    assert [p.class_label.int_value for p in reply.predictions] == [p["label"] for p in body["predictions"]]


def test_a_regressor_answers_the_native_value(typed_stack: TypedStack, typed_gateway: servers.Gateway):
    response = predict(typed_gateway, REGRESSOR, {"rows": ROWS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "regression" and "classes" not in body
    want = typed_stack.models[REGRESSOR].predict(native_frame(typed_stack, ROWS))
    np.testing.assert_allclose([p["value"] for p in body["predictions"]], want, rtol=1e-4, atol=1e-3)
    reply = grpc_predict(typed_gateway, REGRESSOR, ROWS)
    np.testing.assert_allclose([p.value for p in reply.predictions], want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("model", [MULTICLASS, NAMED])
def test_a_multiclass_model_answers_labels_of_its_classes_type_and_its_classes_once(
    typed_stack: TypedStack, typed_gateway: servers.Gateway, model: str
):
    response = predict(typed_gateway, model, {"rows": ROWS})
    assert response.status_code == 200, response.text
    body = response.json()
    native = typed_stack.models[model]
    frame = native_frame(typed_stack, ROWS)
    labels = native.predict(frame).tolist()  # ints for one model, strings for the other
    assert body["kind"] == "multiclass" and body["classes"] == native.classes_.tolist()
    assert [p["label"] for p in body["predictions"]] == labels
    np.testing.assert_allclose(
        [p["probabilities"] for p in body["predictions"]], native.predict_proba(frame), atol=1e-5
    )
    reply = grpc_predict(typed_gateway, model, ROWS)
    assert [getattr(p.class_label, p.class_label.WhichOneof("kind")) for p in reply.predictions] == labels
    assert [getattr(c, c.WhichOneof("kind")) for c in reply.classes] == native.classes_.tolist()


@pytest.mark.parametrize(
    "row, field, fragment",
    [
        ({**ROWS[0], "customer_id": 17}, "rows[0].customer_id", "must be a string"),
        ({**ROWS[0], "channel": 3}, "rows[0].channel", "must be a string"),
        ({**ROWS[0], "amount": "lots"}, "rows[0].amount", "finite number"),
        ({**ROWS[0], "amount": True}, "rows[0].amount", "finite number"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_422_naming_the_field(
    typed_gateway: servers.Gateway, row: dict[str, Any], field: str, fragment: str
):
    response = predict(typed_gateway, BINARY, {"rows": [row]})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field and fragment in response.json()["error"]


def test_a_grpc_integer_for_a_string_key_is_invalid(typed_gateway: servers.Gateway):
    with grpc.insecure_channel(typed_gateway.grpc) as channel:
        fields = {
            "customer_id": gateway_pb2.Value(int_value=17),
            "amount": gateway_pb2.Value(double_value=1.0),
            "channel": gateway_pb2.Value(string_value="web"),
        }
        request = gateway_pb2.PredictRequest(model=BINARY, rows=[gateway_pb2.Row(fields=fields)])
        with pytest.raises(grpc.RpcError) as err:
            gateway_pb2_grpc.GatewayStub(channel).Predict(request, timeout=20)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rows[0].customer_id" in err.value.details()


def test_an_unknown_customer_is_a_404_or_scored_on_stand_ins_under_the_default_policy(
    typed_stack: TypedStack, typed_gateway: servers.Gateway, tmp_path: Path
):
    rows = [ROWS[0], {"customer_id": "C-9999", "amount": 30.0, "channel": "app"}]
    refused = predict(typed_gateway, BINARY, {"rows": rows})
    assert refused.status_code == 404 and refused.json()["field"] == "rows[1]"
    assert "customer_id=C-9999" in refused.json()["error"]
    with servers.gateway_process(tmp_path, typed_env(typed_stack, GATEWAY_MISSING_ENTITIES="default")) as gw:
        response = predict(gw, BINARY, {"rows": rows})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert [p["defaults_used"] for p in predictions] == [False, True]
    # "" for the unknown segment (all zeros in the one-hot), NaN numbers imputed by the model
    want = typed_stack.models[BINARY].predict_proba(native_frame(typed_stack, rows))[:, 1]
    np.testing.assert_allclose([p["score"] for p in predictions], want, atol=1e-5)
