"""Fixtures of the load-test and release tests.

Real parts where they can run here: two models trained on the spot (a numeric matrix model,
and the demo's Pipeline with string columns, exported as one typed input per column),
registered in the session's SQLite MLflow registry, exported by ``builder export`` and served
by the real embedded Triton (started with the project's launcher on free ports); the gateway
user and a gate run against the real gateway live in tests/gateway/. ``gateway_standin.py``
serves only the gate's failure paths (a target answering not-ready, a run past the hard
timeout); ``fake_kube.py`` stands in for the Kubernetes API server, which cannot run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_SCRIPT = Path(__file__).resolve().parent / "smoke_user.py"
MODEL = "lt-fraud"
TYPED_MODEL = "lt-typed"


@dataclass(frozen=True)
class Served:
    """The exported repository and the Triton serving it."""

    repo: Path
    model: str
    http_url: str  # http://127.0.0.1:PORT
    grpc_url: str  # 127.0.0.1:PORT
    typed_model: str = TYPED_MODEL  # "columns" layout: FP32 and BYTES (string) inputs


def typed_classifier(name: str) -> None:
    """The demo's Pipeline (impute/scale numerics, one-hot strings, boosting) on synthetic rows,
    registered as ``name@champion``: what the demo serves, in seconds."""
    import mlflow
    import numpy as np
    import pandas as pd
    from mlflow import MlflowClient

    from support.train import SKOPS_TRUSTED_TYPES, build_pipeline

    rng = np.random.default_rng(0)
    rows = 300
    X = pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, rows),
            "merchant_risk": rng.uniform(0, 1, rows),
            "channel": rng.choice(["web", "app", "pos"], rows).astype(object),
            "merchant_category": rng.choice(["grocery", "travel", "gaming"], rows).astype(object),
        }
    )
    logit = 3 * X.merchant_risk + 1.0 * (X.channel == "web") + 0.8 * (X.merchant_category == "gaming") - 2.5
    y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-logit))).astype(int)
    model = build_pipeline(["amount", "merchant_risk"], ["channel", "merchant_category"], n_estimators=10)
    model.fit(X, y)
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name=name,
            skops_trusted_types=SKOPS_TRUSTED_TYPES,
            pip_requirements=["scikit-learn"],  # given: inferring them takes seconds
        )
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


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


def run_cli(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``loadtests ...`` as a user runs it, in its own process."""
    return subprocess.run(
        [sys.executable, "-c", "from loadtests.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
    )


def smoke_user(
    user_class: str, locust_args: list[str], tmp_path: Path, requests: int = 5, timeout: float = 90
) -> dict[str, Any]:
    """Run one Locust user with ``run_single_user`` in a subprocess (Locust patches the process
    it is imported into with gevent; this pytest process must stay unpatched)."""
    out = tmp_path / f"smoke-{user_class}.json"
    proc = subprocess.run(
        [sys.executable, str(SMOKE_SCRIPT), user_class, str(requests), str(out), "--", *locust_args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, f"smoke script failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result
