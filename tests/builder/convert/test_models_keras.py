"""Keras 3 models (TensorFlow backend), from a SQLite MLflow registry through `builder export` to
the real Triton, one server for the module (issue 29, item 8).

Logged as users log them: a fitted Sequential of Dense layers on a float64 numpy array with
``mlflow.tensorflow.log_model``; a functional model of two named inputs (floats, and int64 ids
into an ``Embedding``) with ``mlflow.tensorflow.log_model`` and a dict input example; a
Sequential ``Embedding`` over ids with ``mlflow.keras.log_model`` and a signature, no input
example (MLflow 3.17's ``mlflow.keras.log_model`` fails writing one: it saves the example before
it makes the model's folder), whose generated parity ids must stay below the layer's
``input_dim``. Triton's HTTP answers are compared with the models'
own predictions. What is refused: a signature whose input names are not the model's (it takes
several inputs by name), and a model logged as an exported SavedModel (no Keras model left).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.errors import ConversionError
from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import servers

pytestmark = [
    pytest.mark.integration,
    # Keras 3.15 reads a TensorFlow variable with np.array(x), which numpy 2 deprecates (fit, save)
    pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning"),
]

SEQUENTIAL = "keras-sequential"  # mlflow.tensorflow, float64 example, fitted
FUNCTIONAL = "keras-functional"  # mlflow.tensorflow, two named inputs, ids into an Embedding(8)
EMBEDDING = "keras-embedding"  # mlflow.keras, ids into an Embedding(5), no input example
RENAMED = "keras-renamed"  # two inputs signed under other names than the model's
EXPORTED_ARCHIVE = "keras-exported-archive"  # mlflow.keras(save_exported_model=True)
SERVED = (SEQUENTIAL, FUNCTIONAL, EMBEDDING)
TOKENS, SMALL_TABLE = 8, 5


def _functional(keras: Any, names: tuple[str, str] = ("x", "ids")) -> Any:
    x = keras.Input((3,), name=names[0])
    ids = keras.Input((6,), dtype="int64", name=names[1])
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(TOKENS, 4)(ids))
    out = keras.layers.Dense(2, activation="softmax")(keras.layers.Concatenate()([x, pooled]))
    return keras.Model({names[0]: x, names[1]: ids}, out)


def _log(flavor: str, name: str, model: Any, **kwargs: Any) -> None:
    import mlflow
    from mlflow import MlflowClient

    with mlflow.start_run():
        info = getattr(mlflow, flavor).log_model(
            model, name="model", registered_model_name=name, pip_requirements=["tensorflow-cpu"], **kwargs
        )
    MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


@pytest.fixture(scope="module")
def natives(mlflow_registry: str) -> dict[str, Any]:
    """The models, logged and registered (alias ``champion``)."""
    import keras
    from mlflow.models import infer_signature
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)

    X = rng.normal(size=(64, 4))  # float64, as a user's numpy data is
    sequential = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    sequential.compile(optimizer="adam", loss="mse")
    sequential.fit(X, X @ [0.5, -1.0, 2.0, 0.1], epochs=2, batch_size=16, verbose=0)
    _log("tensorflow", SEQUENTIAL, sequential, input_example=X[:5])

    functional = _functional(keras)
    example = {"x": rng.normal(size=(4, 3)).astype(np.float32), "ids": rng.integers(0, TOKENS, (4, 6))}
    signature = infer_signature(example, functional.predict(example, verbose=0))
    _log("tensorflow", FUNCTIONAL, functional, signature=signature, input_example=example)

    ids = keras.Input((4,), dtype="int64")
    head = keras.layers.Dense(1, activation="sigmoid")
    embedding = keras.Sequential([ids, keras.layers.Embedding(SMALL_TABLE, 3), keras.layers.Flatten(), head])
    ids_only = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.int64), (-1, 4))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 1))]),
    )
    _log("keras", EMBEDDING, embedding, signature=ids_only)

    renamed = _functional(keras, names=("features", "tokens"))
    _log("keras", RENAMED, renamed, signature=signature)

    archive = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    sig = infer_signature(X[:5].astype(np.float32), archive.predict(X[:5], verbose=0))
    _log("keras", EXPORTED_ARCHIVE, archive, signature=sig, save_exported_model=True)
    return {SEQUENTIAL: sequential, FUNCTIONAL: functional, EMBEDDING: embedding}


@pytest.fixture(scope="module")
def repo(natives: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("keras") / "model_repo"
    for name in SERVED:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    return repo


@pytest.fixture(scope="module")
def triton(
    repo: Path, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("keras-log") / "tritonserver.log"
    with servers.serving(repo, triton_runtime, log) as server:
        yield server


def _fresh(name: str) -> dict[str, np.ndarray]:
    """Rows a user scores, the last id of each table included."""
    rng = np.random.default_rng(11)
    if name == SEQUENTIAL:
        return {"input": rng.normal(size=(10, 4)).astype(np.float32)}
    if name == EMBEDDING:
        ids = rng.integers(0, SMALL_TABLE, (10, 4))
        ids[0] = [SMALL_TABLE - 1, 0, 1, 2]
        return {"input": ids.astype(np.int64)}
    ids = rng.integers(0, TOKENS, (10, 6))
    ids[0] = [TOKENS - 1, 6, 5, 4, 3, 2]
    return {"x": rng.normal(size=(10, 3)).astype(np.float32), "ids": ids.astype(np.int64)}


def _native(model: Any, rows: dict[str, np.ndarray]) -> np.ndarray:
    feed = rows["input"] if list(rows) == ["input"] else rows
    return np.asarray(model.predict(feed, verbose=0))


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
def test_triton_answers_as_the_keras_model(name: str, natives: dict[str, Any], triton: TritonServer) -> None:
    rows = _fresh(name)
    served, native = _triton_http(triton, name, rows), _native(natives[name], rows)
    assert served.shape == native.shape
    np.testing.assert_allclose(served, native, atol=1e-5, rtol=1e-5)


def test_inputs_are_served_as_signed(repo: Path) -> None:
    """One unnamed tensor is ``input`` (float64 signed, served FP32); named ones keep their
    names and dtypes; every version answers ``output``, passed through (kind ``other``)."""
    sequential, functional = _metadata(repo, SEQUENTIAL), _metadata(repo, FUNCTIONAL)
    for metadata in (sequential, functional):
        assert metadata["parity"]["passed"] and metadata["parity"]["source"] == "input_example+generated"
    config = (repo / FUNCTIONAL / "config.pbtxt").read_text()
    assert 'name: "x"' in config and 'name: "ids"' in config and "TYPE_INT64" in config
    assert 'name: "output"' in config
    assert "TYPE_FP64" not in (repo / SEQUENTIAL / "config.pbtxt").read_text()
    for metadata in (sequential, functional):
        assert metadata["serving"]["kind"] == "other"


def test_ids_without_an_example_stay_within_the_embedding(repo: Path) -> None:
    parity = _metadata(repo, EMBEDDING)["parity"]
    assert parity["passed"] and parity["source"] == "generated" and parity["rows"] >= 8
    # Warm-up sends the first generated row: an id past the table would fail the model's load.
    ids = np.frombuffer((repo / EMBEDDING / "warmup" / "input").read_bytes(), dtype=np.int64)
    assert ids.shape == (4,) and ids.min() >= 0 and ids.max() < SMALL_TABLE


def test_inputs_signed_under_other_names_are_refused_naming_the_model_s(
    natives: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(ConversionError) as refused:
        export_model(ExportRequest(f"models:/{RENAMED}@champion", tmp_path / "model_repo"))
    error = refused.value
    assert "['ids', 'x'] are not the Keras model's inputs ['features', 'tokens']" in error.message
    assert error.hint is not None and "input names: features, tokens" in error.hint
    assert not (tmp_path / "model_repo").exists()


def test_an_exported_savedmodel_is_refused_with_what_to_log(natives: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ConversionError) as refused:
        export_model(ExportRequest(f"models:/{EXPORTED_ARCHIVE}@champion", tmp_path / "model_repo"))
    error = refused.value
    assert "save_exported_model=True" in error.message and EXPORTED_ARCHIVE in error.message
    assert error.hint is not None and "mlflow.keras.log_model(model" in error.hint
    assert "mlflow.onnx.log_model" in error.hint
