"""CatBoost's oblivious trees as the explainer's arrays (builder/explain/oblivious.py), in process:
rows exactly on a split's border and NaN under each ``nan_mode`` go where CatBoost sends them
(equal to shap's TreeExplainer, i.e. CatBoost's own ShapValues, within 1e-5), a model with a
scale other than 1 is explained as it predicts, and what cannot be exact is refused in one line
with a hint: categorical features (by the extractor, and at export), non-symmetric trees. The
served parity (Triton) is in test_explain_boosters_linear.py."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.errors import ConversionError
from tests.builder.explain.helpers import export, fit_and_register, frame, labels, shap_per_column

SMALL = {"iterations": 6, "depth": 4, "verbose": 0, "allow_writing_files": False, "thread_count": 1}


def _fit(model: Any, kind: str, x: pd.DataFrame) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(x, labels(x, kind))


def _explain(model: Any, x: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    from builder.explain import kernel
    from builder.explain.oblivious import catboost_arrays

    arrays = dict(catboost_arrays(model, "model", x.shape[1]).arrays)
    arrays["groups"], arrays["columns"] = np.arange(x.shape[1]), np.array(x.shape[1])
    return kernel.explain(kernel.prepare(arrays), x.to_numpy(dtype=np.float64))


def _raw(model: Any, x: pd.DataFrame) -> np.ndarray:
    return np.asarray(model.predict(x, prediction_type="RawFormulaVal")).reshape(len(x), -1)


def _border_rows(model: Any, x: pd.DataFrame, tmp_path: Path) -> pd.DataFrame:
    """Held-out rows, then rows whose every column sits on one of its borders, just above it,
    and missing."""
    model.save_model(str(tmp_path / "m.json"), format="json")
    info = json.loads((tmp_path / "m.json").read_text())["features_info"]["float_features"]
    borders = {x.columns[f["flat_feature_index"]]: np.float32(f["borders"]) for f in info if f["borders"]}
    rows = [x]
    for i in range(3):
        on = x.iloc[:1].copy()
        for column, values in borders.items():
            on[column] = values[i % len(values)]
        above = on.copy()
        for column in borders:
            above[column] = np.nextafter(on[column].to_numpy(np.float32), np.float32(np.inf))
        rows += [on, above]
    missing = x.iloc[:2].copy()
    missing.loc[:, :] = np.nan
    return pd.concat([*rows, missing], ignore_index=True)


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("binary", {}),  # nan_mode Min: NaN goes left (AsFalse)
        ("multiclass", {"loss_function": "MultiClass", "nan_mode": "Max"}),  # NaN goes right (AsTrue)
        ("regression", {"nan_mode": "Forbidden"}),  # no NaN in training: NaN > border is false (AsIs)
    ],
)
def test_borders_and_missing_values_go_where_catboost_sends_them(
    kind: str, options: dict[str, Any], tmp_path: Path
):
    import catboost as cb

    forbidden = options.get("nan_mode") == "Forbidden"
    train = frame(300, 0, nan=0.0 if forbidden else 0.2)
    cls = cb.CatBoostRegressor if kind == "regression" else cb.CatBoostClassifier
    model = _fit(cls(**SMALL, **options), kind, train)
    rows = _border_rows(model, frame(12, 7, nan=0.0 if forbidden else 0.2), tmp_path)
    phi, base = _explain(model, rows)
    expected, expected_base = shap_per_column(model, rows)
    np.testing.assert_allclose(phi, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(base, np.broadcast_to(expected_base, base.shape), atol=1e-5, rtol=0)
    np.testing.assert_allclose(phi.sum(axis=1) + base, _raw(model, rows), atol=1e-5, rtol=0)


def test_a_scaled_model_is_explained_as_it_predicts():
    """CatBoost's ShapValues refuse a scale other than 1; the values are the unscaled model's
    times the scale, and add up to what the scaled model predicts."""
    import catboost as cb

    from builder.explain.reference import shap_reference

    train, rows = frame(300, 0, nan=0.2), frame(12, 7, nan=0.2)
    model = _fit(cb.CatBoostClassifier(loss_function="MultiClass", **SMALL), "multiclass", train)
    _, bias = model.get_scale_and_bias()
    model.set_scale_and_bias(1.5, [b + 0.25 for b in bias])
    phi, base = _explain(model, rows)
    unscaled = model.copy()
    unscaled.set_scale_and_bias(1.0, [b + 0.25 for b in bias])
    expected, expected_base = shap_per_column(unscaled, rows)
    np.testing.assert_allclose(phi, 1.5 * expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(phi.sum(axis=1) + base, _raw(model, rows), atol=1e-5, rtol=0)
    # what the export checks the explainer against
    checked, checked_base = shap_reference(
        model, "tree", rows.to_numpy(np.float64), None, [0, 1, 2], np.arange(4), 4
    )
    np.testing.assert_allclose(phi, checked, atol=1e-12, rtol=0)
    np.testing.assert_allclose(base, checked_base, atol=1e-12, rtol=0)
    del expected_base


def test_categorical_features_and_non_symmetric_trees_are_refused_in_one_line():
    import catboost as cb

    from builder.explain.oblivious import catboost_arrays

    x = frame(200, 0, strings=True)
    with_categories = _fit(cb.CatBoostClassifier(cat_features=["country"], **SMALL), "binary", x)
    with pytest.raises(ConversionError, match=r"has categorical features \('country'\)") as caught:
        catboost_arrays(with_categories, "model", x.shape[1])
    assert "\n" not in caught.value.message and "cat_features" in (caught.value.hint or "")
    numeric = x.drop(columns="country")
    depthwise = _fit(cb.CatBoostClassifier(grow_policy="Depthwise", **SMALL), "binary", numeric)
    with pytest.raises(ConversionError, match="non-symmetric trees") as caught:
        catboost_arrays(depthwise, "model", numeric.shape[1])
    assert "\n" not in caught.value.message and caught.value.hint


@pytest.mark.integration
def test_export_refuses_a_model_with_cat_features(mlflow_registry: str, tmp_path: Path):
    import catboost as cb

    model = cb.CatBoostClassifier(cat_features=["country"], **SMALL)
    case = fit_and_register("xc_cb_cat", model, "binary", flavor="catboost", strings=True)
    repo = tmp_path / "repo"
    with pytest.raises(ConversionError, match="categorical features") as caught:
        export(case, repo)
    assert "'country'" in caught.value.message and "\n" not in caught.value.message
    assert "cat_features" in (caught.value.hint or "")
    assert not repo.exists() or not any(repo.iterdir())
