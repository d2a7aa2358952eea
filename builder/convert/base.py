"""The converter interface and the ONNX graph helpers every flavor shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from builder.errors import ConversionError
from builder.signature import ModelInputs
from builder.tensors import TensorSpec, dtype_from_onnx

# Opset 17 is what the ONNX Runtime in Triton 24.10 (1.19) runs and every converter here
# emits; the tree-model converters of onnxmltools stop at 15 (their own limit, see boosting).
DEFAULT_OPSET = 17


class FlavorConverter(ABC):
    """One MLflow flavor: load it natively, convert it to ONNX, predict natively for parity."""

    flavor: str

    @abstractmethod
    def load(self, local_path: Path) -> Any:
        """Load the native model through its MLflow flavor."""

    @abstractmethod
    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        """Convert; raise ConversionError naming the unconvertible part."""

    @abstractmethod
    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        """Native outputs keyed by the ONNX output names, shaped like the ONNX outputs."""


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
                "configs here do not carry"
            ) from None
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in ttype.shape.dim)
        specs.append(TensorSpec(name=value.name, dtype=dtype, shape=shape))
    return tuple(specs)


def batch_outputs_2d(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every rank-1 output (e.g. a classifier's ``label`` of shape [N]) shape [N, 1].

    Triton describes a batched output by its per-row dims, and a per-row scalar has none; a
    trailing axis of 1 keeps the config plain (``dims: [1]``) on both the embedded and the
    NGC server, instead of relying on ``reshape`` support in every backend.
    """
    graph = model.graph
    for out in list(graph.output):
        dims = out.type.tensor_type.shape.dim
        if len(dims) != 1:
            continue
        inner = f"{out.name}__rank1"
        for node in graph.node:
            node.output[:] = [inner if o == out.name else o for o in node.output]
        axes = helper.make_tensor(f"{out.name}__axes", onnx.TensorProto.INT64, [1], [1])
        graph.initializer.append(axes)
        graph.node.append(helper.make_node("Unsqueeze", [inner, axes.name], [out.name]))
        batch = dims[0]
        new_dims = [batch.dim_param or (batch.dim_value if batch.dim_value else "N"), 1]
        out.type.tensor_type.shape.ClearField("dim")
        for d in new_dims:
            dim = out.type.tensor_type.shape.dim.add()
            if isinstance(d, str):
                dim.dim_param = d
            else:
                dim.dim_value = d
    return model


def check_model(model: onnx.ModelProto, model_ref: str) -> onnx.ModelProto:
    """Run ONNX's own checker so a malformed graph is refused here, not at Triton load time."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConversionError(f"{model_ref}: the converted ONNX graph is invalid: {first}") from exc
    return model
