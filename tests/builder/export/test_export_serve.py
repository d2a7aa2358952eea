"""End to end, real parts only: train small models of every flavor, register them in a SQLite
MLflow registry, `builder export` them, serve the repository on the real embedded Triton, and
compare what Triton answers over HTTP and gRPC with the native models' predictions."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.ensemble_models import transforms
from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import models, servers

pytestmark = pytest.mark.integration

FLAVORS = {
    "sk-clf": models.sklearn_classifier,
    "sk-reg": models.sklearn_regressor,
    "xgb-clf": models.xgboost_classifier,
    "lgbm-clf": models.lightgbm_classifier,
    "torch-mlp": models.pytorch_mlp,
}


@pytest.fixture(scope="session")
def exported(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = tmp_path_factory.mktemp("served") / "model_repo"
    registered = {name: train(name) for name, train in FLAVORS.items()}
    for name in registered:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    registered["ens"] = models.sklearn_for_ensemble("ens")
    # The ensemble model goes through the real CLI, as a user runs it.
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "builder",
            "export",
            "models:/ens@champion",
            "--repo",
            str(repo),
            "--ensemble",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    return {"repo": repo, "models": registered}


@pytest.fixture(scope="session")
def triton(
    exported: dict[str, Any], triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("triton-log") / "tritonserver.log"
    with servers.serving(exported["repo"], triton_runtime, log) as server:
        yield server


def rows(reg: models.Registered, n: int = 16) -> np.ndarray:
    return reg.X.iloc[:n].to_numpy(dtype=np.float32)


def native(reg: models.Registered, x: np.ndarray) -> dict[str, np.ndarray]:
    """The original model's answer on the float32 rows Triton receives."""
    if isinstance(reg.native, pd.DataFrame | np.ndarray):
        raise AssertionError
    if hasattr(reg.native, "predict_proba"):
        frame = pd.DataFrame(x.astype(np.float64), columns=models.FEATURES)
        return {
            "probabilities": reg.native.predict_proba(frame),
            "label": reg.native.predict(frame).reshape(-1, 1),
        }
    if hasattr(reg.native, "predict"):
        frame = pd.DataFrame(x.astype(np.float64), columns=models.FEATURES)
        return {"prediction": reg.native.predict(frame).reshape(-1, 1)}
    import torch

    with torch.no_grad():
        return {"output": reg.native(torch.from_numpy(x)).numpy()}


def infer_http(
    server: TritonServer, model: str, x: np.ndarray, outputs: list[str], version: str = ""
) -> dict[str, np.ndarray]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(
        model, [inp], model_version=version, outputs=[httpclient.InferRequestedOutput(o) for o in outputs]
    )
    return {o: result.as_numpy(o) for o in outputs}


def infer_grpc(server: TritonServer, model: str, x: np.ndarray, outputs: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


@pytest.mark.parametrize("name", list(FLAVORS))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_answers_like_the_native_model(
    triton: TritonServer, exported: dict[str, Any], name: str, protocol: str
):
    reg = exported["models"][name]
    x = rows(reg) if name != "torch-mlp" else reg.X.iloc[:16].to_numpy(dtype=np.float32)
    expected = native(reg, x)
    infer = infer_http if protocol == "http" else infer_grpc
    got = infer(triton, name, x, list(expected))
    for key, want in expected.items():
        assert got[key].shape == want.shape, key
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got[key], want)
        else:
            np.testing.assert_allclose(got[key], want, atol=1e-5, rtol=1e-5)


def test_ensemble_applies_training_preprocessing_and_threshold(
    triton: TritonServer, exported: dict[str, Any]
):
    reg = exported["models"]["ens"]
    raw = reg.X.iloc[:32].to_numpy(dtype=np.float32)  # includes NaNs the preprocess imputes
    assert np.isnan(raw).any()
    got = infer_grpc(triton, "ens_ensemble", raw, ["score", "label", "probabilities"])
    features = transforms.preprocess(raw, reg.extra["spec"]["preprocess"])
    probs = reg.native.predict_proba(pd.DataFrame(features.astype(np.float64), columns=models.FEATURES))
    np.testing.assert_allclose(got["probabilities"], probs, atol=1e-5)
    np.testing.assert_allclose(got["score"][:, 0], probs[:, 1], atol=1e-5)
    # threshold 0.3 from the run's decision_threshold param, not the default 0.5
    np.testing.assert_array_equal(got["label"][:, 0], (probs[:, 1] >= 0.3).astype(np.int64))


