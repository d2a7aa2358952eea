"""The converter interface and the ONNX graph helpers every flavor shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from builder.errors import ConversionError, first_line
from builder.kinds import ModelKind
from builder.registry.signature import ModelInputs
from builder.tensors import TensorSpec

if TYPE_CHECKING:
    from builder.parity.rows import Feeds

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
    library = "the converter"  # what makes the ONNX graph, named in refusals

    @abstractmethod
    def load(self, local_path: Path) -> Any:
        """Load the native model through its MLflow flavor."""

    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        """The inputs as this flavor's converter can take them (default: as signed)."""
        return inputs

    def reads_columns_by_name(self, native: Any) -> bool:
        """Whether the loaded model picks its input columns by name, so that an all-numeric
        signature must be served one input per column (layout ``columns``), not as one matrix."""
        return False

    def model_name(self, native: Any) -> str:
        """The native model as a refusal names it."""
        return type(native).__name__

    def describe(self, native: Any, inputs: ModelInputs) -> ModelKind:
        """Binary/multi-class classifier (with its classes), regressor, or other; raise
        ConversionError for a model the converters cannot express (e.g. a ranking objective)."""
        return ModelKind("other")

    def vocabulary(self, native: Any, inputs: ModelInputs) -> dict[str, tuple[Any, ...]]:
        """Per string (or categorical integer) input: values the model learned (categories,
        vocabulary words), from which parity rows are drawn. Empty when the model does not say."""
        return {}

    def known_values_only(self, native: Any, inputs: ModelInputs) -> dict[str, str]:
        """Inputs on which the model refuses any value it did not learn (a scikit-learn encoder
        with ``handle_unknown="error"``), each with what refuses it: their parity rows keep to
        the learned values and the input example (no empty string, no unseen value)."""
        return {}

    def known_cause(self, native: Any, stage: str) -> str | None:
        """The hint for a refusal whose cause shows in the model's own parameters (a documented
        gap of the converter), saying what to change in the model; None when none is known.
        ``stage``: ``convert`` (the converter refused the model) or ``parity`` (its graph
        refuses the parity rows, or answers differently from the model)."""
        return None

    def check_generated(self, native: Any, feeds: Feeds, inputs: ModelInputs) -> None:
        """Raise ConversionError, saying the builder's rows are at fault, when the native model
        refuses the rows the builder generated (``feeds.generated()``); run before any converter
        or ONNX Runtime sees them, so they are never blamed for those rows. Default: nothing to
        check (the flavor's vocabulary keeps its rows within what the model takes)."""
        return None

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


def cast_input(model: onnx.ModelProto, name: str, served: int) -> onnx.ModelProto:
    """Declare the graph input ``name`` as the ONNX type ``served`` and cast it, first thing,
    to the type the converter built the graph for (a bool column served as BOOL, as its
    signature says, into a graph built for int64)."""
    graph = model.graph
    (declared,) = [i for i in graph.input if i.name == name]
    inner = f"{name}__as_converted"
    _rename_tensor(graph, name, inner)
    graph.node.insert(0, helper.make_node("Cast", [name], [inner], to=declared.type.tensor_type.elem_type))
    declared.type.tensor_type.elem_type = served
    ensure_default_opset(model)
    return model


