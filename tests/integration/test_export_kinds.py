"""Models beyond "a classifier with probabilities or a one-target regressor", exported through
the real MLflow registry: outlier detectors, classifiers without ``predict_proba``, multi-target
regressors, QuadraticDiscriminantAnalysis, an all-numeric DataFrame pipeline that picks its
columns by name; each with the serving contract it writes and its parity. Then the estimators a
converter or ONNX Runtime cannot serve are refused with one line naming them (never a
traceback), and one Triton serves the new kinds as the native models answer."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.errors import ConversionError
from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import models, servers

pytestmark = pytest.mark.integration


def register(name: str, model: Any, X: pd.DataFrame, *, reference: bool = False) -> Any:
    """Register ``model`` (fitted) as ``name@champion``; returns the model."""
    models.register_fitted(name, model, X, reference=reference)
    return model


def fitted(make: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def typed_frame() -> pd.DataFrame:
    X, _ = models.dataset()
    return X.assign(hour=X.hour.astype("int64"), tx_last_24h=X.tx_last_24h.astype("int64"))


@pytest.fixture(scope="module")
def natives(mlflow_registry: str) -> dict[str, Any]:
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


@pytest.fixture(scope="module")
def repo(natives: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
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
def triton(
    repo: Path, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
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
