"""The new model kinds (issue 19), from the registry to the gateway, on one model repository and
one Triton: their setup is most of the cost, so one module builds them once (the models are
trained by tests/builder/export/helpers.py).

Exported through the real MLflow registry: outlier detectors, classifiers without
``predict_proba``, multi-target regressors, QuadraticDiscriminantAnalysis, an all-numeric
DataFrame pipeline that picks its columns by name (the ``kind-*`` models); each with the serving
contract it writes and its parity. Then the estimators a converter or ONNX Runtime cannot serve
are refused with one line naming them (never a traceback), and one Triton serves the new kinds as
the native models answer.

The same Triton serves three scikit-learn Pipelines (the ``fraud-*`` models) trained on the demo's
Feast feature service ``fraud_v1`` (SQLite online store) point-in-time join, each logged with the
run's ``feast.*`` tags and exported by the builder, with `gateway serve` in front. The kinds
(docs/serving-contract.md):

- an outlier detector (IsolationForest): ``kind`` ``outlier``; ``outlier``, ``label`` -1/1 and
  ``score`` (the decision function);
- a classifier without probabilities (LinearSVC, binary): ``label`` and ``scores`` (one signed
  distance);
- a two-target regressor (Ridge): ``value`` a list of two floats.

Each gateway answer is checked against the native model on the same rows, assembled by the test
from the online store the way the gateway assembles them (request fields + online features,
numbers as float32 on the wire), over HTTP and over the gateway's gRPC API, with the gateway
calling Triton through its HTTP client and through its gRPC client. Every prediction also carries
its ``id`` (the request's id and its row; tests/gateway/shadow/test_gateway_shadow.py checks them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pandas as pd
import pytest
import requests

from builder.errors import ConversionError
from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value
from support import models, servers
from tests.builder.export.helpers import (
    FRAUD_MODELS,
    LINSVC,
    OUTLIER,
    TWO_TARGETS,
    FraudKinds,
    fitted,
    native_frame,
    register,
    register_fraud_models,
    register_kind_models,
)
from tests.gateway.helpers import copy_feature_repo

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def natives(mlflow_registry: str) -> dict[str, Any]:
    """The ``kind-*`` models, registered; name -> the fitted native model."""
    return register_kind_models()


@pytest.fixture(scope="module")
def repo(natives: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model repository, with the ``kind-*`` models exported (the ``triton`` fixture adds the
    ``fraud-*`` ones before it starts the server)."""
    repo = tmp_path_factory.mktemp("kinds") / "model_repo"
    for name in natives:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    return repo


def metadata(repo: Path, name: str) -> dict[str, Any]:
    return json.loads((repo / name / "1" / "metadata.json").read_text())


