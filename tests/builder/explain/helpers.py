"""Models the explainer tests export, and what they are compared with.

Each factory trains a small model on a synthetic fraud-like frame, registers it (its training
rows logged as the run's reference, as training code does with ``log_reference``) and returns
it with held-out rows. ``shap_per_column`` is the expected answer, computed here independently
of the builder: shap on the native model, and for a Pipeline the one-hot groups found from
scikit-learn's own feature names.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from support.models import register_fitted

COUNTRIES = ["us", "de", "fr", "br", "jp"]
NUMERIC = ["amount", "hour", "merchant_risk", "user_age_days"]


@dataclass
class Case:
    name: str
    native: Any
    held_out: pd.DataFrame
    kind: str  # binary | multiclass | regression
    training: pd.DataFrame  # the rows it was fitted on (its run's reference rows)


def frame(rows: int, seed: int, *, nan: float = 0.0, strings: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    data: dict[str, Any] = {
        "amount": rng.lognormal(3.0, 1.0, rows),
        "hour": rng.integers(0, 24, rows).astype(float),
        "merchant_risk": rng.uniform(0, 1, rows),
        "user_age_days": rng.integers(1, 3000, rows).astype(float),
    }
    out = pd.DataFrame(data)
    if nan:
        for column in ("amount", "merchant_risk"):
            out.loc[rng.uniform(size=rows) < nan, column] = np.nan
    if strings:
        out["country"] = rng.choice(COUNTRIES, rows).astype(object)
    return out


def labels(x: pd.DataFrame, kind: str, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    amount = np.nan_to_num(x["amount"].to_numpy(), nan=20.0)
    risk = np.nan_to_num(x["merchant_risk"].to_numpy(), nan=0.5)
    score = 0.03 * amount + 3 * risk - 0.0005 * x["user_age_days"].to_numpy() - 1.5
    if "country" in x:
        score = score + np.where(x["country"].to_numpy() == "br", 1.5, 0.0)
    score = score + rng.normal(0, 0.3, len(x))
    if kind == "regression":
        return score
    if kind == "binary":
        return (score > 0).astype(int)
    return np.digitize(score, [-0.5, 0.7])  # three classes


def fit_and_register(
    name: str, model: Any, kind: str, *, flavor: str = "sklearn", nan: float = 0.0, strings: bool = False
) -> Case:
    x = frame(300, 0, nan=nan, strings=strings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, labels(x, kind))
    register_fitted(name, model, x, flavor=flavor, reference=True)
    return Case(name, model, frame(12, 7, nan=nan, strings=strings), kind, x)


def pipeline(final: Any, *, strings: bool = True, impute: bool = True) -> Any:
    """Impute + scale the numeric columns, one-hot the string one, then ``final``."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numeric = (
        make_pipeline(SimpleImputer(strategy="median"), StandardScaler()) if impute else StandardScaler()
    )
    parts = [("num", numeric, NUMERIC)]
    if strings:
        parts.append(("cat", OneHotEncoder(handle_unknown="ignore"), ["country"]))
    return Pipeline([("preprocess", ColumnTransformer(parts)), ("model", final)])


def export(case: Case, repo: Path, **options: Any) -> Any:
    from builder.export import ExportRequest, export_model

    request = ExportRequest(
        model_uri=f"models:/{case.name}@champion", repo=repo, explain=True, parity_rows=16, **options
    )
    return export_model(request)


