"""The ensemble's generated steps as ONNX graphs, and the fused pre -> model -> post graph.

The steps are built from the run's spec (the format of ``builder/ensemble_models/transforms.py``,
which stays the numpy reference) so that they run on the onnxruntime backend, natively in C++
on the NGC server: no Python-backend IPC round trip per step. The parameters are initializers
of the graph in the version folder, so a step version cannot run another export's parameters.

Preprocess computes in float64 and casts to float32 at the end, as ``transforms.preprocess``
does: the graph then matches the reference bit for bit, not within a tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, compose, helper, numpy_helper

from builder.errors import UsageError

# What Triton 24.10's onnxruntime runs; a fused graph takes the model's own opset instead.
STEP_OPSET = 17
# Every operator the steps use (IsNaN, Where, Sub, Div, Cast, Slice, GreaterOrEqual, ArgMax,
# Gather) exists in this form from opset 13 on.
MIN_OPSET = 13
BATCH = "N"


def default_opset(model: onnx.ModelProto) -> int | None:
    """The model's default-domain (ai.onnx) opset, or None when it imports none."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return max(versions) if versions else None


def _finish(graph: onnx.GraphProto, opset: int, ir_version: int | None) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="builder-ensemble"
    )
    if ir_version is not None:
        model.ir_version = ir_version  # merge_models refuses graphs of different IR versions
    onnx.checker.check_model(model, full_check=True)
    return model


def preprocess_graph(
    spec: dict[str, Any],
    width: int,
    input_name: str,
    output_name: str = "features",
    opset: int = STEP_OPSET,
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """``Where(IsNaN(x), impute, x)``, then ``(x - mean) / scale``; float32 [N, width] in and out."""
    nodes = [helper.make_node("Cast", [input_name], ["pre/x64"], to=TensorProto.DOUBLE)]
    inits: list[TensorProto] = []
    current = "pre/x64"

    def constant(key: str) -> str:
        inits.append(numpy_helper.from_array(np.asarray(spec[key], dtype=np.float64), f"pre/{key}"))
        return f"pre/{key}"

    if spec.get("impute") is not None:
        impute = constant("impute")
        nodes += [
            helper.make_node("IsNaN", [current], ["pre/missing"]),
            helper.make_node("Where", ["pre/missing", impute, current], ["pre/imputed"]),
        ]
        current = "pre/imputed"
    for key, op in (("mean", "Sub"), ("scale", "Div")):
        if spec.get(key) is not None:
            nodes.append(helper.make_node(op, [current, constant(key)], [f"pre/{op.lower()}"]))
            current = f"pre/{op.lower()}"
    nodes.append(helper.make_node("Cast", [current], [output_name], to=TensorProto.FLOAT))
    graph = helper.make_graph(
        nodes,
        "preprocess",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [BATCH, width])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [BATCH, width])],
        initializer=inits,
    )
    return _finish(graph, opset, ir_version)


def postprocess_graph(
    spec: dict[str, Any],
    classes: int,
    input_name: str = "probabilities",
    passthrough: str | None = None,
    opset: int = STEP_OPSET,
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """``score = probabilities[:, i:i+1]`` (float32 [N, 1]), ``label = score >= threshold``
    (int64 [N, 1]), as ``transforms.postprocess``; ``passthrough`` also outputs the
    probabilities under that name (the fused graph's ``probabilities``)."""
    index = positive_index(spec, classes)
    width: int | str = classes if classes > 0 else "C"
    # float32, as numpy compares a float32 array with a Python float: a score equal to the
    # threshold's float32 value is a positive in both.
    threshold = np.float32(spec.get("threshold", 0.5))
    inits = [
        numpy_helper.from_array(np.array([index], dtype=np.int64), "post/start"),
        numpy_helper.from_array(np.array([index + 1], dtype=np.int64), "post/end"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "post/axis"),
        numpy_helper.from_array(np.array(threshold, dtype=np.float32), "post/threshold"),
    ]
    nodes = [
        helper.make_node("Slice", [input_name, "post/start", "post/end", "post/axis"], ["score"]),
        helper.make_node("GreaterOrEqual", ["score", "post/threshold"], ["post/positive"]),
        helper.make_node("Cast", ["post/positive"], ["label"], to=TensorProto.INT64),
    ]
    outputs = [
        helper.make_tensor_value_info("score", TensorProto.FLOAT, [BATCH, 1]),
        helper.make_tensor_value_info("label", TensorProto.INT64, [BATCH, 1]),
    ]
    if passthrough is not None:
        nodes.append(helper.make_node("Identity", [input_name], [passthrough]))
        outputs.insert(0, helper.make_tensor_value_info(passthrough, TensorProto.FLOAT, [BATCH, width]))
    graph = helper.make_graph(
        nodes,
        "postprocess",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [BATCH, width])],
        outputs,
        initializer=inits,
    )
    return _finish(graph, opset, ir_version)


