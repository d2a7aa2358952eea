"""Models of every input shape a data scientist registers, trained in seconds.

Each factory trains on a small synthetic data set, logs the model with an input example (so
MLflow infers the signature: column-based for DataFrames, tensor-based for numpy arrays),
registers it with the alias ``champion`` and returns it with fresh rows to score, in the form
the model was trained on (a DataFrame, a Series of documents, an array, tensors).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import pandas as pd
from onnx import TensorProto, helper

from builder.convert.base import normalize_outputs
from builder.ensemble.user_steps import UserStep, parse_step
from support.models import _register

COUNTRIES = ["us", "de", "fr", "br", "jp"]
SKOPS_TYPES = [
    "sklearn.tree._tree.Tree",
    "numpy.dtype",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
]


@dataclass
class Typed:
    name: str
    native: Any
    fresh: Any  # rows to score, as the model takes them natively
    kind: str  # binary | multiclass | regression | other


def _frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, rows),
            "country": rng.choice(COUNTRIES, rows),
            "n_items": rng.integers(1, 6, rows),
            "merchant_risk": rng.uniform(0, 1, rows),
        }
    )


def _log_sklearn(name: str, model: Any, example: Any, reference: pd.DataFrame | None = None) -> None:
    import mlflow

    from builder.reference import log_reference

    with mlflow.start_run():
        if reference is not None:  # the training frame, for drift (docs/drift.md)
            log_reference(reference)
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=example,
            registered_model_name=name,
            skops_trusted_types=SKOPS_TYPES,
            # Given, not inferred: inference imports every library in the process (~10 s each).
            pip_requirements=["scikit-learn"],
        )
    _register(name, info, model, pd.DataFrame())


def _tabular_pipeline(estimator: Any) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    columns = ColumnTransformer(
        [
            (
                "num",
                make_pipeline(SimpleImputer(strategy="median"), StandardScaler()),
                ["amount", "merchant_risk"],
            ),
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["country", "n_items"]),
        ]
    )
    return make_pipeline(columns, estimator)


def column_transformer_binary(name: str) -> Typed:
    """The most common tabular model: impute + scale numerics, one-hot strings and ints."""
    from sklearn.ensemble import GradientBoostingClassifier

    X = _frame(400, 0)
    y = ((X.country == "br") | (X.merchant_risk > 0.7)).astype(int)
    model = _tabular_pipeline(GradientBoostingClassifier(n_estimators=20, max_depth=3)).fit(X, y)
    _log_sklearn(name, model, X.iloc[:5], reference=X)
    fresh = _frame(24, 9)
    fresh.loc[[0, 5], "country"] = "never-seen"  # an unknown category: all-zero one-hot
    fresh.loc[[1, 2], "amount"] = np.nan  # imputed by the pipeline
    return Typed(name, model, fresh, "binary")


def column_transformer_logistic(name: str) -> Typed:
    """The binary Pipeline with a logistic regression: soft probabilities, so a decision
    threshold moves labels (the boosted trees' are all near 0 or 1). Not in FACTORIES."""
    from sklearn.linear_model import LogisticRegression

    X = _frame(400, 0)
    y = ((X.country == "br") | (X.merchant_risk > 0.7)).astype(int)
    model = _tabular_pipeline(LogisticRegression()).fit(X, y)
    _log_sklearn(name, model, X.iloc[:5], reference=X)
    fresh = _frame(48, 13)
    fresh.loc[[0, 5], "country"] = "never-seen"
    fresh.loc[[1, 2], "amount"] = np.nan
    return Typed(name, model, fresh, "binary")


def column_transformer_multiclass_strings(name: str) -> Typed:
    """Multi-class with string class labels (a RandomForest over the same columns)."""
    from sklearn.ensemble import RandomForestClassifier

    X = _frame(400, 1)
    y = np.where(X.merchant_risk > 0.66, "high", np.where(X.merchant_risk > 0.33, "medium", "low"))
    model = _tabular_pipeline(RandomForestClassifier(n_estimators=15, max_depth=6, random_state=0)).fit(X, y)
    _log_sklearn(name, model, X.iloc[:5], reference=X)
    return Typed(name, model, _frame(24, 10), "multiclass")


def column_transformer_regressor(name: str) -> Typed:
    from sklearn.linear_model import Ridge

    X = _frame(400, 2)
    y = 0.1 * X.amount.to_numpy() + 5 * (X.country == "jp") + X.n_items.to_numpy()
    model = _tabular_pipeline(Ridge()).fit(X, y)
    _log_sklearn(name, model, X.iloc[:5], reference=X)
    return Typed(name, model, _frame(24, 11), "regression")


REVIEWS = [
    "great product fast delivery",
    "terrible quality broke after a day",
    "good value would buy again",
    "awful support never again",
    "excellent build and great price",
    "bad packaging and slow shipping",
]


def tfidf_text(name: str) -> Typed:
    """A TF-IDF text classifier over one string column (fitted on a Series of documents)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(3)
    docs = pd.Series([REVIEWS[i] + " " + REVIEWS[j] for i, j in rng.integers(0, 6, (300, 2))], name="review")
    y = docs.str.contains("great|good|excellent").astype(int)
    model = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(docs, y)
    _log_sklearn(name, model, docs.iloc[:5].to_frame())
    fresh = pd.Series(["Great VALUE, fast delivery", "slow support", "", "unknown words only", *REVIEWS])
    return Typed(name, model, fresh, "binary")


def numpy_logistic(name: str) -> Typed:
    """Trained on a numpy array: MLflow records a tensor signature."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 6))
    y = (X[:, 0] + X[:, 3] > 0).astype(int)
    model = LogisticRegression().fit(X, y)
    _log_sklearn(name, model, X[:5])
    return Typed(name, model, rng.normal(size=(20, 6)), "binary")


def numpy_svc(name: str) -> Typed:
    from sklearn.svm import SVC

    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 4))
    y = (X[:, 1] * X[:, 2] > 0).astype(int)
    with warnings.catch_warnings():
        # scikit-learn 1.9 deprecates probability=True, but registries are full of such models.
        warnings.simplefilter("ignore", FutureWarning)
        model = SVC(probability=True, random_state=0).fit(X, y)
    _log_sklearn(name, model, X[:5])
    return Typed(name, model, rng.normal(size=(20, 4)), "binary")


