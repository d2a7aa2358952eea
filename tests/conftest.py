"""Fixtures shared by every test: a real MLflow registry on SQLite and the embedded Triton
runtime, per test session, and a factory that starts Triton servers on free ports.

``make test`` runs two pytest-xdist workers (``-n 2 --dist loadfile``): a test file runs whole in
one worker, so its module fixtures are built once; a session fixture (the gateway stack, the
registry) is built once per worker that needs it. (``loadgroup``, which would keep a folder
together, cannot: xdist 3.8 writes its group into ``item._nodeid``, which pytest 9 no longer reads.)

``triton_runtime`` installs the embedded runtime once per session (a no-op when it is already
installed) into ``$BUILDER_RUNTIME_DIR`` or the default cache dir. ``start_triton`` starts
servers on free ports with their log under the test's tmp dir, and stops every one it
started when the test ends, pass or fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.runtime.install import install_runtime
from builder.runtime.paths import RuntimePaths, default_runtime_dir
from builder.runtime.server import ServerOptions, TritonServer


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


@pytest.fixture(scope="session")
def triton_runtime() -> RuntimePaths:
    """The embedded Triton runtime, installed once for the whole test session."""
    return install_runtime(default_runtime_dir(), log=print)


StartTriton = Callable[..., TritonServer]


@pytest.fixture
def start_triton(triton_runtime: RuntimePaths, tmp_path: Path) -> Iterator[StartTriton]:
    """``start_triton(repo, **ServerOptions_fields)`` -> a started server, stopped at teardown.

    Ports default to free ones; the log goes to ``tmp_path/tritonserver-N.log``.
    """
    servers: list[TritonServer] = []

    def start(
        repo: Path, *, timeout: float = 120, log_path: Path | None = None, **options: Any
    ) -> TritonServer:
        log_path = log_path or tmp_path / f"tritonserver-{len(servers)}.log"
        server = TritonServer(repo, ServerOptions(**options), runtime=triton_runtime, log_path=log_path)
        servers.append(server)
        return server.start(timeout=timeout)

    yield start
    for server in servers:
        server.stop()