def positive_index(spec: dict[str, Any], classes: int) -> int:
    index = spec.get("positive_index", 1)
    valid = isinstance(index, int) and not isinstance(index, bool) and index >= 0
    if not valid or 0 < classes <= index:  # classes <= 0: a width the graph leaves open
        raise UsageError(
            f"ensemble spec: postprocess.positive_index {index!r} is not a class index of a model "
            f"with {classes} probabilities"
        )
    return index


def fused_graph(
    model: onnx.ModelProto,
    preprocess: dict[str, Any],
    postprocess: dict[str, Any] | None,
    width: int,
    classes: int,
) -> onnx.ModelProto:
    """One graph: preprocess -> ``model`` -> postprocess, with the ensemble's inputs and outputs
    (``input`` -> ``probabilities``, ``score``, ``label``; without ``postprocess``, the model's
    outputs). One ONNX Runtime session: no step boundaries, no queue between them."""
    if len(model.graph.input) != 1:
        raise UsageError("--ensemble-mode fused needs a model with one input")
    raw = model.graph.input[0].name
    opset = default_opset(model) or STEP_OPSET
    if opset < MIN_OPSET:
        raise UsageError(
            f"--ensemble-mode fused needs a model of opset >= {MIN_OPSET}; this one has {opset}",
            hint="export with a higher --opset, or use --ensemble-mode steps",
        )
    pre = preprocess_graph(preprocess, width, raw, "pre/features", opset, model.ir_version)
    if postprocess is None:  # a regressor: the model's outputs, under their own names
        outputs = [o.name for o in model.graph.output if o.name != "label"]
        fused = compose.merge_models(pre, model, io_map=[("pre/features", raw)], outputs=outputs)
    else:
        # The model's names under a prefix: its own `label` (argmax) would clash with the
        # thresholded one, and its input name is the ensemble's.
        inner = compose.add_prefix(model, "model/")
        post = postprocess_graph(
            postprocess, classes, "post/probabilities", "probabilities", opset, model.ir_version
        )
        fused = compose.merge_models(pre, inner, io_map=[("pre/features", f"model/{raw}")])
        fused = compose.merge_models(
            fused,
            post,
            io_map=[("model/probabilities", "post/probabilities")],
            outputs=["probabilities", "score", "label"],
        )
    onnx.checker.check_model(fused, full_check=True)
    return fused


# Label dtypes a class-value lookup writes (what the converters give a classifier's `label`).
LABEL_DTYPES = ("int64", "string")


def class_values(classes: Sequence[Any], dtype: str) -> np.ndarray:
    """The classes as the lookup's constant: int64, or strings (ONNX STRING)."""
    if dtype not in LABEL_DTYPES:
        raise UsageError(
            f"--ensemble: the model's label is {dtype}; the generated label lookup writes "
            f"{' or '.join(LABEL_DTYPES)} labels",
            hint="export it without --ensemble (the model's own label is served)",
        )
    if dtype == "string":
        return np.array([str(c) for c in classes], dtype=object)
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in classes):
        raise UsageError(f"--ensemble: the model's label is int64 but its classes are {list(classes)}")
    return np.array(classes, dtype=np.int64)


