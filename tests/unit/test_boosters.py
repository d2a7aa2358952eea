"""Boosters through `builder export`: native XGBoost/LightGBM boosters, scikit-learn-API boosters
trained on arrays, CatBoost, and the objectives and inputs that are refused.

Every model is trained here (tiny: <= 20 trees, <= 400 rows), logged with its MLflow flavor into
the real SQLite registry and exported; the served ONNX is run with onnxruntime on rows the model
never saw and compared with what the native library itself predicts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.errors import ConversionError
from builder.export import ExportRequest, export_model
from support import models

ROUNDS = 10
# float32 inputs and tree thresholds: what parity itself allows (builder's defaults).
ATOL = 1e-5

Native = Callable[[pd.DataFrame], dict[str, np.ndarray]]


@dataclass
class Trained:
    """A registered model and the native library's own answer on new rows."""

    name: str
    native: Native
    kind: str
    classes: list[Any] | None


def features(rows: int = 300, seed: int = 0) -> pd.DataFrame:
    return models.dataset(rows, seed)[0]


def binary_target(X: pd.DataFrame) -> np.ndarray:
    return (X.merchant_risk + 0.002 * X.amount > 0.6).to_numpy().astype(int)


def three_classes(X: pd.DataFrame) -> np.ndarray:
    return np.digitize(X.merchant_risk + 0.1 * (X.hour > 12), [0.4, 0.75])


def value_target(X: pd.DataFrame) -> np.ndarray:
    return (0.05 * X.amount + 3 * X.merchant_risk - 0.0005 * X.user_age_days).to_numpy()


def new_rows() -> pd.DataFrame:
    """Rows the models never saw, as float32 (what Triton is sent), widened for the natives."""
    return features(40, seed=11).astype(np.float32).astype(np.float64)


def register(name: str, log: Callable[..., Any], model: Any, example: Any, **kwargs: Any) -> None:
    import mlflow
    from mlflow import MlflowClient

    # The flavor's library as the requirement, given: MLflow infers them by loading the model in a
    # subprocess that imports every library the process has (4-5 s a model; nothing reads them).
    kwargs.setdefault("pip_requirements", [log.__module__.removeprefix("mlflow.")])
    with mlflow.start_run():
        info = log(model, name="model", input_example=example, registered_model_name=name, **kwargs)
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


def two_columns(p: np.ndarray) -> np.ndarray:
    return np.stack([1 - p, p], axis=1)


def as_classifier(probabilities: np.ndarray) -> dict[str, np.ndarray]:
    return {"probabilities": probabilities, "label": probabilities.argmax(axis=1).reshape(-1, 1)}


# --- the models -------------------------------------------------------------------------------


def train_xgb_booster(name: str, objective: str) -> Trained:
    import mlflow.xgboost
    import xgboost as xgb

    X = features()
    targets = {"binary:logistic": binary_target, "multi:softprob": three_classes}
    y = targets.get(objective, value_target)(X)
    params = {
        "objective": objective,
        "max_depth": 3,
        **({"num_class": 3} if objective.startswith("multi") else {}),
    }
    booster = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=ROUNDS)
    register(name, mlflow.xgboost.log_model, booster, X.iloc[:5])

    def native(x: pd.DataFrame) -> dict[str, np.ndarray]:
        out = booster.predict(xgb.DMatrix(x))
        if objective == "binary:logistic":
            return as_classifier(two_columns(out))
        if objective == "multi:softprob":
            return as_classifier(out)
        return {"prediction": out.reshape(-1, 1)}

    kind = {"binary:logistic": "binary", "multi:softprob": "multiclass"}.get(objective, "regression")
    classes = {"binary": [0, 1], "multiclass": [0, 1, 2]}.get(kind)
    return Trained(name, native, kind, classes)


