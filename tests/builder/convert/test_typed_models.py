"""Every input shape through the real parts: typed DataFrame pipelines (string, int64, float
columns, unseen categories, NaN), text, numpy-trained models, multi-class with string labels,
regressors, PyTorch with two typed inputs. Each is registered in a SQLite MLflow registry,
exported (some through the real CLI), served on the embedded Triton, and Triton's answers over
HTTP and gRPC are compared with the native model's on fresh rows. Clients build their inputs
from what the export recorded in the config (``serving.*``), as the gateway does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import servers
from tests.builder import helpers
from tests.builder.convert.helpers import infer, request_tensors, served_facts
from tests.builder.helpers import Typed

pytestmark = pytest.mark.integration

VIA_CLI = {"ct-binary", "tfidf"}
LAYOUTS = {
    "ct-binary": "columns",
    "ct-multiclass": "columns",
    "ct-regressor": "columns",
    "tfidf": "columns",
    "np-logistic": "tensors",
    "np-svc": "tensors",
    "hgb-nan": "matrix",
    "torch-two": "tensors",
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="session")
def typed(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = tmp_path_factory.mktemp("typed") / "model_repo"
    trained = {name: factory(name) for name, factory in helpers.FACTORIES.items()}
    for name in trained:
        if name in VIA_CLI:
            done = cli("export", f"models:/{name}@champion", "--repo", str(repo))
            assert done.returncode == 0, done.stderr
        else:
            export_model(ExportRequest(f"models:/{name}@champion", repo))
    return {"repo": repo, "models": trained}


@pytest.fixture(scope="session")
def triton(
    typed: dict[str, Any], triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("typed-log") / "tritonserver.log"
    with servers.serving(typed["repo"], triton_runtime, log, timeout=240) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("name", list(helpers.FACTORIES))
def test_triton_answers_like_the_native_model(
    triton: TritonServer, typed: dict[str, Any], name: str, protocol: str
):
    model: Typed = typed["models"][name]
    facts = served_facts(triton, name)
    expected = helpers.native_answer(model)
    got = infer(triton, protocol, name, request_tensors(facts, model.fresh), list(expected))
    for key, want in expected.items():
        value = got[key]
        assert value.shape == want.shape, key
        if value.dtype == object:  # string labels come back as bytes
            np.testing.assert_array_equal(np.vectorize(bytes.decode)(value), want.astype(str))
        elif want.dtype.kind in "iu":
            np.testing.assert_array_equal(value, want)
        else:
            np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(helpers.FACTORIES))
def test_each_version_says_its_layout_kind_and_classes(
    triton: TritonServer, typed: dict[str, Any], name: str
):
    model: Typed = typed["models"][name]
    facts = served_facts(triton, name)
    assert facts["layout"] == LAYOUTS[name]
    assert facts["kind"] == model.kind
    if model.kind in ("binary", "multiclass"):
        assert facts["classes"] == model.native.classes_.tolist()
        assert facts["outputs"] == {"label": "label", "probabilities": "probabilities"}
    elif model.kind == "regression":
        assert facts["outputs"] == {"value": "prediction"}
    meta = json.loads((typed["repo"] / name / "1" / "metadata.json").read_text())
    assert meta["serving"]["kind"] == model.kind and meta["parity"]["passed"]


def test_typed_columns_are_one_input_per_column_in_signature_order(triton: TritonServer):
    facts = served_facts(triton, "ct-binary")
    assert facts["inputs"] == [
        ("amount", "TYPE_FP32"),
        ("country", "TYPE_STRING"),
        ("n_items", "TYPE_INT64"),
        ("merchant_risk", "TYPE_FP32"),
    ]
    assert [c["dtype"] for c in facts["columns"]] == ["float32", "string", "int64", "float32"]


def test_string_models_parity_rows_come_from_what_the_model_learned(typed: dict[str, Any]):
    meta = json.loads((typed["repo"] / "ct-binary" / "1" / "metadata.json").read_text())
    assert meta["parity"]["source"] == "input_example+generated"
    assert meta["parity"]["rows"] > 5


def test_validate_warns_about_string_operators_but_passes(typed: dict[str, Any]):
    done = cli("validate", "--repo", str(typed["repo"]))
    assert done.returncode == 0, done.stderr
    assert "warning: tfidf: uses ONNX string operators" in " ".join(done.stderr.split())
    as_json = json.loads(cli("validate", "--repo", str(typed["repo"]), "--json").stdout)
    (warning,) = as_json["warnings"]  # one-hot encoding needs no locale: only the text model warns
    assert warning.startswith("tfidf:") and "C.UTF-8" in warning


def _refused(model_uri: str, repo: Path) -> tuple[str, str]:
    done = cli("export", model_uri, "--repo", str(repo))
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    error = next(line for line in lines if line.startswith("error:"))
    hint = next(line for line in lines if line.startswith("hint:"))
    assert not repo.exists(), "a refused export must write nothing"
    return error, hint


def test_datetime_column_is_refused_with_what_to_do(mlflow_registry: str, tmp_path: Path):
    import mlflow
    from mlflow.models import infer_signature
    from sklearn.linear_model import LogisticRegression

    X = pd.DataFrame({"amount": [1.0, 2.0, 3.0, 4.0], "seen_at": pd.date_range("2026-01-01", periods=4)})
    model = LogisticRegression().fit(X[["amount"]], [0, 1, 0, 1])
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            signature=infer_signature(X),
            registered_model_name="dt-model",
            pip_requirements=["scikit-learn"],  # given: inferring them takes seconds
        )
    error, hint = _refused(f"models:/dt-model/{info.registered_model_version}", tmp_path / "repo")
    assert "'seen_at'" in error and "datetime" in error
    assert "epoch seconds" in hint


def test_custom_pyfunc_is_refused_with_a_hint(mlflow_registry: str, tmp_path: Path):
    import mlflow

    class Doubler(mlflow.pyfunc.PythonModel):
        def predict(self, context: Any, model_input: Any, params: Any = None) -> Any:
            return model_input * 2

    with mlflow.start_run():
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=Doubler(),
            input_example=pd.DataFrame({"x": [1.0, 2.0]}),
            registered_model_name="custom-pyfunc",
            pip_requirements=["mlflow"],  # given: inferring them takes seconds
        )
    error, hint = _refused(f"models:/custom-pyfunc/{info.registered_model_version}", tmp_path / "repo")
    assert "python_function only" in error
    assert "mlflow.onnx.log_model" in hint
