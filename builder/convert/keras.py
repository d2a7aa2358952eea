"""Keras 3 models (TensorFlow backend) -> ONNX with a dynamic batch axis (tf2onnx).

Both MLflow flavors that log a Keras model are taken: ``mlflow.keras`` (flavor ``keras``, a
``.keras`` file) and ``mlflow.tensorflow`` given a Keras model (flavor ``tensorflow``, model type
``keras``); each is loaded with its own flavor's ``load_model``. What is not a Keras model is
refused: a SavedModel (``mlflow.keras.log_model(..., save_exported_model=True)``, or a
``tf.Module`` logged with ``mlflow.tensorflow``) keeps only its traced endpoints, and a TF1
estimator has none the builder can call.

The graph is traced from a ``tf.function`` whose arguments are the served inputs, named and
typed as the signature says (a single unnamed tensor: ``input``) with the batch axis dynamic,
and which returns the outputs under their served names; ``tf2onnx.convert.from_function`` names
the graph's inputs and outputs after them (what Keras' own ``model.export(format="onnx")`` also
calls, but that one names inputs after the model's ``Input`` layers and outputs ``output_0``).
A model of several inputs is fed a dict keyed by the signature's names, which a functional
model matches to its inputs by name (its dict keys, or its ``Input`` layers' names).

What a Keras model answers cannot be told reliably (a sigmoid unit may be a probability or a
bounded regression), so, as for PyTorch, its kind is ``other``: outputs passed through, named
after the signature's outputs (``output`` for one unnamed), or the model's own dict keys.

Integer inputs are ids more often than numbers: generated parity ids stay below the smallest
``Embedding`` layer's ``input_dim``, and ids the model still refuses are reported as the
builder's rows (builder/convert/ids.py).
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter, float32_tensors
from builder.convert.ids import EmbeddingTables, check_generated_ids, id_vocabulary
from builder.errors import ConversionError, first_line
from builder.kinds import ModelKind
from builder.parity.rows import Feeds
from builder.registry.signature import ModelInputs

TABLES = EmbeddingTables(
    layer="Embedding layer",
    example_hint="log the model with an input example of values it accepts: input_example= in "
    "mlflow.tensorflow.log_model or mlflow.keras.log_model (a numpy array for one input; for "
    "several, a dict of numpy arrays keyed by the model's input names)",
)
KERAS_HINT = (
    "log the Keras model itself: mlflow.keras.log_model(model, ...) without save_exported_model, "
    "or mlflow.tensorflow.log_model(model, ...) with a keras.Model; or convert it to ONNX "
    '(model.export("model.onnx", format="onnx")) and log it with mlflow.onnx.log_model'
)
CONVERT_HINT = (
    "a layer or op tf2onnx has no ONNX conversion for: rewrite it with standard Keras layers, or "
    'convert the model yourself (model.export("model.onnx", format="onnx")) and log it with '
    "mlflow.onnx.log_model"
)


class KerasConverter(FlavorConverter):
    library = "tf2onnx"

    def __init__(self, flavor: str, output_names: list[str] | None = None) -> None:
        self.flavor = flavor  # "keras" (mlflow.keras) or "tensorflow" (mlflow.tensorflow)
        self.output_names = output_names

    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        """float64 tensors (a numpy example's default) served as float32: what a Keras model's
        layers compute in (its default dtype policy), so nothing is lost and clients send half."""
        return float32_tensors(inputs)

    def load(self, local_path: Path) -> Any:
        import keras
        import mlflow

        conf = mlflow.models.Model.load(str(local_path)).flavors.get(self.flavor, {})
        if self.flavor == "keras" and conf.get("save_exported_model"):
            raise ConversionError(
                "this Keras model was logged as an exported SavedModel (save_exported_model=True), "
                "which keeps only a traced endpoint, not the Keras model",
                hint=KERAS_HINT,
            )
        if self.flavor == "tensorflow" and conf.get("model_type", "keras") != "keras":
            raise ConversionError(
                f"this TensorFlow model is a {conf.get('model_type')} (a tf.Module or TF1 estimator "
                "SavedModel), not a Keras model; the builder converts Keras models",
                hint=KERAS_HINT,
            )
        if keras.backend.backend() != "tensorflow":
            raise ConversionError(
                f"Keras runs on the {keras.backend.backend()} backend here; the builder converts "
                "Keras models through TensorFlow",
                hint="unset KERAS_BACKEND (or set it to tensorflow) and export again",
            )
        with _quiet():
            if self.flavor == "keras":
                import mlflow.keras

                model = mlflow.keras.load_model(str(local_path))
            else:
                import mlflow.tensorflow

                model = mlflow.tensorflow.load_model(str(local_path))
        if not isinstance(model, keras.Model):
            raise ConversionError(
                f"the {self.flavor} flavor loaded a {type(model).__name__}, not a Keras model",
                hint=KERAS_HINT,
            )
        return model

    def describe(self, native: Any, inputs: ModelInputs) -> ModelKind:
        """Kind ``other`` (the module docstring says why), once the signature's inputs are known
        to be the model's: several inputs are fed by name."""
        expected = _input_names(native)
        signed = [t.name for t in inputs.tensors]
        if len(signed) > 1 and expected is not None and set(signed) != set(expected):
            raise ConversionError(
                f"the signature's inputs {sorted(signed)} are not the Keras model's inputs "
                f"{sorted(expected)}, which it takes by name",
                hint="log it again with signature=infer_signature(X, y) (or input_example=X) where X "
                f"is a dict of numpy arrays keyed by the model's input names: {', '.join(sorted(expected))}",
            )
        return ModelKind("other")

    def vocabulary(self, native: Any, inputs: ModelInputs) -> dict[str, tuple[Any, ...]]:
        """Integer inputs draw their parity ids below the smallest Embedding layer's input_dim."""
        return id_vocabulary(embedding_rows(native), inputs)

    def check_generated(self, native: Any, feeds: Feeds, inputs: ModelInputs) -> None:
        predict = functools.partial(self.predict, native, inputs=inputs)
        check_generated_ids(predict, feeds, inputs, embedding_rows(native), TABLES)

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        import tensorflow as tf
        import tf2onnx

        specs = [
            tf.TensorSpec((None, *[d if d >= 0 else None for d in t.shape[1:]]), t.dtype, name=t.name)
            for t in inputs.tensors
        ]

        def serve(*tensors: Any) -> dict[str, Any]:
            return self._named(native(_feed(native, tensors, inputs), training=False))

        try:
            with _quiet():
                graph, _ = tf2onnx.convert.from_function(
                    tf.function(serve, input_signature=specs), input_signature=specs, opset=opset
                )
        except Exception as exc:  # tf2onnx and TensorFlow raise ValueError, KeyError, TypeError, ...
            raise ConversionError(
                f"tf2onnx cannot convert {self.model_name(native)}: {type(exc).__name__}: {first_line(exc)}",
                hint=CONVERT_HINT,
            ) from exc
        return graph

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        import keras

        tensors = [feeds[t.name] for t in inputs.tensors]
        with _quiet():
            out = native(_feed(native, tensors, inputs), training=False)
        return {name: np.asarray(keras.ops.convert_to_numpy(o)) for name, o in self._named(out).items()}

    def _named(self, out: Any) -> dict[str, Any]:
        """The model's outputs under their served names: a dict's own keys; else the signature's
        names when they count as many, ``output`` for one, ``output_0``, ... for several."""
        if isinstance(out, dict):
            return {str(k): v for k, v in out.items()}
        flat = list(out) if isinstance(out, list | tuple) else [out]
        names = self.output_names
        if not names or len(names) != len(flat):
            names = ["output"] if len(flat) == 1 else [f"output_{i}" for i in range(len(flat))]
        return dict(zip(names, flat, strict=True))


def _input_struct(model: Any) -> Any:
    """A functional model's inputs as it was built on them (a dict, a list, or one tensor);
    None for a subclassed model, which has none until called."""
    try:
        return model.input
    except (AttributeError, ValueError):
        return None


def _input_names(model: Any) -> list[str] | None:
    """The names a dict fed to the model is matched by: a dict-built model's keys, else its
    Input layers' names (Keras matches a dict to a list of inputs by them)."""
    struct = _input_struct(model)
    if isinstance(struct, dict):
        return [str(k) for k in struct]
    inputs = getattr(model, "inputs", None)
    return [str(t.name) for t in inputs] if inputs else None


def _feed(model: Any, tensors: Any, inputs: ModelInputs) -> Any:
    """The model's call argument: one tensor, or a dict keyed by the served names (a dict-built
    model of one input gets its one key)."""
    struct = _input_struct(model)
    if len(inputs.tensors) == 1:
        (value,) = tensors
        if isinstance(struct, dict) and len(struct) == 1:
            return {next(iter(struct)): value}
        return value
    return {t.name: v for t, v in zip(inputs.tensors, tensors, strict=True)}


def embedding_rows(model: Any) -> int | None:
    """The ``input_dim`` of the smallest Embedding layer in ``model`` (nested models and layers
    included): the exclusive upper bound of the ids every one of them accepts; None without one."""
    import keras

    layers = model._flatten_layers(include_self=False, recursive=True)
    sizes = [int(layer.input_dim) for layer in layers if isinstance(layer, keras.layers.Embedding)]
    return min(sizes) if sizes else None


@contextmanager
def _quiet() -> Iterator[None]:
    """tf2onnx and TensorFlow log each conversion step and warn about their own deprecations;
    the builder prints its own progress, and a refusal is raised, not logged."""
    loggers = [logging.getLogger(name) for name in ("tf2onnx", "tensorflow", "absl")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)