def train_lgb_booster(name: str, objective: str, *, on_array: bool = False) -> Trained:
    import lightgbm as lgb
    import mlflow.lightgbm

    X = features()
    y = {"binary": binary_target, "multiclass": three_classes}.get(objective, value_target)(X)
    params = {"objective": objective, "num_leaves": 8, "verbose": -1}
    if objective == "multiclass":
        params["num_class"] = 3
    data = X.to_numpy() if on_array else X
    booster = lgb.train(params, lgb.Dataset(data, label=y), num_boost_round=ROUNDS)
    register(name, mlflow.lightgbm.log_model, booster, data[:5])

    def native(x: pd.DataFrame) -> dict[str, np.ndarray]:
        out = booster.predict(x.to_numpy() if on_array else x)
        if objective == "binary":
            return as_classifier(two_columns(out))
        if objective == "multiclass":
            return as_classifier(out)
        return {"prediction": out.reshape(-1, 1)}

    kind = {"binary": "binary", "multiclass": "multiclass"}.get(objective, "regression")
    return Trained(name, native, kind, {"binary": [0, 1], "multiclass": [0, 1, 2]}.get(kind))


def train_xgb_regressor_on_array(name: str) -> Trained:
    import mlflow.xgboost
    import xgboost as xgb

    X = features()
    model = xgb.XGBRegressor(n_estimators=ROUNDS, max_depth=3).fit(X.to_numpy(), value_target(X))
    register(name, mlflow.xgboost.log_model, model, X.to_numpy()[:5])
    return Trained(
        name, lambda x: {"prediction": model.predict(x.to_numpy()).reshape(-1, 1)}, "regression", None
    )


def train_lgbm_multiclass(name: str) -> Trained:
    import lightgbm as lgb
    import mlflow.lightgbm

    X = features()
    model = lgb.LGBMClassifier(n_estimators=ROUNDS, num_leaves=8, verbose=-1).fit(X, three_classes(X))
    register(name, mlflow.lightgbm.log_model, model, X.iloc[:5])

    def native(x: pd.DataFrame) -> dict[str, np.ndarray]:
        return {"probabilities": model.predict_proba(x), "label": model.predict(x).reshape(-1, 1)}

    return Trained(name, native, "multiclass", [0, 1, 2])


def train_xgb_classifier_multiclass(name: str) -> Trained:
    import mlflow.xgboost
    import xgboost as xgb

    X = features()
    model = xgb.XGBClassifier(n_estimators=ROUNDS, max_depth=3).fit(X, three_classes(X))
    register(name, mlflow.xgboost.log_model, model, X.iloc[:5])

    def native(x: pd.DataFrame) -> dict[str, np.ndarray]:
        return {"probabilities": model.predict_proba(x), "label": model.predict(x).reshape(-1, 1)}

    return Trained(name, native, "multiclass", [0, 1, 2])


def train_catboost(name: str, task: str) -> Trained:
    import catboost
    import mlflow.catboost

    X = features()
    common = {"iterations": ROUNDS, "depth": 3, "verbose": 0, "random_seed": 0, "thread_count": 1}
    common["allow_writing_files"] = False  # no catboost_info/ in the working directory
    if task == "regression":
        model: Any = catboost.CatBoostRegressor(**common).fit(X, value_target(X))
    elif task == "strings":
        tiers = np.array(["low", "mid", "high"])[three_classes(X)]
        model = catboost.CatBoostClassifier(**common).fit(X, tiers)
    else:
        model = catboost.CatBoostClassifier(**common).fit(
            X, {"binary": binary_target, "multiclass": three_classes}[task](X)
        )
    register(name, mlflow.catboost.log_model, model, X.iloc[:5])

    def native(x: pd.DataFrame) -> dict[str, np.ndarray]:
        if task == "regression":
            return {"prediction": model.predict(x).reshape(-1, 1)}
        return {"probabilities": model.predict_proba(x), "label": model.predict(x).reshape(-1, 1)}

    if task == "strings":  # probability columns in CatBoost's own class order
        return Trained(name, native, "multiclass", [str(c) for c in model.classes_])
    classes = {"binary": [0, 1], "multiclass": [0, 1, 2]}.get(task)
    return Trained(name, native, task, classes)