def config_parameters(repo: Path, name: str) -> dict[str, str]:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse((repo / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    return {k: v.string_value for k, v in config.parameters.items()}


def outputs_of(meta: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    return {o["name"]: (o["dtype"], o["shape"]) for o in meta["signature"]["outputs"]}


def test_an_outlier_detector_serves_label_and_score(repo: Path) -> None:
    meta = metadata(repo, "kind-iforest")
    serving = meta["serving"]
    assert serving["kind"] == "outlier" and "classes" not in serving
    assert serving["outputs"] == {"label": "label", "score": "score"}
    assert serving["score"] == {"source": "decision_function", "outlier_below": 0.0}
    assert outputs_of(meta) == {"label": ("int64", [-1, 1]), "score": ("float32", [-1, 1])}
    params = config_parameters(repo, "kind-iforest")
    assert params["serving.kind"] == "outlier"
    assert json.loads(params["serving.score"]) == {"source": "decision_function", "outlier_below": 0.0}
    assert meta["parity"]["passed"] and set(meta["parity"]["outputs"]) == {"label", "score"}
    prediction = meta["drift"]["reference"]["prediction"]
    assert prediction["name"] == "score" and prediction["kind"] == "numeric"


@pytest.mark.parametrize(
    ("name", "kind", "columns"),
    [("kind-linsvc", "binary", 1), ("kind-svc", "binary", 1), ("kind-ridge3", "multiclass", 3)],
)
def test_a_classifier_without_probabilities_serves_label_and_scores(
    repo: Path, name: str, kind: str, columns: int
) -> None:
    meta = metadata(repo, name)
    serving = meta["serving"]
    assert serving["kind"] == kind and len(serving["classes"]) == max(columns, 2)
    assert serving["outputs"] == {"label": "label", "scores": "scores"}
    assert outputs_of(meta) == {"label": ("int64", [-1, 1]), "scores": ("float32", [-1, columns])}
    assert meta["parity"]["passed"] and set(meta["parity"]["outputs"]) == {"label", "scores"}
    assert json.loads(config_parameters(repo, name)["serving.outputs"]) == {
        "label": "label",
        "scores": "scores",
    }


def test_a_label_only_classifier_drift_compares_its_labels(repo: Path) -> None:
    prediction = metadata(repo, "kind-linsvc")["drift"]["reference"]["prediction"]
    assert prediction["name"] == "label" and prediction["kind"] == "categorical"
    assert prediction["categories"] == [0, 1]


@pytest.mark.parametrize("name", ["kind-mtlasso", "kind-multiout"])
def test_a_multi_target_regressor_serves_one_column_per_target(repo: Path, name: str) -> None:
    meta = metadata(repo, name)
    assert meta["serving"]["kind"] == "regression" and meta["serving"]["targets"] == 2
    assert outputs_of(meta) == {"prediction": ("float32", [-1, 2])}
    assert config_parameters(repo, name)["serving.targets"] == "2"
    assert meta["parity"]["passed"] and meta["parity"]["outputs"]["prediction"]["elements"] % 2 == 0


def test_a_multi_target_regressor_drift_covers_its_inputs_only(repo: Path) -> None:
    drift = metadata(repo, "kind-mtlasso")["drift"]
    assert "prediction" not in drift["reference"] and len(drift["reference"]["features"]) == 5
    assert (
        drift["prediction_reason"]
        == "a multi-target regressor: prediction drift is per target and not recorded"
    )
    assert "drift.reference" in config_parameters(repo, "kind-mtlasso")


def test_one_target_regressors_and_classifiers_keep_their_contract(repo: Path) -> None:
    meta = metadata(repo, "kind-qda")  # its converter gives labels as one row: re-declared [N, 1]
    assert meta["serving"]["outputs"] == {"label": "label", "probabilities": "probabilities"}
    assert outputs_of(meta) == {"label": ("int64", [-1, 1]), "probabilities": ("float32", [-1, 3])}
    assert meta["parity"]["passed"]
    assert "targets" not in metadata(repo, "kind-iforest")["serving"]


def test_a_pipeline_picking_numeric_columns_by_name_is_served_by_column(repo: Path) -> None:
    meta = metadata(repo, "kind-bycolumn")
    assert meta["serving"]["layout"] == "columns"
    dtypes = {c["name"]: c["dtype"] for c in meta["serving"]["columns"]}
    assert dtypes == {
        "amount": "float32",
        "hour": "int64",
        "merchant_risk": "float32",
        "user_age_days": "float32",
        "tx_last_24h": "int64",
    }
    assert [i["name"] for i in meta["signature"]["inputs"]] == list(dtypes)
    assert meta["parity"]["passed"]


# -- refused, never a traceback ------------------------------------------------------------


@pytest.fixture(scope="module")
def unservable(mlflow_registry: str) -> None:
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.impute import KNNImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multioutput import MultiOutputClassifier
    from sklearn.neighbors import RadiusNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = models.dataset(120)
    scaled = StandardScaler().fit(X)
    Xs = pd.DataFrame(scaled.transform(X), columns=X.columns)
    register("bad-gpc", fitted(lambda: GaussianProcessClassifier().fit(Xs, y)), Xs)
    register("bad-radius", fitted(lambda: RadiusNeighborsClassifier(radius=0.5).fit(Xs, y)), Xs)
    two = np.c_[y, 1 - y]
    register("bad-multilabel", fitted(lambda: MultiOutputClassifier(LogisticRegression()).fit(X, two)), X)
    holes = X.mask(np.random.default_rng(0).uniform(size=X.shape) < 0.05)
    register(
        "knn-imputed", fitted(lambda: make_pipeline(KNNImputer(), LogisticRegression()).fit(holes, y)), holes
    )


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("bad-gpc", "ONNX Runtime cannot load the graph skl2onnx made for GaussianProcessClassifier"),
        ("bad-radius", "ONNX Runtime cannot run the graph skl2onnx made for RadiusNeighborsClassifier"),
        ("bad-multilabel", "MultiOutputClassifier predicts several label columns"),
        ("knn-imputed", "skl2onnx cannot convert the Pipeline (KNNImputer -> LogisticRegression)"),
    ],
)
def test_what_cannot_be_served_is_refused_in_one_line(
    unservable: None, tmp_path: Path, name: str, says: str
) -> None:
    with pytest.raises(ConversionError) as refused:
        export_model(ExportRequest(f"models:/{name}@champion", tmp_path / "repo"))
    message = refused.value.message
    assert says in message and "\n" not in message
    assert refused.value.hint
    assert not (tmp_path / "repo").exists()


def test_knn_imputer_exports_at_the_opset_its_hint_names(unservable: None, tmp_path: Path) -> None:
    with pytest.raises(ConversionError) as refused:
        export_model(ExportRequest("models:/knn-imputed@champion", tmp_path / "a"))
    assert "--opset 18" in (refused.value.hint or "")
    result = export_model(ExportRequest("models:/knn-imputed@champion", tmp_path / "b", opset=18))
    assert result.parity.passed


# -- served by Triton ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fraud(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> FraudKinds:
    """The ``fraud-*`` models, trained from a fresh copy of the Feast repo and registered."""
    return register_fraud_models(copy_feature_repo(tmp_path_factory.mktemp("kinds-feast") / "feature_repo"))


@pytest.fixture(scope="module")
def triton(
    repo: Path, fraud: FraudKinds, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    """One Triton for the whole module: the ``kind-*`` and the ``fraud-*`` models."""
    for name in FRAUD_MODELS:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    log = tmp_path_factory.mktemp("kinds-triton") / "tritonserver.log"
    with servers.serving(repo, triton_runtime, log) as server:
        yield server


def infer(server: TritonServer, model: str, x: np.ndarray, outputs: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor], outputs=[httpclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


def test_triton_answers_the_new_kinds_like_the_native_models(
    triton: TritonServer, natives: dict[str, Any]
) -> None:
    X, _ = models.dataset()
    x = X.iloc[:16].to_numpy(dtype=np.float32)
    frame = pd.DataFrame(x.astype(np.float64), columns=models.FEATURES)

    outlier = natives["kind-iforest"]
    got = infer(triton, "kind-iforest", x, ["label", "score"])
    np.testing.assert_array_equal(got["label"], outlier.predict(frame).reshape(-1, 1))
    np.testing.assert_allclose(
        got["score"], outlier.decision_function(frame).reshape(-1, 1), atol=1e-5, rtol=1e-5
    )

    multi = natives["kind-mtlasso"]
    got = infer(triton, "kind-mtlasso", x, ["prediction"])
    assert got["prediction"].shape == (16, 2)
    np.testing.assert_allclose(got["prediction"], multi.predict(frame), atol=1e-4, rtol=1e-5)

    for name in ("kind-linsvc", "kind-ridge3"):
        clf = natives[name]
        got = infer(triton, name, x, ["label", "scores"])
        np.testing.assert_array_equal(got["label"], clf.predict(frame).reshape(-1, 1))
        scores = np.asarray(clf.decision_function(frame)).reshape(16, -1)
        np.testing.assert_allclose(got["scores"], scores, atol=1e-4, rtol=1e-5)


# -- served by the gateway -------------------------------------------------------------------

# The gateway suite's rows, plus extreme request values an isolation forest isolates quickly.
ROWS = [
    {"user_id": 17, "merchant_id": 3, "amount": 42.5, "hour": 13, "channel": "web"},
    {"user_id": 250, "merchant_id": 88, "amount": 980.0, "hour": 3, "channel": "app"},
    {"user_id": 401, "merchant_id": 12, "amount": 12.0, "hour": 20, "channel": "pos"},
    {"user_id": 33, "merchant_id": 41, "amount": 25000.0, "hour": 4, "channel": "kiosk"},
    {"user_id": 120, "merchant_id": 7, "amount": 60.0, "hour": 11, "channel": "web"},
]


@pytest.fixture(scope="module", params=["http", "grpc"])
def kinds_gateway(
    request: pytest.FixtureRequest,
    fraud: FraudKinds,
    triton: TritonServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[servers.Gateway]:
    """One gateway per Triton client (HTTP and gRPC decode the new outputs each their own way),
    serving the ``fraud-*`` models of the module's Triton."""
    url = f"http://{triton.http_url}" if request.param == "http" else f"grpc://{triton.grpc_url}"
    env = {
        "GATEWAY_TRITON_URL": url,
        "GATEWAY_FEATURE_REPO": str(fraud.feature_repo),
        "GATEWAY_MODELS": json.dumps(list(FRAUD_MODELS)),  # /readyz waits for all three
    }
    with servers.gateway_process(tmp_path_factory.mktemp("kinds-gw"), env) as gw:
        yield gw


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
    fraud: FraudKinds, kinds_gateway: servers.Gateway
):
    body = predict(kinds_gateway, OUTLIER, ROWS)
    assert body["kind"] == "outlier" and "classes" not in body
    assert body["version"] == fraud.versions[OUTLIER]
    native = fraud.models[OUTLIER]
    frame = native_frame(fraud, ROWS)
    want_scores, want_labels = native.decision_function(frame), native.predict(frame)
    assert {-1, 1} == set(want_labels.tolist())  # the rows hold both answers
    predictions = body["predictions"]
    assert all(set(p) == {"outlier", "label", "score", "defaults_used", "id"} for p in predictions)
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
    fraud: FraudKinds, kinds_gateway: servers.Gateway
):
    body = predict(kinds_gateway, LINSVC, ROWS)
    native = fraud.models[LINSVC]
    assert body["kind"] == "binary" and body["classes"] == native.classes_.tolist() == [0, 1]
    frame = native_frame(fraud, ROWS)
    want_labels, want_scores = native.predict(frame), native.decision_function(frame)
    assert set(want_labels.tolist()) == {0, 1}  # the rows hold both answers
    predictions = body["predictions"]
    assert all(set(p) == {"label", "scores", "defaults_used", "id"} for p in predictions)  # no probabilities
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
    fraud: FraudKinds, kinds_gateway: servers.Gateway
):
    body = predict(kinds_gateway, TWO_TARGETS, ROWS)
    assert body["kind"] == "regression" and "classes" not in body
    want = fraud.models[TWO_TARGETS].predict(native_frame(fraud, ROWS))
    assert want.shape == (len(ROWS), 2)
    predictions = body["predictions"]
    assert all(isinstance(p["value"], list) and len(p["value"]) == 2 for p in predictions)
    np.testing.assert_allclose([p["value"] for p in predictions], want, rtol=1e-4, atol=1e-3)

    reply = grpc_predict(kinds_gateway, TWO_TARGETS, ROWS)
    assert reply.kind == "regression"
    np.testing.assert_allclose([list(p.values) for p in reply.predictions], want, rtol=1e-4, atol=1e-3)


def test_one_row_body_answers_the_same_as_in_a_batch(fraud: FraudKinds, kinds_gateway: servers.Gateway):
    for model in FRAUD_MODELS:
        response = requests.post(f"{kinds_gateway.url}/v1/models/{model}/predict", json=ROWS[3], timeout=20)
        assert response.status_code == 200, response.text
        (one,) = response.json()["predictions"]
        (batched,) = [p for i, p in enumerate(predict(kinds_gateway, model, ROWS)["predictions"]) if i == 3]
        assert one.keys() == batched.keys()
        for key, value in one.items():
            if key == "id":  # each request has its own
                continue
            # float32, batched or not: a few ulps apart (at 1250, one ulp is 1.2e-4)
            assert value == pytest.approx(batched[key], rel=1e-6, abs=1e-5), (model, key)