def test_dynamic_batching_groups_concurrent_requests(triton: TritonServer, exported: dict[str, Any]):
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.aio as aioclient

    x = rows(exported["models"]["sk-clf"], 1)

    async def fire(n: int) -> None:
        client = aioclient.InferenceServerClient(triton.grpc_url)
        try:

            async def one() -> None:
                inp = aioclient.InferInput("input", list(x.shape), "FP32")
                inp.set_data_from_numpy(x)
                await client.infer("sk-clf", [inp])

            await asyncio.gather(*(one() for _ in range(n)))
        finally:
            await client.close()

    def counts() -> tuple[int, int]:
        stats = grpcclient.InferenceServerClient(triton.grpc_url).get_inference_statistics(
            "sk-clf", as_json=True
        )
        s = stats["model_stats"][0]
        return int(s.get("inference_count", 0)), int(s.get("execution_count", 0))

    before = counts()
    asyncio.run(fire(256))
    after = counts()
    inferences, executions = after[0] - before[0], after[1] - before[1]
    assert inferences == 256
    assert executions < inferences, "every request ran alone: the dynamic batcher formed no batch"


def test_new_version_loads_and_unloads_while_serving(triton: TritonServer, exported: dict[str, Any]):
    import mlflow
    import tritonclient.http as httpclient
    from sklearn.ensemble import RandomForestClassifier

    reg = exported["models"]["sk-clf"]
    X, y = models.dataset(seed=5)
    v2 = RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0).fit(X, y)
    with mlflow.start_run():
        info = mlflow.sklearn.log_model(
            v2,
            name="model",
            input_example=X.iloc[:5],
            registered_model_name="sk-clf",
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            pip_requirements=["scikit-learn"],  # given: inferring them takes seconds
        )
    version = int(info.registered_model_version)
    assert version == reg.version + 1
    export_model(ExportRequest(f"models:/sk-clf/{version}", exported["repo"]))
    client = httpclient.InferenceServerClient(triton.http_url)
    x = rows(reg)
    before = infer_http(triton, "sk-clf", x, ["probabilities"])["probabilities"]
    client.load_model("sk-clf")  # re-reads the repository: version_policy latest:1 -> v2
    deadline = time.monotonic() + 60
    while not client.is_model_ready("sk-clf", str(version)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.is_model_ready("sk-clf", str(version))
    served = infer_http(triton, "sk-clf", x, ["probabilities"], version=str(version))["probabilities"]
    frame = pd.DataFrame(x.astype(np.float64), columns=models.FEATURES)
    np.testing.assert_allclose(served, v2.predict_proba(frame), atol=1e-5)
    assert not np.allclose(served, before)
    client.unload_model("sk-clf")
    deadline = time.monotonic() + 30
    while client.is_model_ready("sk-clf") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not client.is_model_ready("sk-clf")
    assert client.is_model_ready("xgb-clf"), "unloading one model must leave the others serving"
    client.load_model("sk-clf")


def test_builder_validate_accepts_the_exported_repository(exported: dict[str, Any]):
    result = subprocess.run(
        [sys.executable, "-m", "builder", "validate", "--repo", str(exported["repo"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_metadata_records_source_signature_and_parity(exported: dict[str, Any]):
    import json

    meta = json.loads((Path(exported["repo"]) / "xgb-clf" / "1" / "metadata.json").read_text())
    assert meta["source"]["flavor"] == "xgboost" and meta["source"]["registered_name"] == "xgb-clf"
    assert meta["signature"]["feature_names"] == models.FEATURES
    assert meta["parity"]["passed"] and meta["parity"]["outputs"]["probabilities"]["max_abs_err"] < 1e-5
    assert meta["input_example_sha256"]
