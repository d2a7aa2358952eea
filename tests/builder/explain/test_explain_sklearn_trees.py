"""scikit-learn trees and forests exported with ``--explain`` and served by one real Triton:
the explainer's values per original column equal shap's TreeExplainer (path-dependent) on the
native model within 1e-5 on held-out rows, and contributions plus base value give back the
score the served model answers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.builder.explain.helpers import Case, export, fit_and_register, pipeline, served, shap_per_column

pytestmark = pytest.mark.integration


@dataclass
class Served:
    cases: dict[str, Case]
    client: Any
    repo: Path


def _cases() -> list[tuple[str, Any, str, dict[str, Any]]]:
    from sklearn.ensemble import (
        ExtraTreesRegressor,
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        HistGradientBoostingClassifier,
        RandomForestClassifier,
    )
    from sklearn.tree import DecisionTreeClassifier

    return [
        # the demo's shape: impute + scale, one-hot a string column, gradient boosting
        ("xp_gbc_pipe", pipeline(GradientBoostingClassifier(n_estimators=15, max_depth=3)), "binary", {}),
        ("xp_gbr", GradientBoostingRegressor(n_estimators=15, max_depth=3), "regression", {}),
        ("xp_rf3", RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0), "multiclass", {}),
        ("xp_et", ExtraTreesRegressor(n_estimators=8, max_depth=5, random_state=0), "regression", {}),
        ("xp_dt", DecisionTreeClassifier(max_depth=5, random_state=0), "binary", {}),
        ("xp_hgb_nan", HistGradientBoostingClassifier(max_iter=15), "binary", {"nan": 0.2}),
    ]


@pytest.fixture(scope="module")
def stack(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    import tritonclient.http as httpclient

    from builder.runtime.server import ServerOptions, TritonServer
    from support.servers import stop_now

    root = tmp_path_factory.mktemp("explain-sklearn")
    repo = root / "model_repo"
    cases = {}
    for name, model, kind, options in _cases():
        strings = name.endswith("_pipe")
        cases[name] = fit_and_register(name, model, kind, strings=strings, **options)
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
    expected, base = shap_per_column(case.native, case.held_out)
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
    if name.startswith(("xp_rf", "xp_dt")):  # forests explain probabilities themselves
        expected = probabilities[:, 1:] if case.kind == "binary" else probabilities
        np.testing.assert_allclose(total, expected, atol=1e-5)
    else:  # log-odds of the positive class
        np.testing.assert_allclose(1 / (1 + np.exp(-total[:, 0])), probabilities[:, 1], atol=1e-5)


def test_the_contract_names_the_explainer_and_what_its_values_mean(stack: Served):
    from serving_contract import ServingContract

    config = stack.client.get_model_config("xp_gbc_pipe")
    params = {k: v["string_value"] for k, v in config["parameters"].items()}
    explainer = ServingContract.from_parameters(params).explainer
    assert explainer is not None
    assert (explainer.model, explainer.method, explainer.units) == (
        "xp_gbc_pipe_explain",
        "tree_path_dependent",
        "log_odds",
    )
    assert explainer.outputs == (1,)  # the positive class
    contract = ServingContract.from_parameters(params)
    assert [c.name for c in contract.columns or ()] == [
        "amount",
        "hour",
        "merchant_risk",
        "user_age_days",
        "country",
    ]


def test_one_hot_columns_are_reported_once_as_the_string_column(stack: Served):
    case = stack.cases["xp_gbc_pipe"]
    rows = case.held_out.copy()
    rows["country"] = "br"  # the category the labels depend on
    got = served(stack.client, "xp_gbc_pipe_explain", rows)["contributions"]
    assert got.shape == (len(rows), 5, 1)  # five columns, not 4 numeric + 5 one-hot features
    assert np.all(got[:, 4, 0] > 0)  # being from "br" raises every row's fraud score
