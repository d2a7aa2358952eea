"""The converter interface and the ONNX graph helpers every flavor shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from builder.errors import ConversionError
from builder.kinds import ModelKind
from builder.registry.signature import ModelInputs
from builder.tensors import TensorSpec

# Opset 17 is what the ONNX Runtime in Triton 24.10 (1.19) runs and every converter here
# emits; the tree-model converters of onnxmltools stop at 15 (their own limit, see boosting).
DEFAULT_OPSET = 17
# Default-domain opset declared for graphs that import none (pure ai.onnx.ml tree graphs) once
# the builder adds a standard op to them; 15 is what onnxmltools pairs with its ML opset. An
# older graph's IR version must rise with it: opset 15 needs IR 8 (CatBoost exports IR 3).
FALLBACK_OPSET = 15
IR_FOR_FALLBACK_OPSET = 8


class FlavorConverter(ABC):
    """One MLflow flavor: load it natively, say what it is, convert it to ONNX, predict
    natively for parity."""

    flavor: str

    @abstractmethod
    def load(self, local_path: Path) -> Any:
        """Load the native model through its MLflow flavor."""

    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        """The inputs as this flavor's converter can take them (default: as signed)."""
        return inputs

    def describe(self, native: Any, inputs: ModelInputs) -> ModelKind:
        """Binary/multi-class classifier (with its classes), regressor, or other; raise
        ConversionError for a model the converters cannot express (e.g. a ranking objective)."""
        return ModelKind("other")

    def vocabulary(self, native: Any, inputs: ModelInputs) -> dict[str, tuple[Any, ...]]:
        """Per string (or categorical integer) input: values the model learned (categories,
        vocabulary words), from which parity rows are drawn. Empty when the model does not say."""
        return {}

    @abstractmethod
    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        """Convert; raise ConversionError naming the unconvertible part."""

    @abstractmethod
    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        """Native outputs keyed by the ONNX output names, shaped like the ONNX outputs."""


def native_frame(feeds: dict[str, np.ndarray], inputs: ModelInputs) -> Any:
    """The served tensors as the native model's input: the DataFrame it was fitted on for
    column-based signatures (names, order, dtypes), the single array for tensor ones.

    Float columns are the float32 values widened to float64, so the native model sees exactly
    what Triton will be sent; strings are Python str.
    """
    import pandas as pd

    if inputs.layout == "matrix":
        (tensor,) = inputs.tensors
        return pd.DataFrame(feeds[tensor.name].astype(np.float64), columns=list(inputs.feature_names or ()))
    if inputs.layout == "columns":
        data: dict[str, Any] = {}
        for column in inputs.columns:
            values = feeds[column.name].reshape(-1)
            if column.dtype == "float32":
                values = values.astype(np.float64)
            elif column.dtype == "string":
                values = np.array([str(v) for v in values], dtype=object)
            data[column.name] = values
        return pd.DataFrame(data, columns=[c.name for c in inputs.columns])
    if len(inputs.tensors) == 1:
        return feeds[inputs.tensors[0].name]
    raise ConversionError(f"{len(inputs.tensors)} input tensors: this flavor takes one")


def float32_tensors(inputs: ModelInputs) -> ModelInputs:
    """A float64 tensor signature served as float32: what the tree and linear converters all
    compute in (several have no double kernels, e.g. HistGradientBoosting's TreeEnsemble)."""
    if inputs.layout != "tensors":
        return inputs
    tensors = tuple(
        TensorSpec(t.name, "float32", t.shape) if t.dtype == "float64" else t for t in inputs.tensors
    )
    return ModelInputs(layout=inputs.layout, tensors=tensors, columns=inputs.columns)


def rename_outputs(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    """Rename graph outputs (``variable`` -> ``prediction``), so every flavor answers with the
    same output names (builder/kinds.py)."""
    graph = model.graph
    for old, new in names.items():
        if old == new or old not in {o.name for o in graph.output}:
            continue
        for node in graph.node:
            node.output[:] = [new if o == old else o for o in node.output]
            node.input[:] = [new if i == old else i for i in node.input]
        for out in graph.output:
            if out.name == old:
                out.name = new
    return model


def normalize_outputs(model: onnx.ModelProto, probe: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Declare every output as [batch, ...] and give per-row scalars a trailing axis of 1.

    Converters declare output shapes loosely (onnxmltools says ``label`` is [1] when it is [N];
    others leave the rank out), and Triton's config is derived from the declared shapes. So the
    graph is run once on ``probe`` rows and the outputs are re-declared from what it really
    returns. A rank-1 output (a classifier's ``label``) becomes [N, 1]: Triton describes a
    batched tensor by its per-row dims, and a plain ``dims: [1]`` loads on every backend,
    where ``reshape`` support varies.
    """
    import onnxruntime as ort

    # A session of its own: this graph is not the final one (its outputs are re-declared here),
    # so the export's one session of the final graph (parity.compare.GraphSession) comes after.
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    actual = dict(zip([o.name for o in session.get_outputs()], session.run(None, probe), strict=True))
    graph = model.graph
    for out in graph.output:
        shape = actual[out.name].shape
        if len(shape) == 1:
            inner = f"{out.name}__rank1"
            for node in graph.node:
                node.output[:] = [inner if o == out.name else o for o in node.output]
            # Reshape (opset >= 5), not Unsqueeze (whose axes input needs opset 13): tree
            # converters emit graphs at old or no default-domain opsets.
            target = helper.make_tensor(f"{out.name}__shape", onnx.TensorProto.INT64, [2], [-1, 1])
            graph.initializer.append(target)
            graph.node.append(helper.make_node("Reshape", [inner, target.name], [out.name]))
            ensure_default_opset(model)
            shape = (*shape, 1)
        declared = out.type.tensor_type.shape
        declared.ClearField("dim")
        declared.dim.add().dim_param = "batch"
        for d in shape[1:]:
            declared.dim.add().dim_value = d
    return model


def ensure_default_opset(model: onnx.ModelProto) -> None:
    """Declare the default-domain opset (and its IR version) in a graph that imports none."""
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("", FALLBACK_OPSET))
        model.ir_version = max(model.ir_version, IR_FOR_FALLBACK_OPSET)
