"""PyTorch models with integer inputs and no input example (issue 29, item 6), from a SQLite
MLflow registry through `builder export` to the real Triton, one server for the module.

MLflow's default ``pt2`` format needs an input example to trace the module, but saves none when
it is a torch tensor, a tuple or a list, so the builder draws its parity rows from the signature
alone. Ids drawn past an embedding's table made the native module and ONNX Runtime refuse them,
and the export blamed the converter. Now the ids stay below the module's smallest embedding; an
integer input whose range nothing in the module tells is refused, saying the builder's rows were
at fault and that an input example is needed. A model logged with an input example still uses
it, and a float-only model without one still exports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.export import ExportRequest, export_model
from builder.parity.rows import example_digest
from builder.runtime.server import TritonServer
from support import servers

pytestmark = pytest.mark.integration

TOKENS = "r3-torch-tokens"  # pt2, an embedding of 8 rows, no input example saved
WITH_EXAMPLE = "r3-torch-tokens-example"  # pickled, the same module, an input example saved
FLOAT_ONLY = "r3-torch-float"  # pt2, one float input, no input example saved
TABLE = "r3-torch-table"  # pt2, ids into a plain parameter table: their range is unknown
SERVED = (TOKENS, WITH_EXAMPLE, FLOAT_ONLY)
EXAMPLE = {
    "x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
    "ids": np.array([[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [1, 1, 2, 2, 3, 3], [0, 0, 0, 0, 0, 0]]),
}


def _signature(*inputs: tuple[str | None, Any, tuple[int, ...]]) -> Any:
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(dtype), shape, name) for name, dtype, shape in inputs]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 1))]),
    )


def _log(name: str, module: Any, signature: Any, example: Any, **kwargs: Any) -> None:
    import mlflow
    from mlflow import MlflowClient

    with mlflow.start_run():
        info = mlflow.pytorch.log_model(
            module,
            name="model",
            signature=signature,
            input_example=example,
            registered_model_name=name,
            pip_requirements=["torch"],
            **kwargs,
        )
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


@pytest.fixture(scope="module")
def natives(mlflow_registry: str) -> dict[str, Any]:
    """The four modules, logged as a user logs them and registered (alias ``champion``)."""
    import torch

    from tests.builder.convert.helpers import TableScorer, TokenScorer

    torch.manual_seed(0)
    tokens, table = TokenScorer().eval(), TableScorer().eval()
    float_only = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).eval()
    two_inputs = _signature(("x", np.float32, (-1, 3)), ("ids", np.int64, (-1, 6)))
    # pt2 (MLflow's default) traces with the example but saves no tuple or tensor as one.
    _log(TOKENS, tokens, two_inputs, (EXAMPLE["x"], EXAMPLE["ids"]))
    _log(WITH_EXAMPLE, tokens, two_inputs, EXAMPLE, serialization_format="pickle")
    _log(FLOAT_ONLY, float_only, _signature((None, np.float32, (-1, 4))), torch.zeros(4, 4))
    _log(TABLE, table, _signature(("category", np.int64, (-1, 1))), torch.zeros(4, 1, dtype=torch.int64))
    return {TOKENS: tokens, WITH_EXAMPLE: tokens, FLOAT_ONLY: float_only, TABLE: table}


@pytest.fixture(scope="module")
def repo(natives: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("round3-torch") / "model_repo"
    for name in SERVED:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    return repo


@pytest.fixture(scope="module")
def triton(
    repo: Path, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("round3-torch-log") / "tritonserver.log"
    with servers.serving(repo, triton_runtime, log) as server:
        yield server


def _fresh(name: str) -> dict[str, np.ndarray]:
    """Rows a user scores: every id the embedding has (0..7), the last one included."""
    rng = np.random.default_rng(11)
    if name == FLOAT_ONLY:
        return {"input": rng.normal(size=(10, 4)).astype(np.float32)}
    ids = rng.integers(0, 8, (10, 6))
    ids[0] = [7, 6, 5, 4, 3, 2]
    return {"x": rng.normal(size=(10, 3)).astype(np.float32), "ids": ids.astype(np.int64)}


def _native(module: Any, rows: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return np.asarray(module(*(torch.from_numpy(v) for v in rows.values())).numpy())


def _triton_http(server: TritonServer, model: str, rows: dict[str, np.ndarray]) -> np.ndarray:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    inputs = []
    for name, array in rows.items():
        inp = httpclient.InferInput(name, list(array.shape), "INT64" if array.dtype == np.int64 else "FP32")
        inp.set_data_from_numpy(array)
        inputs.append(inp)
    result = client.infer(model, inputs, outputs=[httpclient.InferRequestedOutput("output")])
    return np.asarray(result.as_numpy("output"))


def _metadata(repo: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((repo / name / "1" / "metadata.json").read_text()))


@pytest.mark.parametrize("name", SERVED)
def test_triton_answers_as_the_module(name: str, natives: dict[str, Any], triton: TritonServer) -> None:
    rows = _fresh(name)
    served, native = _triton_http(triton, name, rows), _native(natives[name], rows)
    np.testing.assert_allclose(served, native, atol=1e-5, rtol=1e-5)


def test_ids_without_an_example_stay_within_the_embedding(repo: Path) -> None:
    parity = _metadata(repo, TOKENS)["parity"]
    assert parity["passed"] and parity["source"] == "generated" and parity["rows"] >= 8
    # Warm-up sends the first generated row: an id past the table would fail the model's load.
    ids = np.frombuffer((repo / TOKENS / "warmup" / "ids").read_bytes(), dtype=np.int64)
    assert ids.shape == (6,) and ids.min() >= 0 and ids.max() < 8


def test_an_input_example_is_still_used(repo: Path) -> None:
    metadata = _metadata(repo, WITH_EXAMPLE)
    assert metadata["parity"]["passed"] and metadata["parity"]["source"] == "input_example+generated"
    assert metadata["input_example_sha256"] == example_digest(EXAMPLE)
    ids = np.frombuffer((repo / WITH_EXAMPLE / "warmup" / "ids").read_bytes(), dtype=np.int64)
    assert ids.tolist() == EXAMPLE["ids"][0].tolist()


def test_ids_of_unknown_range_refused_asking_for_an_example(natives: dict[str, Any], tmp_path: Path) -> None:
    repo = tmp_path / "model_repo"
    done = subprocess.run(
        [sys.executable, "-m", "builder", "export", f"models:/{TABLE}@champion", "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 4, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    assert len(lines) == 2, done.stderr
    error, hint = lines
    assert "the builder's generated parity rows are outside what the model accepts" in error
    assert "'category' 0..9" in error and "cannot know which integers it accepts" in error
    assert "converter" not in error and "ONNX Runtime" not in error
    assert "input_example=" in hint and "mlflow.pytorch.log_model" in hint
    assert not (repo / TABLE).exists()
