"""CatBoost models -> ONNX through CatBoost's own exporter (``save_model(format="onnx")``).

The exporter's graph is reshaped to the common contract (builder/kinds.py):

- its input ``features`` takes the served input's name;
- a classifier's probabilities come out of a ZipMap (a sequence of maps, which Triton cannot
  carry): the ZipMap is dropped and the plain [N, C] tensor before it is the output;
- a classifier's ``label`` is rebuilt as the class of the highest probability (what
  ``predict`` answers): the exporter's own label of a binary model is the class index, not the
  class (0/1 for classes 3/7), in onnxruntime;
- a regressor's ``predictions`` becomes ``prediction``.

Refused, each checked against the exporter (catboost 1.2.10): categorical, text and embedding
features (the exporter has no ONNX form for them), losses whose export does not answer what
``predict`` does (Poisson/Tweedie give the log-scale value, MultiClassOneVsAll a softmax, the
multi-target losses an invalid graph), and ranking losses.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from builder.convert.base import (
    FlavorConverter,
    ensure_default_opset,
    float32_tensors,
    native_frame,
    rename_outputs,
)
from builder.convert.boosting import classifier_outputs, refuse_string_columns
from builder.errors import ConversionError, first_line
from builder.kinds import LABEL, PREDICTION, PROBABILITIES, ModelKind
from builder.registry.signature import ModelInputs

CLASSIFICATION_LOSSES = ("Logloss", "CrossEntropy", "MultiClass")
REGRESSION_LOSSES = (
    "RMSE",
    "MAE",
    "Quantile",
    "Expectile",
    "Huber",
    "LogCosh",
    "MAPE",
    "Lq",
    "LogLinQuantile",
)
_REFUSED = {
    "Poisson": "CatBoost's ONNX export answers the log-scale value, not the exponent predict() returns",
    "Tweedie": "CatBoost's ONNX export answers the log-scale value, not the exponent predict() returns",
    "MultiClassOneVsAll": "CatBoost's ONNX export answers a softmax, not one sigmoid per class",
    "MultiRMSE": "CatBoost's ONNX export of a multi-target loss is not a valid graph",
    "MultiLogloss": "CatBoost's ONNX export of a multi-target loss is not a valid graph",
    "MultiCrossEntropy": "CatBoost's ONNX export of a multi-target loss is not a valid graph",
    "RMSEWithUncertainty": "CatBoost's ONNX export of a multi-target loss is not a valid graph",
}
# The exporter's own names.
_EXPORTED_LABEL, _EXPORTED_PREDICTION = "label", "predictions"


def _loss(model: Any) -> str:
    return str(model.get_all_params().get("loss_function", "")).split(":")[0]


class CatBoostConverter(FlavorConverter):
    flavor = "catboost"

    def load(self, local_path: Path) -> Any:
        import mlflow.catboost

        return mlflow.catboost.load_model(str(local_path))

    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        return float32_tensors(inputs)

    def describe(self, native: Any, inputs: ModelInputs) -> ModelKind:
        # Categorical features first: a model with string categories also has a string column,
        # and the categories are the reason it cannot be exported.
        for what, indices in (
            ("categorical", native.get_cat_feature_indices()),
            ("text", native.get_text_feature_indices()),
            ("embedding", native.get_embedding_feature_indices()),
        ):
            if indices:
                names = native.feature_names_ or []
                shown = ", ".join(repr(names[i]) if i < len(names) else str(i) for i in indices[:5])
                raise ConversionError(
                    f"this CatBoost model has {what} features ({shown}); CatBoost's ONNX export does "
                    "not support them",
                    hint="encode them as numbers before the model (e.g. target or one-hot encoding) "
                    "and train without cat_features/text_features/embedding_features",
                )
        refuse_string_columns(inputs, "CatBoost")
        loss = _loss(native)
        if loss in CLASSIFICATION_LOSSES:
            classes = list(native.classes_)
            if all(_integral(c) for c in classes):
                return ModelKind.classifier(int(c) for c in classes)
            if all(isinstance(c, str | np.str_) for c in classes):
                return ModelKind.classifier(str(c) for c in classes)
            shown = ", ".join(map(repr, classes[:5]))
            raise ConversionError(
                f"this CatBoost classifier has class labels ({shown}) that are neither integers nor "
                "strings, which the label output cannot carry",
                hint="train on integer or string class labels",
            )
        if loss in REGRESSION_LOSSES:
            return ModelKind.regressor()
        why = _REFUSED.get(loss, "a ranking or other loss whose output is neither classes nor a value")
        raise ConversionError(
            f"CatBoost loss {loss!r} is not exported: {why}",
            hint="train with " + ", ".join(CLASSIFICATION_LOSSES + REGRESSION_LOSSES),
        )

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        if len(inputs.tensors) != 1 or len(inputs.tensors[0].shape) != 2:
            raise ConversionError("CatBoost models take one 2-D input; the signature has others")
        with tempfile.TemporaryDirectory(prefix="builder-catboost-") as tmp:
            path = Path(tmp) / "model.onnx"
            try:
                native.save_model(str(path), format="onnx")
            except Exception as exc:  # CatBoostError, with the exporter's reason
                raise ConversionError(
                    f"CatBoost cannot export this model to ONNX: {first_line(exc, 200)}",
                    hint="CatBoost exports models without categorical/text features",
                ) from exc
            model = onnx.load(str(path))
        _rename_input(model, inputs.tensors[0].name)
        kind = self.describe(native, inputs)
        if not kind.is_classifier:
            return rename_outputs(model, {_EXPORTED_PREDICTION: PREDICTION})
        _drop_zipmap(model)
        _label_from_probabilities(model, kind.classes or ())
        return model

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        x = native_frame(feeds, inputs)
        kind = self.describe(native, inputs)
        if kind.is_classifier:
            probabilities = np.asarray(native.predict(x, prediction_type="Probability"))
            return classifier_outputs(probabilities, kind.classes)
        return {PREDICTION: np.asarray(native.predict(x), dtype=np.float64).reshape(-1, 1)}


def _integral(value: Any) -> bool:
    return isinstance(value, int | np.integer) or (
        isinstance(value, float | np.floating) and float(value).is_integer()
    )


def _rename_input(model: onnx.ModelProto, name: str) -> None:
    (graph_input,) = model.graph.input
    old = graph_input.name
    graph_input.name = name
    for node in model.graph.node:
        node.input[:] = [name if i == old else i for i in node.input]


def _drop_zipmap(model: onnx.ModelProto) -> None:
    """Make the tensor a ZipMap reads the ``probabilities`` output itself."""
    graph = model.graph
    for zipmap in [n for n in graph.node if n.op_type == "ZipMap"]:
        source, target = zipmap.input[0], zipmap.output[0]
        graph.node.remove(zipmap)
        for node in graph.node:
            node.output[:] = [target if o == source else o for o in node.output]
    for out in graph.output:
        if out.name == PROBABILITIES:
            out.type.CopyFrom(helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, ["batch", None]))


def _label_from_probabilities(model: onnx.ModelProto, classes: tuple[Any, ...]) -> None:
    """``label`` = classes[argmax(probabilities)], [N, 1]: int64, or string for string classes."""
    graph = model.graph
    for node in graph.node:  # the exporter's label stays computed but unused
        node.output[:] = [f"{LABEL}__exported" if o == _EXPORTED_LABEL else o for o in node.output]
    strings = any(isinstance(c, str) for c in classes)
    dtype = onnx.TensorProto.STRING if strings else onnx.TensorProto.INT64
    table = (
        np.array([str(c) for c in classes], dtype=object) if strings else np.array(classes, dtype=np.int64)
    )
    values = numpy_helper.from_array(table, f"{LABEL}__classes")
    graph.initializer.append(values)
    graph.node.extend(
        [
            helper.make_node("ArgMax", [PROBABILITIES], [f"{LABEL}__index"], axis=1, keepdims=1),
            helper.make_node("Gather", [values.name, f"{LABEL}__index"], [LABEL], axis=0),
        ]
    )
    for out in graph.output:
        if out.name == LABEL:
            out.type.CopyFrom(helper.make_tensor_type_proto(dtype, ["batch", 1]))
    ensure_default_opset(model)
