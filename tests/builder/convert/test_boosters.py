"""Boosters through `builder export`: native XGBoost/LightGBM boosters, scikit-learn-API boosters
trained on arrays, CatBoost, and the objectives and inputs that are refused.

Every model is trained here (tiny: <= 20 trees, <= 400 rows), logged with its MLflow flavor into
the real SQLite registry and exported; the served ONNX is run with onnxruntime on rows the model
never saw and compared with what the native library itself predicts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.errors import ConversionError
from builder.export import ExportRequest, export_model
from support import models
from tests.builder.convert.helpers import (
    ROUNDS,
    Trained,
    binary_target,
    features,
    new_rows,
    register,
    three_classes,
    train_catboost,
    train_lgb_booster,
    train_xgb_booster,
    value_target,
)
from tests.builder.helpers import builder_in_process

pytestmark = pytest.mark.integration  # a real MLflow registry (SQLite) or real servers

# float32 inputs and tree thresholds: what parity itself allows (builder's defaults).
ATOL = 1e-5


# --- the models -------------------------------------------------------------------------------


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
    result = builder_in_process("export", "models:/no-xgb-rank@champion", "--repo", str(repo))
    assert result.returncode == 4, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith("error:") and "rank:pairwise" in line for line in lines), result.stderr
    assert any(line.startswith("hint:") for line in lines), result.stderr
    assert "Traceback" not in result.stderr
    assert not repo.exists() or not any(repo.iterdir())
