"""Fixtures shared by every test: a real MLflow registry on SQLite, per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mlflow_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh SQLite MLflow tracking+registry server-less store, set as MLFLOW_TRACKING_URI.

    Set in os.environ (not monkeypatched) so `builder` subprocesses the tests start see it too.
    """
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    import mlflow

    mlflow.set_tracking_uri(uri)
    # Artifacts go to a known folder, never ./mlruns of wherever pytest was started.
    exp_id = mlflow.create_experiment("tests", artifact_location=str(root / "artifacts"))
    mlflow.set_experiment(experiment_id=exp_id)
    yield uri
    if old is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    return tmp_path / "model_repo"
