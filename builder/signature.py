"""MLflow model signature -> the tensors the exported model takes.

Two signature kinds exist in MLflow:
- column-based (a DataFrame: tabular scikit-learn/XGBoost/LightGBM models): all numeric columns
  become ONE float32 tensor ``input`` of shape [-1, n_columns], columns in signature order. The
  order is recorded (``feature_names``) so a client (the gateway) assembles rows exactly as the
  model was trained.
- tensor-based (PyTorch, ONNX): each named tensor spec becomes an input as declared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlflow.models.signature import ModelSignature
from mlflow.types.schema import ColSpec
from mlflow.types.schema import TensorSpec as MlflowTensorSpec

from builder.errors import ConversionError
from builder.tensors import TensorSpec, is_supported_dtype

TABULAR_INPUT = "input"
_NUMERIC_COLUMNS = {"double", "float", "long", "integer", "boolean"}


@dataclass(frozen=True)
class ModelInputs:
    """What the exported model takes, derived once from the signature."""

    tensors: tuple[TensorSpec, ...]
    # Column order of a tabular model's single input; None for tensor-based signatures.
    feature_names: tuple[str, ...] | None

    @property
    def tabular(self) -> bool:
        return self.feature_names is not None


def inputs_from_signature(signature: ModelSignature | None, *, model_ref: str) -> ModelInputs:
    """Derive the exported model's inputs, or refuse with a reason the user can act on."""
    if signature is None or signature.inputs is None:
        raise ConversionError(
            f"{model_ref} was logged without a signature, so its input names, types and shapes are unknown",
            hint="log it again with input_example=... or signature=infer_signature(X, y)",
        )
    specs = signature.inputs.inputs
    if all(isinstance(s, ColSpec) for s in specs):
        return _tabular(specs, model_ref)
    if all(isinstance(s, MlflowTensorSpec) for s in specs):
        return _tensors(specs, model_ref)
    raise ConversionError(f"{model_ref}: signature mixes column and tensor inputs")


def _tabular(specs: list, model_ref: str) -> ModelInputs:
    names: list[str] = []
    for i, spec in enumerate(specs):
        type_name = str(spec.type.name) if hasattr(spec.type, "name") else str(spec.type)
        col = spec.name or f"column {i}"
        if type_name not in _NUMERIC_COLUMNS:
            raise ConversionError(
                f"{model_ref}: input column {col!r} has type {type_name}; only numeric columns "
                "can become a Triton tensor",
                hint="encode categorical/string columns to numbers before the model, or log a "
                "tensor-based signature",
            )
        if not spec.name:
            raise ConversionError(f"{model_ref}: input column {i} has no name in the signature")
        names.append(spec.name)
    tensor = TensorSpec(name=TABULAR_INPUT, dtype="float32", shape=(-1, len(names)))
    return ModelInputs(tensors=(tensor,), feature_names=tuple(names))


def _tensors(specs: list, model_ref: str) -> ModelInputs:
    tensors: list[TensorSpec] = []
    for i, spec in enumerate(specs):
        dtype = np.dtype(spec.type).name
        if not is_supported_dtype(dtype):
            raise ConversionError(f"{model_ref}: input tensor {spec.name or i} has dtype {dtype}")
        name = spec.name or (TABULAR_INPUT if len(specs) == 1 else f"input_{i}")
        tensors.append(TensorSpec(name=name, dtype=dtype, shape=tuple(int(d) for d in spec.shape)))
    return ModelInputs(tensors=tuple(tensors), feature_names=None)
