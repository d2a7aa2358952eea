"""scikit-learn estimators and Pipelines -> ONNX through skl2onnx.

Classifiers export ``label`` and ``probabilities`` as plain tensors (``zipmap: False``: a ZipMap
gives a sequence of maps, which Triton cannot carry); regressors export ``prediction``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter
from builder.errors import ConversionError
from builder.signature import ModelInputs


def final_estimator(model: Any) -> Any:
    """The last step of a Pipeline (what decides classifier vs regressor), or the model."""
    steps = getattr(model, "steps", None)
    return steps[-1][1] if steps else model


def is_classifier(model: Any) -> bool:
    return hasattr(final_estimator(model), "predict_proba")


def tabular_frame(feeds: dict[str, np.ndarray], inputs: ModelInputs) -> Any:
    """The single tabular tensor as the DataFrame the model was fitted on (names, order)."""
    import pandas as pd

    (tensor,) = inputs.tensors
    # float64 of the float32 values: the native model sees exactly what Triton will be sent.
    return pd.DataFrame(feeds[tensor.name].astype(np.float64), columns=list(inputs.feature_names or ()))


def native_outputs(model: Any, frame: Any) -> dict[str, np.ndarray]:
    """Native predictions keyed and shaped like the ONNX outputs of the tree/sklearn converters."""
    if is_classifier(model):
        return {
            "label": np.asarray(model.predict(frame)).reshape(-1, 1),
            "probabilities": np.asarray(model.predict_proba(frame)),
        }
    return {"prediction": np.asarray(model.predict(frame), dtype=np.float64).reshape(-1, 1)}


class SklearnConverter(FlavorConverter):
    flavor = "sklearn"

    def load(self, local_path: Path) -> Any:
        import mlflow.sklearn

        return mlflow.sklearn.load_model(str(local_path))

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType

        if not inputs.tabular:
            raise ConversionError("scikit-learn models need a column-based (DataFrame) signature")
        (tensor,) = inputs.tensors
        options: dict[int, dict[str, Any]] = {}
        final_types = None
        if is_classifier(native):
            options[id(final_estimator(native))] = {"zipmap": False}
        else:
            final_types = [("prediction", FloatTensorType([None, 1]))]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # skl2onnx warns about opset/version pairs
                model = to_onnx(
                    native,
                    initial_types=[(tensor.name, FloatTensorType([None, tensor.shape[1]]))],
                    options=options,
                    target_opset=opset,
                    final_types=final_types,
                )
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
            raise ConversionError(
                f"skl2onnx cannot convert {type(final_estimator(native)).__name__}: {_first_line(exc)}",
                hint="use estimators skl2onnx supports, or register a converter for custom steps",
            ) from exc
        return model

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        return native_outputs(native, tabular_frame(feeds, inputs))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
