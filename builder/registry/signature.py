"""MLflow model signature -> the tensors the exported model takes, and their layout.

Three layouts (see docs/serving-contract.md), recorded with every version so clients build
their inputs from it:

- ``matrix``: a column-based signature whose columns are all numeric becomes ONE float32
  tensor ``input`` [-1, n_columns], columns in signature order. Cheap to send and what tree
  and linear models want.
- ``columns``: a column-based signature with a string column becomes one input per column,
  named after it, typed, shape [-1, 1], in signature order: skl2onnx's convention for
  DataFrame pipelines (a ColumnTransformer picks its columns out of these inputs). An
  all-numeric one too when the loaded model picks its columns by name (the converter's
  ``reads_columns_by_name``; ints int64, floats float32).
- ``tensors``: a tensor-based signature (numpy-trained models, PyTorch, ONNX): each named
  tensor spec becomes an input as declared; a single unnamed one is ``input`` (an ONNX
  model's converter maps it onto the graph's only input, whatever the graph calls it).
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
# MLflow column type -> the dtype the column is served as in the ``columns`` layout. Integers
# are int64 whatever their width (one Triton type for clients to send); doubles are float32,
# as in the matrix layout, which is what every converter computes in.
_COLUMN_DTYPES = {
    "double": "float32",
    "float": "float32",
    "long": "int64",
    "integer": "int64",
    "boolean": "bool",
    "string": "string",
}
_REFUSED = {
    "datetime": "encode it before the model (e.g. epoch seconds, or hour/day-of-week columns)",
    "binary": "decode it before the model, or pass it as a string column",
}


@dataclass(frozen=True)
class Column:
    """One signature column and the dtype it is served as."""

    name: str
    dtype: str  # float32 | int64 | bool | string

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "dtype": self.dtype}


@dataclass(frozen=True)
class ModelInputs:
    """What the exported model takes, derived once from the signature."""

    layout: str  # "matrix" | "columns" | "tensors"
    tensors: tuple[TensorSpec, ...]
    columns: tuple[Column, ...] = ()  # signature order; empty for the tensors layout

    @property
    def tabular(self) -> bool:
        """Column-based (a DataFrame model): matrix or columns layout."""
        return self.layout != "tensors"

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        return tuple(c.name for c in self.columns) if self.tabular else None

    @property
    def has_strings(self) -> bool:
        return any(t.dtype == "string" for t in self.tensors)


def inputs_from_signature(
    signature: ModelSignature | None, *, model_ref: str, layout: str | None = None
) -> ModelInputs:
    """Derive the exported model's inputs, or refuse with a reason the user can act on.

    ``layout="columns"``: a column-based signature as one input per column even when every
    column is numeric (a model that picks its columns by name, decided once it is loaded)."""
    if signature is None or signature.inputs is None:
        raise ConversionError(
            f"{model_ref} was logged without a signature, so its input names, types and shapes are unknown",
            hint="log it again with signature=infer_signature(X, y), or input_example=... (every "
            "flavor but mlflow.onnx infers a signature from it; an ONNX model needs signature=...)",
        )
    specs = signature.inputs.inputs
    if all(isinstance(s, ColSpec) for s in specs):
        return _tabular(specs, model_ref, by_column=layout == "columns")
    if all(isinstance(s, MlflowTensorSpec) for s in specs):
        return _tensors(specs, model_ref)
    raise ConversionError(
        f"{model_ref}: signature mixes column and tensor inputs",
        hint="log it again with one kind of input example: a DataFrame (columns) or arrays (tensors)",
    )


def _tabular(specs: list, model_ref: str, by_column: bool = False) -> ModelInputs:
    columns: list[Column] = []
    for i, spec in enumerate(specs):
        type_name = str(spec.type.name) if hasattr(spec.type, "name") else str(spec.type)
        col = spec.name or f"column {i}"
        if type_name in _REFUSED:
            raise ConversionError(
                f"{model_ref}: input column {col!r} has type {type_name}, which no Triton tensor carries",
                hint=_REFUSED[type_name],
            )
        if type_name not in _COLUMN_DTYPES:
            raise ConversionError(
                f"{model_ref}: input column {col!r} has type {type_name}; columns may be string, "
                "long, integer, double, float or boolean",
                hint="flatten nested values (arrays, objects) into columns before the model",
            )
        if not spec.name:
            raise ConversionError(
                f"{model_ref}: input column {i} has no name in the signature",
                hint="log it again with a DataFrame input example whose columns are named",
            )
        columns.append(Column(spec.name, _COLUMN_DTYPES[type_name]))
    if all(c.dtype != "string" for c in columns) and not by_column:
        # All numeric: one float matrix, the cheapest request to build and send.
        matrix = tuple(Column(c.name, "float32") for c in columns)
        tensor = TensorSpec(name=TABULAR_INPUT, dtype="float32", shape=(-1, len(columns)))
        return ModelInputs(layout="matrix", tensors=(tensor,), columns=matrix)
    tensors = tuple(TensorSpec(name=c.name, dtype=c.dtype, shape=(-1, 1)) for c in columns)
    return ModelInputs(layout="columns", tensors=tensors, columns=tuple(columns))


def _tensors(specs: list, model_ref: str) -> ModelInputs:
    tensors: list[TensorSpec] = []
    for i, spec in enumerate(specs):
        dtype = np.dtype(spec.type).name
        if dtype in ("object", "str") or dtype.startswith("<U"):
            dtype = "string"
        if not is_supported_dtype(dtype):
            raise ConversionError(
                f"{model_ref}: input tensor {spec.name or i} has dtype {dtype}, which no Triton tensor "
                "carries here",
                hint="log it with an input example of float32/float64, int64/int32 or bool values, "
                "or strings",
            )
        name = spec.name or (TABULAR_INPUT if len(specs) == 1 else f"input_{i}")
        tensors.append(TensorSpec(name=name, dtype=dtype, shape=tuple(int(d) for d in spec.shape)))
    return ModelInputs(layout="tensors", tensors=tuple(tensors))
