"""The ``support_matrix`` marker, and the one MLflow registry every case of the matrix is logged to."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "support_matrix: the generated support matrix (docs/support-matrix.md); run alone with -m"
    )


@pytest.fixture(scope="module")
def matrix_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A fresh SQLite registry as MLFLOW_TRACKING_URI, and an experiment id whose artifacts stay in
    the temp dir; the previous tracking URI is restored afterwards (other modules of the same
    worker have their own registry)."""
    import mlflow

    root = tmp_path_factory.mktemp("support_matrix")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    mlflow.set_tracking_uri(uri)
    experiment_id = mlflow.create_experiment("support-matrix", artifact_location=str(root / "artifacts"))
    try:
        yield experiment_id, root
    finally:
        if old is None:  # mlflow.set_tracking_uri cannot unset: a later registry fixture sets its own
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old
            mlflow.set_tracking_uri(old)