def hist_gradient_boosting_nan(name: str) -> Typed:
    """Numeric columns with missing values the model handles natively."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    X = _frame(400, 6).drop(columns=["country"]).astype(float)
    X.loc[X.index[::6], "merchant_risk"] = np.nan
    y = ((X.merchant_risk.fillna(0.9) > 0.6) | (X.amount > 60)).astype(int)
    model = HistGradientBoostingClassifier(max_iter=20).fit(X, y)
    _log_sklearn(name, model, X.iloc[:8])  # rows 0 and 6 carry the NaN
    fresh = _frame(24, 12).drop(columns=["country"]).astype(float)
    fresh.loc[fresh.index[::3], "merchant_risk"] = np.nan
    return Typed(name, model, fresh, "binary")


def torch_two_inputs(name: str) -> Typed:
    """PyTorch with a float input and an int64 input (an embedding index). Two named inputs
    need a pickled module (MLflow's default pt2 format takes one positional example) and a
    signature given by hand (MLflow infers none from a dict example for PyTorch)."""
    import mlflow
    import torch
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    from tests.builder.convert.helpers import EmbeddingScorer

    torch.manual_seed(0)
    module = EmbeddingScorer().eval()
    rng = np.random.default_rng(7)
    signature = ModelSignature(
        inputs=Schema(
            [
                TensorSpec(np.dtype(np.float32), (-1, 4), "x"),
                TensorSpec(np.dtype(np.int64), (-1, 1), "category"),
            ]
        ),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 1), "output")]),
    )
    with mlflow.start_run():
        info = mlflow.pytorch.log_model(
            module,
            name="model",
            signature=signature,
            registered_model_name=name,
            serialization_format="pickle",
            pip_requirements=["torch"],
        )
    _register(name, info, module, pd.DataFrame())
    fresh = {
        "x": rng.normal(size=(12, 4)).astype(np.float32),
        "category": rng.integers(0, 8, (12, 1)).astype(np.int64),
    }
    return Typed(name, module, fresh, "other")


def native_answer(typed: Typed) -> dict[str, np.ndarray]:
    """The original model's predictions on ``typed.fresh``, keyed by the served output names."""
    if typed.kind == "other":
        import torch

        with torch.no_grad():
            tensors = {k: torch.from_numpy(v) for k, v in typed.fresh.items()}
            return {"output": typed.native(tensors["x"], tensors["category"]).numpy()}
    if typed.kind == "regression":
        return {"prediction": np.asarray(typed.native.predict(typed.fresh)).reshape(-1, 1)}
    return {
        "label": np.asarray(typed.native.predict(typed.fresh)).reshape(-1, 1),
        "probabilities": np.asarray(typed.native.predict_proba(typed.fresh)),
    }


FACTORIES = {
    "ct-binary": column_transformer_binary,
    "ct-multiclass": column_transformer_multiclass_strings,
    "ct-regressor": column_transformer_regressor,
    "tfidf": tfidf_text,
    "np-logistic": numpy_logistic,
    "np-svc": numpy_svc,
    "hgb-nan": hist_gradient_boosting_nan,
    "torch-two": torch_two_inputs,
}


def tiny_classifier() -> onnx.ModelProto:
    """probabilities = softmax(x @ W) and label = argmax, like a converted classifier."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [3, 2], np.arange(6, dtype=np.float32).tolist())
    nodes = [
        helper.make_node("MatMul", ["input", "W"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
        helper.make_node("ArgMax", ["probabilities"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 2]),
        ],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return normalize_outputs(model, {"input": np.ones((2, 3), np.float32)})


CODE = b"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("out", pb_utils.get_input_tensor_by_name(r, "in").as_numpy())]
            )
            for r in requests
        ]
"""


def port(name: str, data_type: str = "TYPE_FP32", dims: list[int] | None = None, **link: Any) -> dict:
    return {"name": name, "data_type": data_type, "dims": dims or [1], **link}


def step(name: str, spec: dict[str, Any], code: bytes | None = CODE) -> UserStep:
    files = {"step.json": json.dumps(spec).encode(), **({"model.py": code} if code is not None else {})}
    return parse_step(name, files, f"runs:/r/serving/steps/{name}")


# A pre step that clips the raw features, a post step that caps the thresholded score.
CLIP = {
    "position": "pre",
    "inputs": [port("in", dims=[3], **{"from": "input"})],
    "outputs": [port("out", dims=[3], to="input")],
}


CAP = {
    "position": "post",
    "inputs": [port("in", **{"from": "score"})],
    "outputs": [port("out", to="score")],
    "config": {"parameters": {"cap": "0.8"}, "instance_count": 2},
}


def builder_in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``builder ARGS`` run in this process, as ``main()`` runs it (the same error contract:
    ``run_app``), its output captured: what a refusal prints and its exit code, without the ~4 s
    a fresh interpreter pays importing MLflow and opening the registry. The process boundary
    itself (no traceback, ``sys.exit`` codes) is tested through real processes in
    tests/project/test_error_contract.py and in one case of each CLI test module."""
    from builder.cli.main import _register_commands, app, report_error, run_app

    _register_commands()
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["builder", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = run_app(app, "builder", report_error)
            except SystemExit as exc:  # a command that exits itself (typer.Exit is returned)
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    return subprocess.CompletedProcess(["builder", *args], code, out.getvalue(), err.getvalue())
