"""``builder export --ensemble`` in both shapes (the real CLI), served by the real Triton: the
``steps`` ensemble (ONNX pre/postprocess models + a Triton ensemble) and the ``fused`` graph
answer exactly what the bare model plus the numpy reference math answer, and ``builder
validate`` accepts the repository."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.ensemble_models import transforms
from builder.runtime.server import TritonServer
from tests import models, servers

pytestmark = pytest.mark.integration

MODES = {"steps": "enssteps", "fused": "ensfused"}


def builder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=300
    )


def infer(server: TritonServer, model: str, x: np.ndarray, outputs: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


@pytest.fixture(scope="module")
def served(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TritonServer, Path, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("ensemble-onnx")
    repo = root / "model_repo"
    registered = {}
    for mode, name in MODES.items():
        registered[mode] = models.sklearn_for_ensemble(name)
        args = ["export", f"models:/{name}@champion", "--repo", str(repo), "--ensemble"]
        cli = builder(*args, "--ensemble-mode", mode)
        assert cli.returncode == 0, cli.stderr
    with servers.serving(repo, triton_runtime, root / "tritonserver.log") as server:
        yield server, repo, registered


def raw_rows(reg: models.Registered) -> np.ndarray:
    raw = reg.X.iloc[:48].to_numpy(dtype=np.float32).copy()
    raw[0] = np.nan  # an all-NaN row: every column imputed
    raw[1:4, :] = np.nan
    return raw


def test_steps_and_fused_answer_like_the_bare_model_and_the_reference(
    served: tuple[TritonServer, Path, dict[str, Any]],
) -> None:
    server, _, registered = served
    for mode, name in MODES.items():
        reg = registered[mode]
        raw = raw_rows(reg)
        spec = reg.extra["spec"]
        got = infer(server, f"{name}_ensemble", raw, ["probabilities", "score", "label"])
        features = transforms.preprocess(raw, spec["preprocess"])
        bare = infer(server, name, features, ["probabilities"])["probabilities"]
        post = {**spec["postprocess"], "threshold": reg.extra["threshold"]}  # the run's param
        score, label = transforms.postprocess(bare, post)
        np.testing.assert_array_equal(got["probabilities"], bare, err_msg=mode)
        np.testing.assert_array_equal(got["score"], score, err_msg=mode)
        np.testing.assert_array_equal(got["label"], label, err_msg=mode)
        assert got["score"].dtype == np.float32 and got["label"].dtype == np.int64


def test_every_generated_part_runs_on_onnxruntime_and_validates(
    served: tuple[TritonServer, Path, dict[str, Any]],
) -> None:
    import tritonclient.grpc as grpcclient

    server, repo, _ = served
    client = grpcclient.InferenceServerClient(server.grpc_url)
    steps = MODES["steps"]
    for model in (f"{steps}_preprocess", f"{steps}_postprocess", f"{MODES['fused']}_ensemble"):
        config = client.get_model_config(model).config
        assert config.backend == "onnxruntime", model
    ensemble = client.get_model_config(f"{steps}_ensemble").config
    assert ensemble.platform == "ensemble"
    fused = client.get_model_config(f"{MODES['fused']}_ensemble").config
    # The fused model is the ensemble's drop-in: the same serving contract for clients.
    assert {k for k in fused.parameters if k.startswith("serving.")} == {
        k for k in ensemble.parameters if k.startswith("serving.")
    }
    assert [o.name for o in fused.output] == ["probabilities", "score", "label"]
    check = builder("validate", "--repo", str(repo))
    assert check.returncode == 0, check.stdout + check.stderr


def test_ensemble_mode_without_ensemble_is_refused(mlflow_registry: str, tmp_path: Path) -> None:
    models.sklearn_for_ensemble("lonely")
    cli = builder("export", "models:/lonely@champion", "--repo", str(tmp_path), "--ensemble-mode", "fused")
    assert cli.returncode != 0
    assert "--ensemble-mode needs --ensemble" in cli.stderr
    assert not any(tmp_path.iterdir())
