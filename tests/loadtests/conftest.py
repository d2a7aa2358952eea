"""Fixtures of the load tests.

Real parts where they can run here: two models trained on the spot (a numeric matrix model,
and the demo's Pipeline with string columns, exported as one typed input per column),
registered in the session's SQLite MLflow registry, exported by ``builder export`` and served
by the real embedded Triton (started with the project's launcher on free ports); the gateway
user and a gate run against the real gateway live in tests/gateway/. The stand-in gateway of
helpers.py serves only the gate's failure paths (a target answering not-ready, a run past the
hard timeout); the release tests' stand-in for the Kubernetes API server, which cannot run
here, is in tests/release/helpers.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.loadtests.helpers import (
    MODEL,
    TYPED_MODEL,
    Served,
    typed_classifier,
)


@pytest.fixture(scope="session")
def served(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Real classifiers exported into one repository and served by real Triton: ``MODEL`` (one
    FP32 matrix of 5 features) and ``TYPED_MODEL`` (per-column FP32 and string inputs)."""
    from builder.export import ExportRequest, export_model
    from builder.runtime.install import install_runtime
    from builder.runtime.paths import default_runtime_dir
    from builder.runtime.server import TritonServer
    from support import models, servers

    repo = tmp_path_factory.mktemp("lt-served") / "model_repo"
    models.sklearn_classifier(MODEL)
    export_model(ExportRequest(f"models:/{MODEL}@champion", repo))
    typed_classifier(TYPED_MODEL)
    export_model(ExportRequest(f"models:/{TYPED_MODEL}@champion", repo))
    runtime = install_runtime(default_runtime_dir(), log=print)
    log = tmp_path_factory.mktemp("lt-triton-log") / "tritonserver.log"
    server = TritonServer(repo, runtime=runtime, log_path=log)
    server.start(timeout=180)
    try:
        yield Served(repo, MODEL, f"http://{server.http_url}", server.grpc_url)
    finally:
        servers.stop_now(server)
