"""Model -> ONNX, one converter per MLflow flavor."""

from __future__ import annotations

from builder.convert.base import DEFAULT_OPSET, FlavorConverter
from builder.convert.extras import require_extra
from builder.errors import ConversionError


def converter_for(flavor: str, *, output_names: list[str] | None = None) -> FlavorConverter:
    """The converter of ``flavor``; imports only that flavor's libraries, and refuses a flavor
    whose extra is not installed (MissingExtraError, naming the extra)."""
    require_extra(flavor)
    if flavor == "sklearn":
        from builder.convert.sklearn import SklearnConverter

        return SklearnConverter()
    if flavor == "xgboost":
        from builder.convert.boosting import XGBoostConverter

        return XGBoostConverter()
    if flavor == "lightgbm":
        from builder.convert.boosting import LightGBMConverter

        return LightGBMConverter()
    if flavor == "catboost":
        from builder.convert.catboost import CatBoostConverter

        return CatBoostConverter()
    if flavor == "pytorch":
        from builder.convert.pytorch import PyTorchConverter

        return PyTorchConverter(output_names)
    if flavor in ("keras", "tensorflow"):
        from builder.convert.keras import KerasConverter

        return KerasConverter(flavor, output_names)
    if flavor == "onnx":
        from builder.convert.onnx_flavor import OnnxConverter

        return OnnxConverter()
    raise ConversionError(f"no converter for flavor {flavor!r}")


__all__ = ["DEFAULT_OPSET", "FlavorConverter", "converter_for"]