CASES: dict[str, Callable[[str], Trained]] = {
    "xgb-binary": lambda n: train_xgb_booster(n, "binary:logistic"),
    "xgb-multi": lambda n: train_xgb_booster(n, "multi:softprob"),
    "xgb-reg": lambda n: train_xgb_booster(n, "reg:squarederror"),
    "lgb-binary": lambda n: train_lgb_booster(n, "binary"),
    "lgb-multi": lambda n: train_lgb_booster(n, "multiclass"),
    "lgb-reg": lambda n: train_lgb_booster(n, "regression"),
    "xgb-array": train_xgb_regressor_on_array,
    "lgb-array": lambda n: train_lgb_booster(n, "binary", on_array=True),
    "lgbm-sk-multi": train_lgbm_multiclass,
    "xgb-sk-multi": train_xgb_classifier_multiclass,
    "cb-binary": lambda n: train_catboost(n, "binary"),
    "cb-multi": lambda n: train_catboost(n, "multiclass"),
    "cb-reg": lambda n: train_catboost(n, "regression"),
    "cb-strings": lambda n: train_catboost(n, "strings"),
}


def run_served(repo: Path, name: str, x: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(repo / name / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {inp.name: x}), strict=True))


@pytest.fixture(scope="module")
def exported(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = tmp_path_factory.mktemp("boosters") / "model_repo"
    trained = {name: train(name) for name, train in CASES.items()}
    for name in trained:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    return {"repo": repo, "trained": trained}


@pytest.mark.parametrize("name", list(CASES))
def test_exported_booster_answers_like_the_native_one(exported: dict[str, Any], name: str):
    repo, case = exported["repo"], exported["trained"][name]
    meta = json.loads((repo / name / "1" / "metadata.json").read_text())
    serving = meta["serving"]
    assert meta["parity"]["passed"]
    assert serving["kind"] == case.kind
    assert serving.get("classes") == case.classes
    if case.classes is None:
        assert serving["outputs"] == {"value": "prediction"}
    else:
        assert serving["outputs"] == {"label": "label", "probabilities": "probabilities"}

    x = new_rows()
    got = run_served(repo, name, x.to_numpy(dtype=np.float32))
    want = case.native(x)
    assert set(got) == set(want)
    for key, expected in want.items():
        assert got[key].shape == expected.shape, key
    if case.classes is None:
        assert got["prediction"].dtype == np.float32
        np.testing.assert_allclose(got["prediction"], want["prediction"], atol=ATOL, rtol=1e-5)
    else:
        assert got["probabilities"].dtype == np.float32
        assert got["probabilities"].shape[1] == len(case.classes)
        np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=ATOL)
        if isinstance(case.classes[0], str):  # string classes come back as strings
            assert got["label"].dtype == object
            np.testing.assert_array_equal(got["label"].astype(str), want["label"].astype(str))
        else:
            assert got["label"].dtype == np.int64
            np.testing.assert_array_equal(got["label"], want["label"])


def test_array_trained_boosters_take_one_tensor_of_the_signature_width(exported: dict[str, Any]):
    for name in ("xgb-array", "lgb-array"):
        meta = json.loads((exported["repo"] / name / "1" / "metadata.json").read_text())
        assert meta["serving"]["layout"] == "tensors"
        assert "feature_names" not in meta["serving"]
        (tensor,) = meta["signature"]["inputs"]
        assert tensor["dtype"] == "float32" and tensor["shape"][-1] == len(models.FEATURES)


# --- refusals ---------------------------------------------------------------------------------


def log_xgb_ranker(name: str) -> None:
    import mlflow.xgboost
    import xgboost as xgb

    X = features(200)
    data = xgb.DMatrix(X, label=three_classes(X))
    data.set_group([20] * 10)
    booster = xgb.train({"objective": "rank:pairwise", "max_depth": 3}, data, num_boost_round=ROUNDS)
    register(name, mlflow.xgboost.log_model, booster, X.iloc[:5])


def log_xgb_softmax(name: str) -> None:
    import mlflow.xgboost
    import xgboost as xgb

    X = features(200)
    params = {"objective": "multi:softmax", "num_class": 3, "max_depth": 3}
    booster = xgb.train(params, xgb.DMatrix(X, label=three_classes(X)), num_boost_round=ROUNDS)
    register(name, mlflow.xgboost.log_model, booster, X.iloc[:5])


