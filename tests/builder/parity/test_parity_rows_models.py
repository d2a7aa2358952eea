"""Models whose training data the old random parity rows left (issue 19): LightGBM on integer
category codes (``categorical_feature``), which read negative or fractional codes as missing,
and CategoricalNB, which refuses negative values. Registered in the real MLflow registry and
exported: parity passes on rows drawn the way the training data looks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.export import ExportRequest, export_model
from support.models import register_fitted

pytestmark = pytest.mark.integration

CODES = ["merchant_code", "device_code"]


def _frame(rows: int = 200, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "amount": rng.lognormal(1.0, 0.6, rows),
            "hour": rng.integers(0, 24, rows).astype(float),
            "merchant_risk": rng.uniform(0, 1, rows),
            "tx_last_24h": rng.poisson(2, rows).astype(float),
            "merchant_code": rng.integers(0, 6, rows),
            "device_code": rng.integers(0, 3, rows),
        }
    )
    score = 0.4 * X.amount + 2.0 * X.merchant_risk + 1.5 * X.merchant_code.isin([1, 4]) + 0.2 * X.device_code
    return X, (score - score.mean()).to_numpy() + rng.normal(0, 0.3, rows)


def _register(name: str, flavor: str, model: Any, X: pd.DataFrame) -> str:
    register_fitted(name, model, X, flavor=flavor, example_rows=8)
    return f"models:/{name}@champion"


@pytest.mark.parametrize("estimator", ["LGBMClassifier", "LGBMRegressor"])
def test_lightgbm_on_integer_category_codes_exports_with_parity(
    mlflow_registry: str, tmp_path: Path, estimator: str
):
    import lightgbm as lgb

    X, score = _frame()
    y = (score > 0).astype(int) if estimator == "LGBMClassifier" else score
    model = getattr(lgb, estimator)(
        n_estimators=5, num_leaves=8, min_child_samples=5, min_data_per_group=5, cat_smooth=1.0, verbose=-1
    ).fit(X, y, categorical_feature=CODES)
    uri = _register(f"rows-lgb-{estimator.lower()}", "lightgbm", model, X)
    result = export_model(ExportRequest(uri, tmp_path / "repo", parity_rows=64))
    assert result.parity.passed
    assert result.parity.rows == 8 + 64


def test_categorical_naive_bayes_exports_with_parity(mlflow_registry: str, tmp_path: Path):
    from sklearn.naive_bayes import CategoricalNB

    X, score = _frame()
    X = X.drop(columns=CODES)  # the support matrix's float DataFrame: non-negative amounts, hours, counts
    model = CategoricalNB().fit(X, (score > 0).astype(int))
    uri = _register("rows-categorical-nb", "sklearn", model, X)
    result = export_model(ExportRequest(uri, tmp_path / "repo", parity_rows=64))
    assert result.parity.passed
