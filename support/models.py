"""Small real models, trained in seconds and registered in the current MLflow registry (the
tests' SQLite one, or a benchmark's).

Each function trains on a synthetic fraud-like data set, logs the model with its flavor, an
input example (so MLflow infers the signature) and registers it with the alias ``champion``.
The pip requirements are given, not inferred: MLflow infers them by loading the model in a
subprocess that imports every library the process has (4-5 s a model; nothing here reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

FEATURES = ["amount", "hour", "merchant_risk", "user_age_days", "tx_last_24h"]


@dataclass
class Registered:
    name: str
    version: int
    run_id: str
    native: Any
    X: pd.DataFrame
    extra: dict[str, Any] | None = None


def dataset(rows: int = 400, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, rows),
            "hour": rng.integers(0, 24, rows).astype(float),
            "merchant_risk": rng.uniform(0, 1, rows),
            "user_age_days": rng.integers(1, 3000, rows).astype(float),
            "tx_last_24h": rng.poisson(2, rows).astype(float),
        }
    )
    logit = 0.02 * X.amount + 3 * X.merchant_risk - 0.001 * X.user_age_days + 0.3 * X.tx_last_24h - 3
    y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-logit))).astype(int)
    return X, y


def _register(name: str, info: Any, native: Any, X: pd.DataFrame, alias: str = "champion") -> Registered:
    from mlflow import MlflowClient

    version = int(info.registered_model_version)
    MlflowClient().set_registered_model_alias(name, alias, str(version))
    return Registered(name=name, version=version, run_id=info.run_id, native=native, X=X)


def sklearn_classifier(name: str, **log_kwargs: Any) -> Registered:
    import mlflow
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = dataset()
    model = make_pipeline(StandardScaler(), GradientBoostingClassifier(n_estimators=20, max_depth=3)).fit(
        X, y
    )
    log_kwargs.setdefault("pip_requirements", ["scikit-learn"])
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            **log_kwargs,
        )
    return _register(name, info, model, X)


def sklearn_regressor(name: str) -> Registered:
    import mlflow
    from sklearn.linear_model import Ridge

    X, y = dataset()
    model = Ridge().fit(X, X.amount * 0.1 + y)
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            pip_requirements=["scikit-learn"],
        )
    return _register(name, info, model, X)


def xgboost_classifier(name: str) -> Registered:
    import mlflow
    import xgboost as xgb

    X, y = dataset()
    model = xgb.XGBClassifier(n_estimators=20, max_depth=3, tree_method="hist").fit(X, y)
    with mlflow.start_run():
        info = mlflow.xgboost.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            pip_requirements=["xgboost"],
        )
    return _register(name, info, model, X)


def lightgbm_classifier(name: str) -> Registered:
    import lightgbm as lgb
    import mlflow

    X, y = dataset()
    model = lgb.LGBMClassifier(n_estimators=20, num_leaves=8, verbose=-1).fit(X, y)
    with mlflow.start_run():
        info = mlflow.lightgbm.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            pip_requirements=["lightgbm"],
        )
    return _register(name, info, model, X)


def pytorch_mlp(name: str) -> Registered:
    import mlflow
    import torch

    torch.manual_seed(0)
    X, y = dataset()
    x = torch.tensor(((X - X.mean()) / X.std()).to_numpy(), dtype=torch.float32)
    module = torch.nn.Sequential(
        torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1), torch.nn.Sigmoid()
    )
    opt = torch.optim.Adam(module.parameters(), lr=0.05)
    target = torch.tensor(y, dtype=torch.float32).reshape(-1, 1)
    for _ in range(50):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy(module(x), target)
        loss.backward()
        opt.step()
    module.eval()
    example = x[:5].numpy()
    with mlflow.start_run():
        info = mlflow.pytorch.log_model(
            module,
            name="model",
            input_example=example,
            registered_model_name=name,
            pip_requirements=["torch"],
        )
    return _register(name, info, module, pd.DataFrame(x.numpy()))


def sklearn_on_probabilities(name: str) -> Registered:
    """A small regressor over a binary classifier's two probabilities (columns ``p0``, ``p1``),
    as a team registers a risk or calibration model that an ensemble runs after its classifier
    (a registered-model serving step, docs/user-steps.md)."""
    import mlflow
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(2)
    p1 = rng.uniform(0, 1, 200)
    X = pd.DataFrame({"p0": 1 - p1, "p1": p1})
    model = Ridge(alpha=0.1).fit(X, 3 * p1 - 1 + rng.normal(0, 0.1, 200))
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            pip_requirements=["scikit-learn"],
        )
    return _register(name, info, model, X)


def sklearn_for_ensemble(name: str, threshold: float = 0.3) -> Registered:
    """A classifier trained on preprocessed features, with the preprocessing and threshold
    logged in its run (``serving/ensemble.json``, param ``decision_threshold``), as a team
    that serves it through an ensemble would log it."""
    import mlflow
    from sklearn.ensemble import GradientBoostingClassifier

    from builder.ensemble_models import transforms

    X, y = dataset(seed=1)
    X = X.copy()
    X.loc[X.index[::7], "merchant_risk"] = np.nan  # missing values, imputed by the spec
    spec = {"preprocess": transforms.fit_preprocess(X.to_numpy()), "postprocess": {"positive_index": 1}}
    features = pd.DataFrame(transforms.preprocess(X.to_numpy(), spec["preprocess"]), columns=FEATURES)
    model = GradientBoostingClassifier(n_estimators=20, max_depth=3).fit(features, y)
    with mlflow.start_run():
        mlflow.log_dict(spec, "serving/ensemble.json")
        mlflow.log_param("decision_threshold", threshold)
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=features.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            pip_requirements=["scikit-learn"],
        )
    registered = _register(name, info, model, X)
    registered.extra = {"spec": spec, "threshold": threshold}
    return registered


def log_serving_step(run_id: str, step: str, spec: dict[str, Any], code: str | None) -> None:
    """Log a serving step into a finished run, as training code logs one
    (``serving/steps/<step>/step.json`` and its Python-backend ``model.py``; no code: a step
    whose step.json names a registered ``"model"``)."""
    import json

    from mlflow import MlflowClient

    client = MlflowClient()
    client.log_text(run_id, json.dumps(spec, indent=2), f"serving/steps/{step}/step.json")
    if code is not None:
        client.log_text(run_id, code, f"serving/steps/{step}/model.py")


def register_fitted(
    name: str,
    model: Any,
    X: pd.DataFrame,
    *,
    flavor: str = "sklearn",
    tags: dict[str, str] | None = None,
    reference: bool = False,
    example_rows: int = 5,
) -> int:
    """Log a fitted ``model`` of ``flavor`` with ``X``'s first rows as its input example (and,
    with ``reference``, ``X`` as its drift reference), register it as ``name@champion``; returns
    the version. scikit-learn models list the types skops asks to trust, as a user would."""
    import warnings

    import mlflow

    from builder.reference import log_reference

    kwargs: dict[str, Any] = {"pip_requirements": [flavor]}  # given: inferring them is slow
    if flavor == "sklearn":
        import skops.io

        kwargs["skops_trusted_types"] = skops.io.get_untrusted_types(data=skops.io.dumps(model))
    with mlflow.start_run(run_name=name), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence and MLflow's own deprecations
        if tags:
            mlflow.set_tags(tags)
        info = getattr(mlflow, flavor).log_model(
            model, name="model", input_example=X.iloc[:example_rows], registered_model_name=name, **kwargs
        )
        if reference:
            log_reference(X)
    version = int(info.registered_model_version)
    mlflow.MlflowClient().set_registered_model_alias(name, "champion", str(version))
    return version
