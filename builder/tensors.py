"""Tensor descriptions shared by conversion, parity, config generation and validation, and
the two ONNX-graph helpers every stage uses (``graph_tensors``, ``check_model``).

One vocabulary for dtypes: numpy's names (``float32``), mapped here, and only here, to
Triton's (``TYPE_FP32``) and ONNX's (``TensorProto.FLOAT``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from builder.errors import ConversionError, first_line

# numpy dtype name -> (Triton config DataType name, ONNX element type)
_DTYPES: dict[str, tuple[str, int]] = {
    "float32": ("TYPE_FP32", TensorProto.FLOAT),
    "float64": ("TYPE_FP64", TensorProto.DOUBLE),
    "float16": ("TYPE_FP16", TensorProto.FLOAT16),
    "int64": ("TYPE_INT64", TensorProto.INT64),
    "int32": ("TYPE_INT32", TensorProto.INT32),
    "int16": ("TYPE_INT16", TensorProto.INT16),
    "int8": ("TYPE_INT8", TensorProto.INT8),
    "uint8": ("TYPE_UINT8", TensorProto.UINT8),
    "bool": ("TYPE_BOOL", TensorProto.BOOL),
    # Strings travel as Triton BYTES (TYPE_STRING in a config); numpy holds them as objects.
    "string": ("TYPE_STRING", TensorProto.STRING),
}
_FROM_ONNX = {onnx_type: name for name, (_, onnx_type) in _DTYPES.items()}
_FROM_TRITON = {triton: name for name, (triton, _) in _DTYPES.items()}


def triton_dtype(dtype: str) -> str:
    """``float32`` -> ``TYPE_FP32``."""
    return _DTYPES[dtype][0]


def dtype_from_triton(triton: str) -> str:
    """``TYPE_FP32`` -> ``float32``; unknown types raise KeyError."""
    return _FROM_TRITON[triton]


def dtype_from_onnx(elem_type: int) -> str:
    """ONNX element type -> numpy dtype name; unknown types raise KeyError."""
    return _FROM_ONNX[elem_type]


def is_supported_dtype(dtype: str) -> bool:
    return dtype in _DTYPES


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype arrays of ``dtype`` have: ``object`` (Python str) for strings."""
    return np.dtype(object) if dtype == "string" else np.dtype(dtype)


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: numpy dtype name and full shape, ``-1`` for a variable dimension.

    ``shape[0]`` is the batch dimension when the model batches (``-1``).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def batched(self) -> bool:
        return len(self.shape) > 0 and self.shape[0] == -1

    def sample(self, rows: int, rng: np.random.Generator, vocabulary: tuple[object, ...] = ()) -> np.ndarray:
        """Random values of this spec with ``rows`` in the batch dimension (for parity).

        Strings are drawn from ``vocabulary`` (what the model learned, e.g. a OneHotEncoder's
        categories): random characters would only ever test the "unknown" path.
        """
        shape = tuple(rows if i == 0 and d == -1 else (d if d > 0 else 1) for i, d in enumerate(self.shape))
        if self.dtype == "string" or vocabulary:
            words = np.array(vocabulary or ("",), dtype=object)
            return np.array(rng.choice(words, size=shape), dtype=object).astype(numpy_dtype(self.dtype))
        if self.dtype == "bool":
            return rng.integers(0, 2, size=shape).astype(bool)
        if self.dtype.startswith("int") or self.dtype.startswith("uint"):
            return rng.integers(0, 10, size=shape).astype(self.dtype)
        return rng.normal(size=shape).astype(self.dtype)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


def graph_tensors(values: Any) -> tuple[TensorSpec, ...]:
    """TensorSpecs of graph inputs or outputs; symbolic or unknown dims become -1."""
    specs = []
    for value in values:
        ttype = value.type.tensor_type
        try:
            dtype = dtype_from_onnx(ttype.elem_type)
        except KeyError:
            raise ConversionError(
                f"ONNX tensor {value.name!r} has element type {ttype.elem_type}, which Triton "
                "configs here do not carry",
                hint=f"give the graph inputs and outputs of these types: {', '.join(_DTYPES)}",
            ) from None
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim)
        specs.append(TensorSpec(name=value.name, dtype=dtype, shape=shape))
    return tuple(specs)


def check_model(model: onnx.ModelProto, model_ref: str) -> onnx.ModelProto:
    """Run ONNX's own checker so a malformed graph is refused here, not at Triton load time."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = first_line(exc)
        raise ConversionError(
            f"{model_ref}: the converted ONNX graph is invalid: {first}",
            hint="onnx.checker.check_model refuses it: an ONNX model logged as is must pass it; a "
            "converted one is the converter's bug, to report to its project; nothing was written",
        ) from exc
    return model
