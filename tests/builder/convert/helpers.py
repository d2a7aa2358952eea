"""PyTorch modules the tests register; importable, since a pickled module is loaded by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from builder.runtime.server import TritonServer
from support import models


class EmbeddingScorer(torch.nn.Module):
    """A float feature vector and a category index (int64) -> a probability."""

    def __init__(self) -> None:
        super().__init__()
        # 10 rows: parity rows without an input example draw integers from 0..9.
        self.embed = torch.nn.Embedding(10, 3)
        self.linear = torch.nn.Linear(4 + 3, 1)

    def forward(self, x: torch.Tensor, category: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(torch.cat([x, self.embed(category[:, 0])], dim=1)))


class TokenScorer(torch.nn.Module):
    """A float feature vector and a row of token ids (int64) -> a score, the ids through an
    ``nn.Embedding`` of 8 rows: fewer than the 0..9 that parity drew for ids it knew no range of
    (issue 29, item 6)."""

    def __init__(self, tokens: int = 8) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(num_embeddings=tokens, embedding_dim=4)
        self.linear = torch.nn.Linear(3 + 4, 1)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.cat([x, self.embed(ids).mean(dim=1)], dim=1))


class TableScorer(torch.nn.Module):
    """Category ids (int64) looked up in a plain parameter table of 5 rows: no ``nn.Embedding``,
    so nothing in the module tells the builder which ids it takes."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(5, 2))
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, category: torch.Tensor) -> torch.Tensor:
        return self.linear(self.table[category[:, 0]])


@dataclass
class Trained:
    """A registered model and the native library's own answer on new rows."""

    name: str
    native: Native
    kind: str
    classes: list[Any] | None


def new_rows() -> pd.DataFrame:
    """Rows the models never saw, as float32 (what Triton is sent), widened for the natives."""
    return features(40, seed=11).astype(np.float32).astype(np.float64)


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


def served_facts(server: TritonServer, model: str) -> dict[str, Any]:
    """The serving contract as a client reads it: Triton's model config parameters."""
    import tritonclient.grpc as grpcclient

    config = grpcclient.InferenceServerClient(server.grpc_url).get_model_config(model, as_json=True)["config"]
    params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
    facts = {k.removeprefix("serving."): v for k, v in params.items() if k.startswith("serving.")}
    for key in ("columns", "classes", "outputs", "feature_names"):
        if key in facts:
            facts[key] = json.loads(facts[key])
    facts["inputs"] = [(i["name"], i["data_type"]) for i in config["input"]]
    return facts


def request_tensors(facts: dict[str, Any], fresh: Any) -> dict[str, np.ndarray]:
    """Triton inputs built from the recorded layout and the rows a user has."""
    if facts["layout"] == "matrix":
        return {"input": fresh[facts["feature_names"]].to_numpy(dtype=np.float32)}
    if facts["layout"] == "columns":
        frame = fresh.to_frame(facts["columns"][0]["name"]) if isinstance(fresh, pd.Series) else fresh
        out = {}
        for column in facts["columns"]:
            values = frame[column["name"]].to_numpy().reshape(-1, 1)
            out[column["name"]] = (
                values.astype(object) if column["dtype"] == "string" else values.astype(column["dtype"])
            )
        return out
    if isinstance(fresh, dict):
        return fresh
    return {"input": np.asarray(fresh, dtype=np.float32)}


def infer(
    server: TritonServer, protocol: str, model: str, tensors: dict[str, np.ndarray], outputs: list[str]
) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    lib: Any = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    inputs = []
    for name, array in tensors.items():
        inp = lib.InferInput(name, list(array.shape), V2[array.dtype.name])
        inp.set_data_from_numpy(array)
        inputs.append(inp)
    result = client.infer(model, inputs, outputs=[lib.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


ROUNDS = 10


Native = Callable[[pd.DataFrame], dict[str, np.ndarray]]


def features(rows: int = 300, seed: int = 0) -> pd.DataFrame:
    return models.dataset(rows, seed)[0]


def binary_target(X: pd.DataFrame) -> np.ndarray:
    return (X.merchant_risk + 0.002 * X.amount > 0.6).to_numpy().astype(int)


def three_classes(X: pd.DataFrame) -> np.ndarray:
    return np.digitize(X.merchant_risk + 0.1 * (X.hour > 12), [0.4, 0.75])


def value_target(X: pd.DataFrame) -> np.ndarray:
    return (0.05 * X.amount + 3 * X.merchant_risk - 0.0005 * X.user_age_days).to_numpy()


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


V2 = {"float32": "FP32", "int64": "INT64", "bool": "BOOL", "object": "BYTES"}
