"""The real stack for gateway tests: a Feast repo (SQLite online store) with generated data,
a model trained from its historical features and registered in a SQLite MLflow registry,
exported (a Pipeline with string columns: one typed input per column), served by the embedded
Triton, and `gateway serve` in front."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import servers

MODEL = "fraud-detector"
SOURCE = Path(__file__).resolve().parents[2] / "feature_repo"


@dataclass
class Stack:
    feature_repo: Path
    store: Any
    model_repo: Path
    trained: Any
    triton: TritonServer


def copy_feature_repo(dest: Path) -> Path:
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("data", "__pycache__"))
    return dest


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


def gateway_env(stack: Stack, **extra: str) -> dict[str, str]:
    return {
        "GATEWAY_TRITON_URL": f"http://{stack.triton.http_url}",
        "GATEWAY_FEATURE_REPO": str(stack.feature_repo),
        "GATEWAY_MODELS": f'["{MODEL}"]',
        "GATEWAY_MAX_BATCH_ROWS": "16",
        "GATEWAY_MAX_BODY_BYTES": "65536",
        **extra,
    }


@pytest.fixture(scope="session")
def gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Gateway]:
    with servers.gateway_process(tmp_path_factory.mktemp("gw"), gateway_env(stack)) as gw:
        yield gw
