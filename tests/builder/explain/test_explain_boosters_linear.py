"""XGBoost, LightGBM, CatBoost and linear models exported with ``--explain`` and served by one
real Triton: trees equal shap's TreeExplainer (the boosters' own path-dependent TreeSHAP: CatBoost's
``ShapValues`` for its oblivious trees) within 1e-5, NaN inputs included; linear models equal
shap's LinearExplainer over the training rows' mean (interventional); contributions plus base
value give back the served score."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.builder.explain.helpers import (
    Case,
    export,
    fit_and_register,
    pipeline,
    served,
    shap_per_column,
)

pytestmark = pytest.mark.integration


@dataclass
class Served:
    cases: dict[str, Case]
    client: Any
    repo: Path


def _cases() -> list[tuple[str, Any, str, dict[str, Any]]]:
    import catboost as cb
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.linear_model import LogisticRegression, Ridge

    # few trees, depth 4 (16 leaves each); nan_mode Min (the default: NaN goes left) and Max
    small = {"iterations": 8, "depth": 4, "verbose": 0, "allow_writing_files": False, "thread_count": 1}
    return [
        (
            "xb_xgb_nan",
            xgb.XGBClassifier(n_estimators=15, max_depth=3),
            "binary",
            {"flavor": "xgboost", "nan": 0.2},
        ),
        ("xb_xgb3", xgb.XGBClassifier(n_estimators=10, max_depth=3), "multiclass", {"flavor": "xgboost"}),
        (
            "xb_lgb_nan",
            lgb.LGBMClassifier(n_estimators=15, num_leaves=8, verbose=-1),
            "binary",
            {"flavor": "lightgbm", "nan": 0.2},
        ),
        (
            "xb_lgb3",
            lgb.LGBMClassifier(n_estimators=10, num_leaves=8, verbose=-1),
            "multiclass",
            {"flavor": "lightgbm"},
        ),
        (
            "xb_lgbr",
            lgb.LGBMRegressor(n_estimators=15, num_leaves=8, verbose=-1),
            "regression",
            {"flavor": "lightgbm"},
        ),
        ("xb_logit_pipe", pipeline(LogisticRegression(max_iter=500)), "binary", {"strings": True}),
        (
            "xb_logit3",
            pipeline(LogisticRegression(max_iter=500), strings=False, impute=False),
            "multiclass",
            {},
        ),
        ("xb_ridge", Ridge(alpha=1.0), "regression", {}),
        ("xb_cb_nan", cb.CatBoostClassifier(**small), "binary", {"flavor": "catboost", "nan": 0.2}),
        (
            "xb_cb3_nan",
            cb.CatBoostClassifier(loss_function="MultiClass", nan_mode="Max", **small),
            "multiclass",
            {"flavor": "catboost", "nan": 0.2},
        ),
        ("xb_cbr_nan", cb.CatBoostRegressor(**small), "regression", {"flavor": "catboost", "nan": 0.2}),
    ]


@pytest.fixture(scope="module")
def stack(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    import tritonclient.http as httpclient

    from builder.runtime.server import ServerOptions, TritonServer
    from support.servers import stop_now

    root = tmp_path_factory.mktemp("explain-boosters")
    repo = root / "model_repo"
    cases = {}
    for name, model, kind, options in _cases():
        cases[name] = fit_and_register(name, model, kind, **options)
        export(cases[name], repo)
    server = TritonServer(repo, ServerOptions(), runtime=triton_runtime, log_path=root / "triton.log")
    server.start(timeout=180)
    try:
        yield Served(cases, httpclient.InferenceServerClient(server.http_url), repo)
    finally:
        stop_now(server)


@pytest.mark.parametrize("name", [c[0] for c in _cases()])
def test_served_values_equal_shap_on_the_native_model(stack: Served, name: str):
    case = stack.cases[name]
    got = served(stack.client, f"{name}_explain", case.held_out)
    expected, base = shap_per_column(case.native, case.held_out, background=case.training)
    assert got["contributions"].shape == expected.shape
    np.testing.assert_allclose(got["contributions"], expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got["base_value"], np.broadcast_to(base, got["base_value"].shape), atol=1e-5)


@pytest.mark.parametrize("name", [c[0] for c in _cases()])
def test_contributions_plus_base_give_the_served_score(stack: Served, name: str):
    case = stack.cases[name]
    explained = served(stack.client, f"{name}_explain", case.held_out)
    scored = served(stack.client, name, case.held_out)
    total = explained["contributions"].sum(axis=1) + explained["base_value"]
    if case.kind == "regression":
        np.testing.assert_allclose(total[:, 0], scored["prediction"].reshape(-1), atol=1e-3)
        return
    probabilities = scored["probabilities"]
    if case.kind == "binary":  # log-odds of the positive class
        np.testing.assert_allclose(1 / (1 + np.exp(-total[:, 0])), probabilities[:, 1], atol=1e-5)
    else:  # a softmax over the classes' margins
        odds = np.exp(total - total.max(axis=1, keepdims=True))
        np.testing.assert_allclose(odds / odds.sum(axis=1, keepdims=True), probabilities, atol=1e-5)


def test_nan_inputs_follow_the_boosters_missing_value_branches(stack: Served):
    for name in ("xb_xgb_nan", "xb_lgb_nan", "xb_cb_nan", "xb_cb3_nan", "xb_cbr_nan"):
        case = stack.cases[name]
        rows = case.held_out.copy()
        rows["amount"] = np.nan  # every row missing its amount
        got = served(stack.client, f"{name}_explain", rows)["contributions"]
        expected, _ = shap_per_column(case.native, rows)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("name", "units", "outputs"),
    [
        ("xb_cb_nan", "log_odds", (1,)),
        ("xb_cb3_nan", "raw", (0, 1, 2)),
        ("xb_cbr_nan", "raw", ("prediction",)),
    ],
)
def test_catboost_contract_says_path_dependent_raw_output(
    stack: Served, name: str, units: str, outputs: tuple[Any, ...]
):
    from serving_contract import ServingContract

    config = stack.client.get_model_config(name)
    params = {k: v["string_value"] for k, v in config["parameters"].items()}
    explainer = ServingContract.from_parameters(params).explainer
    assert explainer is not None
    assert (explainer.method, explainer.units, explainer.outputs) == ("tree_path_dependent", units, outputs)


def test_linear_contract_says_interventional_log_odds_per_class(stack: Served):
    from serving_contract import ServingContract

    config = stack.client.get_model_config("xb_logit3")
    params = {k: v["string_value"] for k, v in config["parameters"].items()}
    explainer = ServingContract.from_parameters(params).explainer
    assert explainer is not None
    assert (explainer.method, explainer.units, explainer.outputs) == (
        "linear_interventional",
        "log_odds",
        (0, 1, 2),
    )
