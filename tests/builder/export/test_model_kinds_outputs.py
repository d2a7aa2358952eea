"""The output-declaration rules behind the new model kinds, without a registry: what each kind
records in the serving contract, how converted outputs are re-declared (a [1, N] label, a
column kept from a two-column decision), which prediction the drift reference bins, the
``columns`` layout of an all-numeric signature, and a graph ONNX Runtime cannot load refused
as a ConversionError."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pandas as pd
import pytest
from mlflow.models.signature import infer_signature
from onnx import TensorProto, helper

from builder.convert.base import GraphError, normalize_outputs, select_column
from builder.convert.sklearn import SklearnConverter
from builder.errors import ConversionError
from builder.export.drift_reference import no_prediction_reason, prediction_stats
from builder.kinds import ModelKind, with_targets
from builder.parity.compare import GraphSession
from builder.registry.signature import inputs_from_signature


def _model(nodes: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto], inits=()) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 2])
    graph = helper.make_graph(nodes, "g", [x], outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _declared(model: onnx.ModelProto, name: str) -> list[int | str]:
    (out,) = [o for o in model.graph.output if o.name == name]
    return [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]


def test_each_kind_records_its_outputs_and_facts() -> None:
    outlier = ModelKind.outlier().contract().facts()
    assert outlier == {
        "layout": "matrix",  # the export sets the inputs' own
        "kind": "outlier",
        "outputs": {"label": "label", "score": "score"},
        "score": {"source": "decision_function", "outlier_below": 0.0},
    }
    label_only = ModelKind.classifier([0, 1], probabilities=False).contract()
    assert label_only.outputs == {"label": "label", "scores": "scores"} and label_only.kind == "binary"
    assert ModelKind.classifier(["a", "b", "c"]).outputs == {
        "label": "label",
        "probabilities": "probabilities",
    }
    assert ModelKind.regressor(targets=3).contract().targets == 3
    assert ModelKind.regressor().contract().targets is None  # one target: no serving.targets
    assert ModelKind.cluster(4).contract().clusters == 4
    assert ModelKind.cluster(None).contract().clusters is None  # not known: no serving.clusters


def test_the_facts_become_config_parameters_as_json() -> None:
    contract = dataclasses.replace(ModelKind.outlier().contract(), targets=2)
    params = contract.to_parameters()
    assert params["serving.kind"] == "outlier"
    assert json.loads(params["serving.score"]) == {"source": "decision_function", "outlier_below": 0.0}
    assert params["serving.targets"] == "2"


def test_a_label_given_as_one_row_is_declared_one_per_row() -> None:
    # QuadraticDiscriminantAnalysis' converter: labels [1, N]
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    node = helper.make_node("ReduceSum", ["input", "one"], ["label_raw"], keepdims=0)
    flip = helper.make_node("Unsqueeze", ["label_raw", "zero"], ["label_row"])
    out = helper.make_tensor_value_info("label_row", TensorProto.FLOAT, None)
    model = normalize_outputs(
        _model([node, flip], [out], [one, zero]), {"input": np.ones((3, 2), np.float32)}
    )
    assert _declared(model, "label_row") == ["batch", 1]
    got = GraphSession(model).run({"input": np.arange(10, dtype=np.float32).reshape(5, 2)})
    np.testing.assert_array_equal(got["label_row"], [[1], [5], [9], [13], [17]])


def test_a_reshaped_output_still_feeds_the_nodes_that_read_it() -> None:
    # skl2onnx computes a label from the scores it outputs: re-declaring the scores must not
    # hand those nodes the reshaped tensor.
    scores = helper.make_node("Identity", ["input"], ["scores"])
    label = helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0)
    outs = [
        helper.make_tensor_value_info("label", TensorProto.INT64, None),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, None),
    ]
    model = select_column(_model([scores, label], outs), "scores", -1)
    model = normalize_outputs(model, {"input": np.ones((3, 2), np.float32)})
    got = GraphSession(model).run({"input": np.array([[0.0, 1.0], [2.0, -1.0]], np.float32)})
    np.testing.assert_array_equal(got["label"], [[1], [0]])
    np.testing.assert_array_equal(got["scores"], [[1.0], [-1.0]])
    assert _declared(model, "scores") == ["batch", 1]


def test_a_graph_onnx_runtime_cannot_load_is_a_conversion_error() -> None:
    node = helper.make_node("Solve", ["input", "input"], ["prediction"], domain="com.microsoft")
    out = helper.make_tensor_value_info("prediction", TensorProto.FLOAT, None)
    model = _model([node], [out])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(ConversionError) as refused:
        normalize_outputs(model, {"input": np.ones((3, 2), np.float32)})
    assert isinstance(refused.value, GraphError) and refused.value.stage == "load"
    assert (
        refused.value.message.startswith("ONNX Runtime cannot load the converted graph")
        and refused.value.hint
    )


def test_the_prediction_each_kind_bins_for_drift() -> None:
    outlier = prediction_stats(
        ModelKind.outlier(), {"label": np.ones((4, 1)), "score": np.array([[-1.0], [0.5], [1], [2]])}
    )
    assert outlier is not None and outlier["name"] == "score" and outlier["kind"] == "numeric"
    label_only = prediction_stats(
        ModelKind.classifier([0, 1], probabilities=False),
        {"label": np.array([[0], [1], [1]]), "scores": np.zeros((3, 1))},
    )
    assert label_only is not None and label_only["name"] == "label" and label_only["categories"] == [0, 1]
    assert label_only["counts"] == [1, 2, 0]
    two = ModelKind.regressor(targets=2)
    assert prediction_stats(two, {"prediction": np.zeros((3, 2))}) is None
    assert (
        no_prediction_reason(two)
        == "a multi-target regressor: prediction drift is per target and not recorded"
    )
    assert no_prediction_reason(ModelKind.regressor()) is None


def test_the_number_of_targets_is_read_from_the_graph() -> None:
    node = helper.make_node("Identity", ["input"], ["prediction"])
    out = helper.make_tensor_value_info("prediction", TensorProto.FLOAT, None)
    model = normalize_outputs(_model([node], [out]), {"input": np.ones((3, 2), np.float32)})
    assert with_targets(ModelKind.regressor(), model).targets == 2
    assert with_targets(ModelKind.outlier(), model) == ModelKind.outlier()


def test_an_all_numeric_signature_can_be_served_one_input_per_column() -> None:
    frame = pd.DataFrame({"amount": [1.5, 2.0], "count": np.array([1, 2], dtype=np.int64)})
    signature = infer_signature(frame)
    assert inputs_from_signature(signature, model_ref="m").layout == "matrix"
    columns = inputs_from_signature(signature, model_ref="m", layout="columns")
    assert columns.layout == "columns"
    assert [(t.name, t.dtype, t.shape) for t in columns.tensors] == [
        ("amount", "float32", (-1, 1)),
        ("count", "int64", (-1, 1)),
    ]


def test_a_model_picking_columns_by_name_asks_for_the_columns_layout() -> None:
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    frame = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1, 0, 1, 0]})
    by_name = make_pipeline(
        ColumnTransformer([("s", StandardScaler(), ["a"])], remainder="passthrough"), LogisticRegression()
    )
    by_name.fit(frame, [0, 0, 1, 1])
    by_position = make_pipeline(StandardScaler(), LogisticRegression()).fit(frame, [0, 0, 1, 1])
    converter = SklearnConverter()
    assert converter.reads_columns_by_name(by_name)
    assert not converter.reads_columns_by_name(by_position)
