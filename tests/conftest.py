"""Fixtures shared by every test: a real MLflow registry on SQLite and the embedded Triton
runtime, per test session, and a factory that starts Triton servers on free ports.

``make test`` runs two pytest-xdist workers (``-n 2 --dist loadfile``): a test file runs whole in
one worker, so its module fixtures are built once; a session fixture (the gateway stack, the
registry) is built once per worker that needs it. (``loadgroup``, which would keep a folder
together, cannot: xdist 3.8 writes its group into ``item._nodeid``, which pytest 9 no longer reads.)
The longest files are handed out first (``LONGEST_FIRST``, with ``--no-loadscope-reorder`` in the
Makefile), so that no long file starts while the other worker is running out of work.

``triton_runtime`` installs the embedded runtime once per session (a no-op when it is already
installed) into ``$BUILDER_RUNTIME_DIR`` or the default cache dir. ``start_triton`` starts
servers on free ports with their log under the test's tmp dir, and stops every one it
started when the test ends, pass or fail (at once, without Triton's graceful wait:
``support.servers.stop_now`` says why).
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
from support.servers import stop_now

# The longest test files, longest first (seconds of one worker's time each, measured on this
# 2-core machine: docs/testing.md). A file runs whole in one worker, and xdist hands files out in
# collection order once its own reordering (files with more tests first) is off: a long file
# handed out last keeps one worker busy after the other has run out of work. Files not listed
# follow in collection order; a path no longer found is ignored (refresh the list from
# `--durations=0` when files move or the order of the slowest changes).
LONGEST_FIRST = (
    "tests/gateway/quality/test_evidence_replicas.py",  # 60 s
    "tests/gateway/test_gateway.py",  # 60 s
    "tests/builder/repository/test_export_crash.py",  # 59 s
    "tests/project/test_error_contract.py",  # 56 s
    "tests/builder/support_matrix/test_support_matrix.py",  # 49 s
    "tests/builder/score/test_score_served.py",  # 45 s
    "tests/builder/convert/test_typed_models.py",  # 41 s
    "tests/builder/mlflow_deploy/test_mlflow_deployments.py",  # 40 s
    "tests/builder/runtime/test_runtime.py",  # 37 s
    "tests/builder/repository/test_repository_crash.py",  # 36 s
    "tests/gateway/test_gateway_feature_reads.py",  # 32 s
    "tests/builder/tune/test_tune_cli.py",  # 30 s
    "tests/loadtests/test_gate.py",  # 26 s
    "tests/builder/export/test_export_kinds.py",  # 23 s
    "tests/builder/export/test_export_serve.py",  # 19 s
    "tests/release/test_release_modes.py",  # 18 s
    "tests/gateway/test_gateway_redis_faults.py",  # 18 s
    "tests/gateway/test_gateway_release_gate.py",  # 17 s
)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering; a stable sort keeps each file's order
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(Path(os.path.relpath(item.path, root)).as_posix(), len(rank)))


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
        stop_now(server)
