"""XGBoost and LightGBM models -> ONNX through onnxmltools.

onnxmltools' tree converters support opsets up to 15 (a higher target fails with "higher than
... the converter support"), so these models are exported at opset 15 whatever is asked.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter, float32_tensors, native_frame
from builder.convert.sklearn import describe_estimator, native_outputs
from builder.errors import ConversionError
from builder.kinds import ModelKind
from builder.signature import ModelInputs

TREE_OPSET = 15


class _BoostingConverter(FlavorConverter):
    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        return float32_tensors(inputs)

    def describe(self, native: Any, inputs: ModelInputs) -> ModelKind:
        return describe_estimator(native, self.flavor)

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        return native_outputs(native, native_frame(feeds, inputs))

    def _convert(self, convert: Any, native: Any, inputs: ModelInputs, **kwargs: Any) -> onnx.ModelProto:
        from onnxmltools.convert.common.data_types import FloatTensorType

        if len(inputs.tensors) != 1 or len(inputs.tensors[0].shape) != 2:
            raise ConversionError(f"{self.flavor} models take one 2-D input; the signature has others")
        (tensor,) = inputs.tensors
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return convert(
                    native,
                    initial_types=[(tensor.name, FloatTensorType([None, tensor.shape[1]]))],
                    target_opset=TREE_OPSET,
                    **kwargs,
                )
        except Exception as exc:  # onnxmltools raises bare RuntimeError/ValueError/AttributeError
            raise ConversionError(
                f"onnxmltools cannot convert this {self.flavor} model: {str(exc).strip()[:200]}",
                hint="objectives with ONNX support: binary/multiclass classification, regression",
            ) from exc


class XGBoostConverter(_BoostingConverter):
    flavor = "xgboost"

    def load(self, local_path: Path) -> Any:
        import mlflow.xgboost

        return mlflow.xgboost.load_model(str(local_path))

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        from onnxmltools import convert_xgboost

        # The converter reads split features as f0, f1, ...; a model fitted on a DataFrame
        # carries column names instead, so convert a copy whose booster has none.
        stripped = copy.deepcopy(native)
        booster = stripped.get_booster() if hasattr(stripped, "get_booster") else stripped
        booster.feature_names = None
        return self._convert(convert_xgboost, stripped, inputs)


class LightGBMConverter(_BoostingConverter):
    flavor = "lightgbm"

    def load(self, local_path: Path) -> Any:
        import mlflow.lightgbm

        return mlflow.lightgbm.load_model(str(local_path))

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        from onnxmltools import convert_lightgbm

        return self._convert(convert_lightgbm, native, inputs, zipmap=False)