def log_lgb_ranker(name: str) -> None:
    import lightgbm as lgb
    import mlflow.lightgbm

    X = features(200)
    data = lgb.Dataset(X, label=three_classes(X), group=[20] * 10)
    booster = lgb.train(
        {"objective": "lambdarank", "verbose": -1, "num_leaves": 8}, data, num_boost_round=ROUNDS
    )
    register(name, mlflow.lightgbm.log_model, booster, X.iloc[:5])


def log_lgb_custom_objective(name: str) -> None:
    import lightgbm as lgb
    import mlflow.lightgbm

    def squared(preds: np.ndarray, data: Any) -> tuple[np.ndarray, np.ndarray]:
        return preds - data.get_label(), np.ones_like(preds)

    X = features(200)
    params = {"objective": squared, "verbose": -1, "num_leaves": 8}
    booster = lgb.train(params, lgb.Dataset(X, label=value_target(X)), num_boost_round=ROUNDS)
    register(name, mlflow.lightgbm.log_model, booster, X.iloc[:5])


def log_catboost_with_categories(name: str) -> None:
    import catboost
    import mlflow.catboost

    X = features(200).assign(channel=lambda d: np.where(d.hour > 12, "web", "store"))
    model = catboost.CatBoostClassifier(
        iterations=ROUNDS, depth=3, verbose=0, thread_count=1, allow_writing_files=False
    )
    model.fit(X, binary_target(X), cat_features=["channel"])
    register(name, mlflow.catboost.log_model, model, X.iloc[:5])


def log_lgb_with_string_column(name: str) -> None:
    import lightgbm as lgb
    import mlflow.lightgbm
    from mlflow.models import infer_signature

    X = features(200).assign(channel=lambda d: pd.Categorical(np.where(d.hour > 12, "web", "store")))
    booster = lgb.train(
        {"objective": "binary", "verbose": -1, "num_leaves": 8},
        lgb.Dataset(X, label=binary_target(X)),
        num_boost_round=ROUNDS,
    )
    # MLflow does not infer a signature from an example with a pandas category column.
    signature = infer_signature(X.iloc[:5], booster.predict(X.iloc[:5]))
    register(name, mlflow.lightgbm.log_model, booster, X.iloc[:5], signature=signature)


# name -> (how it is logged, words the one-line reason must contain)
REFUSALS: dict[str, tuple[Callable[[str], None], tuple[str, ...]]] = {
    "no-xgb-rank": (log_xgb_ranker, ("rank:pairwise", "ranking")),
    "no-xgb-softmax": (log_xgb_softmax, ("multi:softmax",)),
    "no-lgb-rank": (log_lgb_ranker, ("lambdarank", "ranking")),
    "no-lgb-custom": (log_lgb_custom_objective, ("custom objective",)),
    "no-cb-categories": (log_catboost_with_categories, ("categorical", "channel")),
    "no-lgb-strings": (log_lgb_with_string_column, ("channel", "string")),
}


@pytest.fixture(scope="module")
def refused(mlflow_registry: str) -> list[str]:
    for name, (log, _) in REFUSALS.items():
        log(name)
    return list(REFUSALS)


@pytest.mark.parametrize("name", list(REFUSALS))
def test_unexportable_booster_is_refused_with_its_reason(refused: list[str], name: str, tmp_path: Path):
    repo = tmp_path / "model_repo"
    with pytest.raises(ConversionError) as err:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    exc = err.value
    assert exc.exit_code == 4
    assert "\n" not in exc.message
    for words in REFUSALS[name][1]:
        assert words in exc.message
    assert exc.hint
    assert not repo.exists() or not any(repo.iterdir())


def test_cli_refusal_is_one_error_line_and_a_hint(refused: list[str], tmp_path: Path):
    repo = tmp_path / "model_repo"
    result = subprocess.run(
        [sys.executable, "-m", "builder", "export", "models:/no-xgb-rank@champion", "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 4, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith("error:") and "rank:pairwise" in line for line in lines), result.stderr
    assert any(line.startswith("hint:") for line in lines), result.stderr
    assert "Traceback" not in result.stderr
    assert not repo.exists() or not any(repo.iterdir())
