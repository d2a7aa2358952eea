"""Fixtures of builder score's tests: one local Spark session (local[2]) for the session, and
the scoring stack: the demo's Feast repository (generated, applied, materialized), three models
trained on its point-in-time features, exported into one repository, served by the embedded
Triton, with `gateway serve` in front."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support import servers
from tests.builder.score.helpers import (
    BOOSTER,
    MULTICLASS,
    PIPELINE,
    ScoringStack,
    copy_feature_repo,
    register_booster,
    register_multiclass,
)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from builder.score.session import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def scoring_stack(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScoringStack]:
    import mlflow

    from builder.export import ExportRequest, export_model
    from support.train import demo_training_frame, prepare_feature_store, train_and_register

    root = tmp_path_factory.mktemp("score-stack")
    repo = copy_feature_repo(root / "feature_repo")
    store = prepare_feature_store(repo)
    experiment = mlflow.get_experiment_by_name("tests").experiment_id
    frame = demo_training_frame(store)
    train_and_register(store, PIPELINE, experiment, n_estimators=10)
    register_booster(frame, BOOSTER, experiment)
    register_multiclass(frame, MULTICLASS, experiment)
    model_repo = root / "model_repo"
    for name in (PIPELINE, BOOSTER, MULTICLASS):
        export_model(ExportRequest(f"models:/{name}@champion", model_repo))
    env = {
        "GATEWAY_FEATURE_REPO": str(repo),
        "GATEWAY_MODELS": f'["{PIPELINE}", "{BOOSTER}", "{MULTICLASS}"]',
        "GATEWAY_MISSING_ENTITIES": "default",  # unknown users score with stand-ins, as in the batch
        "GATEWAY_MAX_BATCH_ROWS": "16",
    }
    with servers.serving(model_repo, triton_runtime, root / "tritonserver.log") as triton:
        env["GATEWAY_TRITON_URL"] = f"grpc://{triton.grpc_url}"
        with servers.gateway_process(root, env) as gateway:
            yield ScoringStack(repo, store, model_repo, triton, gateway, frame)