def label_graph(
    postprocess: dict[str, Any],
    classes: Sequence[Any],
    label_dtype: str,
    input_name: str = "probabilities",
    passthrough: str | None = None,
    opset: int = STEP_OPSET,
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """The postprocess of a model whose graph carries its own preprocessing (typed columns):
    its outputs are class values, as the model's own ``label``.

    Binary (2 classes): ``score = probabilities[:, i:i+1]`` and ``label = classes[i]`` where
    ``score >= threshold``, else the other class (``i`` = ``positive_index``, 1 by default).
    Multiclass: ``label = classes[argmax(probabilities)]`` (the first of equal maxima, as
    numpy's argmax). ``passthrough`` also outputs the probabilities under that name."""
    n = len(classes)
    values = class_values(classes, label_dtype)
    elem = TensorProto.STRING if label_dtype == "string" else TensorProto.INT64
    nodes: list[onnx.NodeProto] = []
    outputs = [helper.make_tensor_value_info("label", elem, [BATCH, 1])]
    if n == 2:
        index = positive_index(postprocess, n)
        threshold = np.float32(postprocess.get("threshold", 0.5))  # float32: see postprocess_graph
        lookup = values[[1 - index, index]]  # [negative, positive]: indexed by score >= threshold
        inits = [
            numpy_helper.from_array(np.array([index], dtype=np.int64), "post/start"),
            numpy_helper.from_array(np.array([index + 1], dtype=np.int64), "post/end"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "post/axis"),
            numpy_helper.from_array(np.array(threshold, dtype=np.float32), "post/threshold"),
            numpy_helper.from_array(lookup, "post/classes"),
        ]
        nodes += [
            helper.make_node("Slice", [input_name, "post/start", "post/end", "post/axis"], ["score"]),
            helper.make_node("GreaterOrEqual", ["score", "post/threshold"], ["post/positive"]),
            helper.make_node("Cast", ["post/positive"], ["post/index"], to=TensorProto.INT64),
        ]
        outputs.insert(0, helper.make_tensor_value_info("score", TensorProto.FLOAT, [BATCH, 1]))
    else:
        inits = [numpy_helper.from_array(values, "post/classes")]
        nodes.append(helper.make_node("ArgMax", [input_name], ["post/index"], axis=1, keepdims=1))
    # Gather of a [C] lookup by [N, 1] indices: [N, 1], the model's label shape.
    nodes.append(helper.make_node("Gather", ["post/classes", "post/index"], ["label"], axis=0))
    if passthrough is not None:
        nodes.append(helper.make_node("Identity", [input_name], [passthrough]))
        outputs.insert(0, helper.make_tensor_value_info(passthrough, TensorProto.FLOAT, [BATCH, n]))
    graph = helper.make_graph(
        nodes,
        "postprocess",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [BATCH, n])],
        outputs,
        initializer=inits,
    )
    return _finish(graph, opset, ir_version)


def typed_fused_graph(
    model: onnx.ModelProto,
    postprocess: dict[str, Any] | None,
    classes: Sequence[Any] | None,
    label_dtype: str,
) -> onnx.ModelProto:
    """A typed model and its generated postprocess as one graph, with the model's own typed
    inputs (its preprocessing is already inside it). Without ``postprocess`` (a regressor, or a
    model of kind other), the model itself."""
    if postprocess is None or classes is None:
        fused = onnx.ModelProto()
        fused.CopyFrom(model)
        return fused
    opset = default_opset(model) or STEP_OPSET
    if opset < MIN_OPSET:
        raise UsageError(
            f"--ensemble-mode fused needs a model of opset >= {MIN_OPSET}; this one has {opset}",
            hint="export with a higher --opset, or use --ensemble-mode steps",
        )
    # The model's names under a prefix (its own `label` would clash with the generated one),
    # its inputs kept: they are the ensemble's, one per column.
    inner = compose.add_prefix(model, "model/", rename_inputs=False)
    post = label_graph(
        postprocess, classes, label_dtype, "post/probabilities", "probabilities", opset, model.ir_version
    )
    names = [o.name for o in post.graph.output]
    fused = compose.merge_models(
        inner, post, io_map=[("model/probabilities", "post/probabilities")], outputs=names
    )
    onnx.checker.check_model(fused, full_check=True)
    return fused