def normalize_outputs(model: onnx.ModelProto, probe: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Declare every output as [batch, ...] and give per-row scalars a trailing axis of 1.

    Converters declare output shapes loosely (onnxmltools says ``label`` is [1] when it is [N];
    others leave the rank out, and skl2onnx's QuadraticDiscriminantAnalysis returns its labels
    as one row, [1, N]), and Triton's config is derived from the declared shapes. So the graph
    is run once on ``probe`` rows and the outputs are re-declared from what it really returns.
    A rank-1 output (a classifier's ``label``), or a [1, N] one when N > 1 rows were sent, becomes
    [N, 1]: Triton describes a batched tensor by its per-row dims, and a plain ``dims: [1]``
    loads on every backend, where ``reshape`` support varies.

    Raises GraphError when onnxruntime cannot load or run the graph, or an output is no tensor.
    """
    import onnxruntime as ort

    # A session of its own: this graph is not the final one (its outputs are re-declared here),
    # so the export's one session of the final graph (parity.compare.GraphSession) comes after.
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its warnings are about the loose declarations re-declared here
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own types: Fail, InvalidGraph, NotImplemented, ...
        raise GraphError("load", exc) from exc
    try:
        results = session.run(None, probe)
    except Exception as exc:
        raise GraphError("run", exc) from exc
    actual = dict(zip([o.name for o in session.get_outputs()], results, strict=True))
    rows = len(next(iter(probe.values()))) if probe else 0
    graph = model.graph
    for out in graph.output:
        value = actual[out.name]
        if not isinstance(value, np.ndarray):  # a sequence or map (ZipMap), which Triton cannot carry
            what = f"output {out.name!r} is a {type(value).__name__}, not a tensor"
            raise GraphError("serve", ValueError(what))
        shape = value.shape
        if len(shape) == 1 or (rows > 1 and shape == (1, rows)):
            inner = f"{out.name}__per_row"
            _rename_tensor(graph, out.name, inner)
            # Reshape (opset >= 5), not Unsqueeze (whose axes input needs opset 13): tree
            # converters emit graphs at old or no default-domain opsets.
            target = helper.make_tensor(f"{out.name}__shape", onnx.TensorProto.INT64, [2], [-1, 1])
            graph.initializer.append(target)
            graph.node.append(helper.make_node("Reshape", [inner, target.name], [out.name]))
            ensure_default_opset(model)
            shape = (rows, 1)
        declared = out.type.tensor_type.shape
        declared.ClearField("dim")
        declared.dim.add().dim_param = "batch"
        for d in shape[1:]:
            declared.dim.add().dim_value = d
    return model


class GraphError(ConversionError):
    """onnxruntime cannot load (``load``) or run (``run``) a converted graph, or the graph
    answers with something that is no tensor (``serve``); the export step names the model."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        verb = {"load": "cannot load", "run": "cannot run"}.get(stage, "cannot serve")
        super().__init__(f"ONNX Runtime {verb} the converted graph: {first_line(cause)}", hint=GRAPH_HINT)
        self.stage = stage
        self.cause = cause


GRAPH_HINT = (
    "the converter made a graph ONNX Runtime (Triton's onnxruntime backend) cannot use for this "
    "estimator; nothing was written: use an estimator the converter supports fully, or report it "
    "to the converter's project"
)


def select_column(model: onnx.ModelProto, name: str, column: int) -> onnx.ModelProto:
    """Keep one column (``-1``: the last) of the 2-D output ``name``, as [N, 1]."""
    graph = model.graph
    inner = f"{name}__all_columns"
    _rename_tensor(graph, name, inner)
    end = column + 1 if column != -1 else np.iinfo(np.int64).max
    consts = {
        f"{name}__starts": [column],
        f"{name}__ends": [end],
        f"{name}__axes": [1],
    }
    for key, value in consts.items():
        graph.initializer.append(helper.make_tensor(key, onnx.TensorProto.INT64, [1], value))
    graph.node.append(helper.make_node("Slice", [inner, *consts], [name]))
    ensure_default_opset(model)
    return model


def _rename_tensor(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename a node-produced tensor where it is made and wherever it is read (another node may
    read the output being re-shaped: skl2onnx computes a label from its scores), before a node
    that makes ``old`` from ``new`` is added."""
    for node in graph.node:
        node.output[:] = [new if o == old else o for o in node.output]
        node.input[:] = [new if i == old else i for i in node.input]


def ensure_default_opset(model: onnx.ModelProto) -> None:
    """Declare the default-domain opset (and its IR version) in a graph that imports none."""
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("", FALLBACK_OPSET))
        model.ir_version = max(model.ir_version, IR_FOR_FALLBACK_OPSET)