def shap_per_column(native: Any, x: pd.DataFrame, background: pd.DataFrame | None = None) -> tuple[Any, Any]:
    """shap's values per original column ``(rows, columns, outputs)`` and base values
    ``(outputs,)``, of the raw output; a binary forest's positive class only."""
    with warnings.catch_warnings():  # matplotlib's deprecations, at shap's import
        warnings.simplefilter("ignore")
        import shap

    steps = getattr(native, "steps", None)
    final = steps[-1][1] if steps else native
    columns = list(x.columns)
    if steps:
        pre = native[:-1]
        features = _dense(pre.transform(x))
        names = list(pre.get_feature_names_out())
        # "num__amount", "cat__country_us": the source column is the one the name starts with
        groups = [next(i for i, c in enumerate(columns) if n.split("__", 1)[1].startswith(c)) for n in names]
    else:
        features, groups = x.to_numpy(dtype=np.float64), list(range(len(columns)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(final, "coef_"):
            assert background is not None
            bg = _dense(native[:-1].transform(background)) if steps else background.to_numpy(np.float64)
            mean = bg.mean(axis=0)
            explainer = shap.LinearExplainer(final, (mean, np.eye(len(mean))))
        else:
            explainer = shap.TreeExplainer(final, feature_perturbation="tree_path_dependent")
        values = np.asarray(explainer.shap_values(features), dtype=np.float64)
    if values.ndim == 2:
        values = values[:, :, None]
    base = np.atleast_1d(np.asarray(explainer.expected_value, dtype=np.float64)).reshape(-1)
    if values.shape[2] == 2 and len(getattr(final, "classes_", ())) == 2:
        values, base = values[:, :, -1:], base[-1:]
    out = np.zeros((len(x), len(columns), values.shape[2]))
    for f, column in enumerate(groups):
        out[:, column, :] += values[:, f, :]
    return out, base


def _dense(x: Any) -> np.ndarray:
    return np.asarray(x.toarray() if hasattr(x, "toarray") else x, dtype=np.float64)


def triton_inputs(config: dict[str, Any], x: pd.DataFrame) -> list[Any]:
    """The explainer's (and model's) inputs for the rows ``x``, as its config declares them."""
    import tritonclient.http as httpclient

    inputs = []
    for spec in config["input"]:
        name, datatype = spec["name"], spec["data_type"].removeprefix("TYPE_")
        if name in x.columns:  # one input per column
            column = x[name]
            values = (
                np.array([[str(v).encode()] for v in column], dtype=object)
                if datatype == "STRING"
                else column.to_numpy()
                .astype({"FP32": np.float32, "INT64": np.int64}[datatype])
                .reshape(-1, 1)
            )
        else:  # one matrix of every column
            values = x.to_numpy(dtype=np.float32)
        tensor = httpclient.InferInput(
            name, list(values.shape), "BYTES" if datatype == "STRING" else datatype
        )
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    return inputs


def served(client: Any, model: str, x: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every output of ``model`` for the rows ``x``, through Triton's HTTP endpoint."""
    config = client.get_model_config(model)
    result = client.infer(model, triton_inputs(config, x))
    return {o["name"]: result.as_numpy(o["name"]) for o in config["output"]}


def refused_models() -> dict[str, tuple[Any, str]]:
    """Models ``--explain`` must refuse, and the words the refusal names them by."""
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler
    from sklearn.svm import SVC

    return {
        "xr_gbc3": (GradientBoostingClassifier(n_estimators=5), "shap's TreeExplainer refuses it"),
        "xr_svc": (make_pipeline(StandardScaler(), SVC()), "SVC has no exact explainer"),
        "xr_knn": (KNeighborsClassifier(n_neighbors=3), "KNeighborsClassifier has no exact explainer"),
        "xr_mlp": (
            # a fixed seed: random weights put parity past 1e-5 now and then, before the refusal
            MLPClassifier(hidden_layer_sizes=(4,), max_iter=50, random_state=0),
            "MLPClassifier has no exact explainer",
        ),
        "xr_pca": (
            make_pipeline(PCA(n_components=2), GradientBoostingClassifier(n_estimators=5)),
            "PCA mixes",
        ),
        "xr_poly": (
            make_pipeline(PolynomialFeatures(2), LogisticRegression(max_iter=300)),
            "PolynomialFeatures mixes",
        ),
    }
