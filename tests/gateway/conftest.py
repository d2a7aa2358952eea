"""The real stack for gateway tests: a Feast repo (SQLite online store) with generated data,
a model trained from its historical features and registered in a SQLite MLflow registry,
exported (a Pipeline with string columns: one typed input per column), served by the embedded
Triton, and `gateway serve` in front."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from builder.export import ExportRequest, export_model
from support import servers
from tests.gateway.helpers import MODEL, Stack, copy_feature_repo, gateway_env


@pytest.fixture(scope="session")
def stack(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    import mlflow

    from support.train import prepare_feature_store, train_and_register

    root = tmp_path_factory.mktemp("gateway-stack")
    repo = copy_feature_repo(root / "feature_repo")
    store = prepare_feature_store(repo)
    exp_id = mlflow.get_experiment_by_name("tests").experiment_id
    trained = train_and_register(store, MODEL, exp_id, n_estimators=20)
    model_repo = root / "model_repo"
    export_model(ExportRequest(f"models:/{MODEL}@champion", model_repo))
    with servers.serving(model_repo, triton_runtime, root / "tritonserver.log") as triton:
        yield Stack(repo, store, model_repo, trained, triton)


@pytest.fixture(scope="session")
def gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Gateway]:
    with servers.gateway_process(tmp_path_factory.mktemp("gw"), gateway_env(stack)) as gw:
        yield gw
