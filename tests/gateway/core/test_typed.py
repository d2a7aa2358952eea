"""The gateway's typed path without servers: model specs from Triton configs, request parsing
and validation, input assembly by layout, and responses by model kind (JSON and gRPC)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import numpy as np
import pytest

from gateway.assemble import assemble_input
from gateway.catalog import ModelSpec, spec_from_config
from gateway.clients.features import FeatureRows
from gateway.clients.triton_grpc import infer_inputs, infer_request
from gateway.core import Predictor
from gateway.errors import EntityNotFound, GatewayError, InvalidInput, SpecError
from gateway.grpc import v1 as grpc_v1
from gateway.http import bodies
from gateway.http import v1 as http_v1
from gateway.proto import gateway_pb2
from gateway.request import PredictRequest, validate
from gateway.responses import PredictResult, predictions
from gateway.settings import GatewaySettings, nest

COLUMNS = [
    {"name": "amount", "dtype": "float32"},
    {"name": "channel", "dtype": "string"},
    {"name": "merchant_category", "dtype": "string"},
    {"name": "visits", "dtype": "int64"},
    {"name": "vip", "dtype": "bool"},
]
TRITON = {"float32": "TYPE_FP32", "string": "TYPE_STRING", "int64": "TYPE_INT64", "bool": "TYPE_BOOL"}
KEYS = {"customer_id": "string"}


def config(params: dict[str, Any], inputs: list[dict] | None = None, outputs: tuple[str, ...] = ()) -> dict:
    """A Triton model config as tritonclient's ``as_json`` gives it."""
    base = {
        "feast.feature_service": "svc",
        "feast.entity_keys": "customer_id",
        "feast.request_fields": '["amount", "channel"]',
    }
    base.update({k: v if isinstance(v, str) or v is None else json.dumps(v) for k, v in params.items()})
    return {
        "name": "m",
        "input": inputs if inputs is not None else [],
        "output": [{"name": o} for o in outputs],
        "parameters": {k: {"string_value": v} for k, v in base.items() if v is not None},
    }


def columns_config(**params: Any) -> dict:
    inputs = [{"name": c["name"], "data_type": TRITON[c["dtype"]], "dims": ["1"]} for c in COLUMNS]
    defaults: dict[str, Any] = {
        "serving.layout": "columns",
        "serving.columns": COLUMNS,
        "serving.kind": "binary",
        "serving.classes": [0, 1],
        "serving.outputs": {"label": "label", "probabilities": "probabilities"},
    }
    defaults.update(params)
    return config(defaults, inputs, outputs=("label", "probabilities"))


def spec_of(cfg: dict, keys: dict[str, str] = KEYS) -> ModelSpec:
    return spec_from_config("m", "m", "3", cfg, keys)


# -- ModelSpec from configs ------------------------------------------------------------------


def test_an_old_config_without_layout_or_kind_is_a_float32_matrix_read_as_today():
    cfg = config(
        {
            "serving.feature_names": '["a", "b", "c"]',
            "feast.request_fields": "a",
            "feast.entity_keys": "u, m",
        },
        inputs=[{"name": "input", "data_type": "TYPE_FP32", "dims": ["3"]}],
        outputs=("probabilities", "score", "label"),
    )
    spec = spec_of(cfg, {"u": "int64", "m": "int64"})
    assert spec.layout == "matrix" and spec.input_name == "input" and spec.legacy
    assert [(c.name, c.dtype) for c in spec.columns] == [("a", "float32"), ("b", "float32"), ("c", "float32")]
    assert spec.entity_key_names == ("u", "m") and spec.online_features == ("b", "c")
    assert set(spec.outputs) == {"probabilities", "score", "label"}  # every output, as before


def test_a_columns_config_gives_typed_columns_keys_kind_classes_and_roles():
    spec = spec_of(columns_config(**{"serving.decision_threshold": "0.3"}))
    assert spec.layout == "columns" and not spec.legacy
    assert spec.dtypes == {
        "amount": "float32",
        "channel": "string",
        "merchant_category": "string",
        "visits": "int64",
        "vip": "bool",
    }
    assert [(k.name, k.dtype) for k in spec.entity_keys] == [("customer_id", "string")]
    assert spec.kind == "binary" and spec.classes == (0, 1) and spec.decision_threshold == 0.3
    assert spec.roles.label == "label" and spec.roles.probabilities == "probabilities"
    assert spec.online_features == ("merchant_category", "visits", "vip")


def test_a_regressor_asks_triton_for_its_value_output_only():
    cfg = columns_config(**{"serving.kind": "regression", "serving.outputs": {"value": "label"}})
    del cfg["parameters"]["serving.classes"]
    spec = spec_of(cfg)
    assert spec.kind == "regression" and spec.classes is None and spec.outputs == ("label",)


def test_a_triton_ensemble_is_asked_for_every_output():
    # Triton's ensemble scheduler fails a request for a subset ("unexpected deadlock"): the
    # binary model with a threshold, which needs only its probabilities, asks for all of them.
    cfg = columns_config(**{"serving.decision_threshold": "0.3"})
    assert spec_of(cfg).outputs == ("probabilities",)
    cfg["platform"] = "ensemble"
    cfg["output"] = [{"name": o} for o in ("probabilities", "score", "label")]
    assert spec_of(cfg).outputs == ("probabilities", "score", "label")


def test_kind_other_passes_every_output_through():
    cfg = columns_config(**{"serving.kind": "other", "serving.outputs": {}})
    assert spec_of(cfg).outputs == ("label", "probabilities")


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"serving.layout": "tensors"}, "call Triton directly"),
        ({"serving.layout": "grid"}, "unknown serving.layout"),
        ({"serving.columns": "[{"}, "serving.columns is not valid JSON"),
        ({"serving.columns": [{"name": "amount", "dtype": "float64"}]}, "dtype one of"),
        ({"serving.kind": "ranking"}, "unknown serving.kind"),
        ({"serving.classes": None}, "needs serving.classes"),
        ({"serving.classes": [0, 1, 2]}, "binary model has 2 classes"),
        ({"serving.classes": [[0], [1]]}, "numbers or strings"),
        # issue 19: a label alone is a classifier without probabilities; no label either is refused
        ({"serving.outputs": {}}, "needs a probabilities or a label output"),
        ({"serving.outputs": {"probabilities": "probs"}}, "not one of"),
        ({"serving.decision_threshold": "1.5"}, "not a number in [0, 1]"),
        ({"serving.decision_threshold": "nan"}, "not a number in [0, 1]"),
        ({"feast.request_fields": "colour"}, "not model inputs"),
        ({"feast.feature_service": None}, "export it from an MLflow run"),
    ],
)
def test_malformed_parameters_are_a_spec_error_saying_what(change: dict[str, Any], fragment: str):
    with pytest.raises(SpecError) as err:
        spec_of(columns_config(**change))
    assert fragment in err.value.message
    assert err.value.http_status == 404  # the gateway cannot serve it: as if it were not there


def test_a_column_whose_triton_input_has_another_type_is_refused():
    cfg = columns_config()
    cfg["input"][1]["data_type"] = "TYPE_FP32"  # channel
    with pytest.raises(SpecError, match=r"'channel' is TYPE_FP32, but serving\.columns says string"):
        spec_of(cfg)


def test_a_matrix_column_that_is_not_float32_is_refused():
    cfg = config(
        {"serving.layout": "matrix", "serving.columns": [{"name": "amount", "dtype": "int64"}]},
        inputs=[{"name": "input", "data_type": "TYPE_FP32"}],
    )
    with pytest.raises(SpecError, match="matrix layout"):
        spec_of(cfg)


@pytest.mark.parametrize(
    "keys, fragment",
    [({}, "not a join key of feature service 'svc'"), ({"customer_id": "bytes"}, "INT64 or STRING")],
)
def test_entity_keys_must_be_int64_or_string_join_keys_of_the_service(keys: dict[str, str], fragment: str):
    with pytest.raises(SpecError, match=fragment):
        spec_of(columns_config(), keys)


# -- request parsing and validation ------------------------------------------------------------


def http_request(body: Any) -> PredictRequest:
    return http_v1.parse_request("m", json.dumps(body).encode())


def invalid(spec: ModelSpec, request: PredictRequest) -> InvalidInput:
    with pytest.raises(InvalidInput) as err:
        validate(spec, request)
    return err.value


GOOD = {"customer_id": "C-1042", "amount": 12.5, "channel": "web"}


def test_a_valid_row_keeps_its_types():
    keys, values = validate(spec_of(columns_config()), http_request({"rows": [GOOD, {**GOOD, "amount": 3}]}))
    assert keys == [{"customer_id": "C-1042"}] * 2
    assert values[0] == {"amount": 12.5, "channel": "web"}
    assert values[1]["amount"] == 3.0 and isinstance(values[1]["amount"], float)


@pytest.mark.parametrize(
    "row, field, fragment",
    [
        ({**GOOD, "customer_id": 1042}, "rows[1].customer_id", "must be a string"),
        ({**GOOD, "channel": 7}, "rows[1].channel", "must be a string"),
        ({**GOOD, "amount": "12.5"}, "rows[1].amount", "finite number"),
        ({**GOOD, "amount": True}, "rows[1].amount", "finite number"),
        ({**GOOD, "amount": 1e39}, "rows[1].amount", "float32 range"),
        ({**GOOD, "amount": 10**400}, "rows[1].amount", "float32 range"),
        ({**GOOD, "amount": None}, "rows[1].amount", "missing request field"),
        ({"amount": 1.0, "channel": "web"}, "rows[1].customer_id", "missing entity key"),
        ({**GOOD, "colour": "red"}, "rows[1].colour", "unknown field"),
    ],
)
def test_each_wrong_value_is_a_422_naming_its_field(row: dict[str, Any], field: str, fragment: str):
    error = invalid(spec_of(columns_config()), http_request({"rows": [GOOD, row]}))
    assert error.field == field and fragment in error.message and error.http_status == 422


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_for_numbers(literal: str):
    body = b'{"customer_id": "C-1", "channel": "web", "amount": ' + literal.encode() + b"}"
    error = invalid(spec_of(columns_config()), http_v1.parse_request("m", body))
    assert error.field == "rows[0].amount" and "finite number" in error.message


def int64_spec() -> ModelSpec:
    """A model whose request fields are an int64 and a bool column, keyed by an integer."""
    cfg = columns_config(**{"feast.request_fields": '["visits", "vip"]', "feast.entity_keys": "user_id"})
    return spec_of(cfg, {"user_id": "int64"})


@pytest.mark.parametrize(
    "row, field, fragment",
    [
        ({"user_id": 2**63, "visits": 1, "vip": True}, "rows[0].user_id", "int64 range"),
        ({"user_id": 1, "visits": 2**63, "vip": True}, "rows[0].visits", "int64 range"),
        ({"user_id": 1, "visits": -(2**63) - 1, "vip": True}, "rows[0].visits", "int64 range"),
        ({"user_id": True, "visits": 1, "vip": True}, "rows[0].user_id", "must be an integer"),
        ({"user_id": "1", "visits": 1, "vip": True}, "rows[0].user_id", "must be an integer"),
        ({"user_id": 1, "visits": 1.0, "vip": True}, "rows[0].visits", "must be an integer"),
        ({"user_id": 1, "visits": False, "vip": True}, "rows[0].visits", "must be an integer"),
        ({"user_id": 1, "visits": 1, "vip": 1}, "rows[0].vip", "true or false"),
        ({"user_id": 1, "visits": 1, "vip": "true"}, "rows[0].vip", "true or false"),
    ],
)
def test_integers_and_booleans_are_strict(row: dict[str, Any], field: str, fragment: str):
    error = invalid(int64_spec(), http_request(row))
    assert error.field == field and fragment in error.message


def test_the_int64_limits_themselves_are_accepted():
    keys, values = validate(
        int64_spec(), http_request({"user_id": 2**63 - 1, "visits": -(2**63), "vip": False})
    )
    assert keys == [{"user_id": 2**63 - 1}] and values == [{"visits": -(2**63), "vip": False}]


@pytest.mark.parametrize(
    "body, field, fragment",
    [
        ({"rows": [GOOD, [1, 2]]}, "rows[1]", "must be an object"),
        ({"rows": [{**GOOD, "channel": ["web"]}]}, "rows[0].channel", "not an array"),
        ({"rows": [{**GOOD, "channel": {"v": "web"}}]}, "rows[0].channel", "not an object"),
    ],
)
def test_http_refuses_json_that_is_not_rows_of_scalars(body: Any, field: str, fragment: str):
    with pytest.raises(InvalidInput) as err:
        http_request(body)
    assert err.value.field == field and fragment in err.value.message


def grpc_request(**fields: gateway_pb2.Value) -> PredictRequest:
    return grpc_v1.parse_request(gateway_pb2.PredictRequest(model="m", rows=[gateway_pb2.Row(fields=fields)]))


def test_grpc_values_keep_their_kind():
    request = grpc_request(
        user_id=gateway_pb2.Value(int_value=5),
        visits=gateway_pb2.Value(int_value=2),
        vip=gateway_pb2.Value(bool_value=True),
    )
    assert validate(int64_spec(), request) == ([{"user_id": 5}], [{"visits": 2, "vip": True}])
    as_bool = grpc_request(
        user_id=gateway_pb2.Value(bool_value=True),
        visits=gateway_pb2.Value(int_value=2),
        vip=gateway_pb2.Value(bool_value=True),
    )
    assert invalid(int64_spec(), as_bool).field == "rows[0].user_id"
    as_double = grpc_request(
        user_id=gateway_pb2.Value(int_value=5),
        visits=gateway_pb2.Value(double_value=2.0),
        vip=gateway_pb2.Value(bool_value=True),
    )
    assert invalid(int64_spec(), as_double).field == "rows[0].visits"


def test_a_grpc_string_key_and_category_validate_and_an_empty_value_is_refused():
    spec = spec_of(columns_config())
    ok = grpc_request(
        customer_id=gateway_pb2.Value(string_value="C-7"),
        amount=gateway_pb2.Value(int_value=3),
        channel=gateway_pb2.Value(string_value="app"),
    )
    assert validate(spec, ok) == ([{"customer_id": "C-7"}], [{"amount": 3.0, "channel": "app"}])
    with pytest.raises(InvalidInput) as err:
        grpc_request(customer_id=gateway_pb2.Value())
    assert err.value.field == "rows[0].customer_id"


# -- assembly by layout ------------------------------------------------------------------------


def test_the_columns_layout_sends_one_typed_n_by_1_input_per_column_with_stand_ins_for_missing():
    spec = spec_of(columns_config())
    online = {
        "merchant_category": ["grocery", None],
        "visits": [3, 4],
        "vip": [True, False],
    }
    inputs = assemble_input(
        spec, [{"amount": 1.5, "channel": "web"}, {"amount": 2.0, "channel": ""}], online, 2
    )
    assert list(inputs) == ["amount", "channel", "merchant_category", "visits", "vip"]
    assert {k: (v.dtype.name, v.shape) for k, v in inputs.items()} == {
        "amount": ("float32", (2, 1)),
        "channel": ("object", (2, 1)),
        "merchant_category": ("object", (2, 1)),
        "visits": ("int64", (2, 1)),
        "vip": ("bool", (2, 1)),
    }
    assert inputs["merchant_category"][:, 0].tolist() == ["grocery", ""]  # a missing string is ""
    assert inputs["visits"][:, 0].tolist() == [3, 4] and inputs["vip"][:, 0].tolist() == [True, False]
    sent = {i.name(): (i.datatype(), i.shape()) for i in infer_inputs(inputs)}
    assert sent == {
        "amount": ("FP32", [2, 1]),
        "channel": ("BYTES", [2, 1]),
        "merchant_category": ("BYTES", [2, 1]),
        "visits": ("INT64", [2, 1]),
        "vip": ("BOOL", [2, 1]),
    }
    (category,) = (i for i in infer_inputs(inputs) if i.name() == "merchant_category")
    # Triton's BYTES: each element as a 4-byte little-endian length, then its UTF-8 bytes
    assert category._get_content() == b"\x07\x00\x00\x00grocery\x00\x00\x00\x00"


def test_the_request_sent_to_triton_is_the_one_tritonclient_builds():
    # the gateway writes the protobuf itself; tritonclient's InferInput path is the reference
    from tritonclient.grpc import InferRequestedOutput, service_pb2

    inputs = {
        "amount": np.array([[1.5], [-2.25]], dtype=np.float32),
        "channel": np.array([["web"], ["é"]], dtype=object),
        "visits": np.array([[3], [2**40]], dtype=np.int64),
        "vip": np.array([[True], [False]]),
        "wide": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),  # not C-contiguous
    }
    want = service_pb2.ModelInferRequest(model_name="m")
    for inp in infer_inputs(inputs):
        want.inputs.append(inp._get_tensor())
        want.raw_input_contents.append(inp._get_content())
    for name in ("label", "probabilities"):
        want.outputs.append(InferRequestedOutput(name)._get_tensor())
    got = infer_request("m", inputs, ("label", "probabilities"))
    assert got == want
    assert got.raw_input_contents[4] == np.arange(6, dtype=np.float32).reshape(2, 3).tobytes()
    with pytest.raises(GatewayError, match="float16"):
        infer_request("m", {"x": np.zeros((1, 1), dtype=np.float16)}, ())


@pytest.mark.parametrize("missing_column", ["visits", "vip"])
def test_a_missing_int64_or_bool_online_value_has_no_stand_in(missing_column: str):
    spec = spec_of(columns_config())
    online = {"merchant_category": ["a"], "visits": [1], "vip": [True], missing_column: [None]}
    with pytest.raises(EntityNotFound) as err:
        assemble_input(spec, [{"amount": 1.0, "channel": "web"}], online, 1)
    assert repr(missing_column) in err.value.message and err.value.http_status == 404


def test_the_matrix_layout_is_one_float32_matrix_in_training_order_with_nan_for_missing():
    cfg = config(
        {"serving.feature_names": '["hour", "risk", "count"]', "feast.request_fields": "hour"},
        inputs=[{"name": "input", "data_type": "TYPE_FP32"}],
    )
    spec = spec_of(cfg)
    online = {"count": [7, None], "risk": [0.25, 0.5], "unused": [1, 2]}
    (name, x), *rest = assemble_input(spec, [{"hour": 13.0}, {"hour": 2.0}], online, 2).items()
    assert name == "input" and not rest and x.dtype == np.float32
    assert x[0].tolist() == [13.0, 0.25, 7.0]  # an Int64 feature feeds a float32 column
    assert x[1, :2].tolist() == [2.0, 0.5] and math.isnan(x[1, 2])


def test_an_online_value_of_the_wrong_type_is_a_server_error_naming_the_feature():
    spec = spec_of(columns_config())
    online = {"merchant_category": [3.5], "visits": [1], "vip": [True]}
    with pytest.raises(GatewayError) as err:
        assemble_input(spec, [{"amount": 1.0, "channel": "web"}], online, 1)
    assert type(err.value) is GatewayError and err.value.http_status == 500
    assert "'merchant_category' is float in the online store" in err.value.message


# -- responses by kind -------------------------------------------------------------------------


def result(spec: ModelSpec, out: dict[str, np.ndarray], defaults: list[bool] | None = None) -> PredictResult:
    n = len(next(iter(out.values())))
    preds = predictions(spec, out, defaults or [False] * n)
    return PredictResult("m", "3", spec.kind, spec.classes, preds, 1.0)


PROBS = np.array([[0.8, 0.2], [0.35, 0.65]], dtype=np.float32)


def test_binary_with_a_threshold_decides_the_label_itself():
    spec = spec_of(columns_config(**{"serving.decision_threshold": "0.25"}))
    # the model's own labels (at 0.5) say 0, 1; at 0.25 the first row's 0.2 stays 0, the second is 1
    body = result(spec, {"label": np.array([[1], [0]]), "probabilities": PROBS}).to_dict()
    assert [p["label"] for p in body["predictions"]] == [0, 1]
    assert [p["score"] for p in body["predictions"]] == pytest.approx([0.2, 0.65])
    spec_low = spec_of(columns_config(**{"serving.decision_threshold": "0.1"}))
    low = result(spec_low, {"label": np.array([[0], [0]]), "probabilities": PROBS}).to_dict()
    assert [p["label"] for p in low["predictions"]] == [1, 1]


def test_binary_with_integer_classes_keeps_todays_prediction_shape():
    spec = spec_of(columns_config())
    body = result(spec, {"label": np.array([[0], [1]]), "probabilities": PROBS}, [False, True]).to_dict()
    first = body["predictions"][0]
    assert set(first) == {"score", "label", "probabilities", "defaults_used"}
    assert first["label"] == 0 and type(first["label"]) is int
    assert first["probabilities"] == pytest.approx([0.8, 0.2])
    assert [p["defaults_used"] for p in body["predictions"]] == [False, True]
    reply = grpc_v1.to_response(result(spec, {"label": np.array([[0], [1]]), "probabilities": PROBS}))
    assert [p.label for p in reply.predictions] == [0, 1]  # the field old clients read
    assert [p.class_label.int_value for p in reply.predictions] == [0, 1]
    assert reply.kind == "binary" and [c.int_value for c in reply.classes] == [0, 1]


def test_string_classes_come_back_as_strings_over_json_and_grpc():
    spec = spec_of(columns_config(**{"serving.classes": ["legit", "fraud"]}))
    labels = np.array([[b"legit"], [b"fraud"]], dtype=object)  # a TYPE_STRING label output
    res = result(spec, {"label": labels, "probabilities": PROBS})
    body = json.loads(bodies.to_json(res.to_dict()))
    assert [p["label"] for p in body["predictions"]] == ["legit", "fraud"]
    assert body["classes"] == ["legit", "fraud"]
    reply = grpc_v1.to_response(res)
    assert [p.class_label.string_value for p in reply.predictions] == ["legit", "fraud"]
    assert [p.label for p in reply.predictions] == [0, 0]  # no integer label to fill
    assert [c.string_value for c in reply.classes] == ["legit", "fraud"]


def test_multiclass_answers_a_label_and_probabilities_per_class_and_the_classes_once():
    cfg = columns_config(**{"serving.kind": "multiclass", "serving.classes": ["a", "b", "c"]})
    spec = spec_of(cfg)
    probs = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]], dtype=np.float32)
    res = result(spec, {"label": np.array([[b"b"], [b"a"]], dtype=object), "probabilities": probs})
    body = res.to_dict()
    assert body["kind"] == "multiclass" and body["classes"] == ["a", "b", "c"]
    assert [p["label"] for p in body["predictions"]] == ["b", "a"]
    assert body["predictions"][0]["probabilities"] == pytest.approx([0.1, 0.7, 0.2])
    assert "score" not in body["predictions"][0]
    reply = grpc_v1.to_response(res)
    assert [c.string_value for c in reply.classes] == ["a", "b", "c"]
    assert list(reply.predictions[1].probabilities) == pytest.approx([0.5, 0.2, 0.3])


def test_probabilities_that_do_not_match_the_classes_are_an_error_not_a_wrong_label():
    cfg = columns_config(**{"serving.kind": "multiclass", "serving.classes": [0, 1, 2]})
    with pytest.raises(GatewayError, match=r"serving\.classes has 3"):
        result(spec_of(cfg), {"label": np.array([[0]]), "probabilities": np.array([[0.4, 0.6]])})


def test_regression_answers_a_value():
    cfg = columns_config(**{"serving.kind": "regression", "serving.outputs": {"value": "label"}})
    spec = spec_of(cfg)
    res = result(spec, {"label": np.array([[41.5], [-2.25]], dtype=np.float32)})
    assert res.to_dict()["predictions"] == [
        {"value": 41.5, "defaults_used": False},
        {"value": -2.25, "defaults_used": False},
    ]
    assert "classes" not in res.to_dict()
    reply = grpc_v1.to_response(res)
    assert reply.kind == "regression" and [p.value for p in reply.predictions] == [41.5, -2.25]


def test_other_passes_every_output_through_by_name():
    spec = spec_of(columns_config(**{"serving.kind": "other", "serving.outputs": {}}))
    out = {
        "label": np.array([[b"x", b"y"], [b"z", b"w"]], dtype=object),
        "probabilities": np.arange(12, dtype=np.float32).reshape(2, 3, 2),
    }
    res = result(spec, out)
    first = res.to_dict()["predictions"][0]
    assert first["outputs"] == {"label": ["x", "y"], "probabilities": [[0, 1], [2, 3], [4, 5]]}
    reply = grpc_v1.to_response(res)
    second = reply.predictions[1].outputs
    assert list(second["label"].strings) == ["z", "w"] and list(second["label"].shape) == [2]
    assert list(second["probabilities"].values) == [6, 7, 8, 9, 10, 11]
    assert list(second["probabilities"].shape) == [3, 2]


def test_a_legacy_model_is_read_by_output_name_as_before():
    cfg = config(
        {"serving.feature_names": '["amount"]', "feast.request_fields": "amount"},
        inputs=[{"name": "input", "data_type": "TYPE_FP32"}],
        outputs=("probabilities", "score", "label"),
    )
    spec = spec_of(cfg)
    out = {"score": np.array([[0.4]], dtype=np.float32), "label": np.array([[1]]), "probabilities": PROBS[:1]}
    body = result(spec, out).to_dict()
    assert body["predictions"] == [
        {
            "score": pytest.approx(0.4),
            "label": 1,
            "probabilities": pytest.approx([0.8, 0.2]),
            "defaults_used": False,
        }
    ]
    no_label = result(spec, {"probabilities": PROBS}).to_dict()["predictions"]
    assert [p["label"] for p in no_label] == [0, 1] and [p["score"] for p in no_label] == pytest.approx(
        [0.2, 0.65]
    )


# -- the core with stand-ins for Feast and Triton --------------------------------------------


class FakeTriton:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.calls: list[dict[str, np.ndarray]] = []

    async def model_ready_version(self, model: str) -> str | None:
        return None if model.endswith("_ensemble") else "3"

    async def ready_versions(self, model: str) -> list[str]:
        return [] if model.endswith("_ensemble") else ["3"]

    async def model_config(self, model: str) -> dict:
        return self.cfg

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict, str]:
        self.calls.append(inputs)
        n = len(next(iter(inputs.values())))
        # p(fraud) = 0.9 for the "web" channel, else 0.1: enough to see which row is which
        p = np.array([0.9 if c == "web" else 0.1 for c in inputs["channel"][:, 0]], dtype=np.float32)
        outs = {"label": (p >= 0.5).astype(np.int64).reshape(n, 1), "probabilities": np.stack([1 - p, p], 1)}
        return outs, "3"  # the version Triton ran


class FakeFeatures:
    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows

    async def key_types(self, service: str) -> dict[str, str]:
        return dict(KEYS)

    async def fetch(self, service: str, entity_rows: list[dict[str, Any]]) -> FeatureRows:
        names = ["merchant_category", "visits", "vip"]
        found = [self.rows.get(str(r["customer_id"]), {}) for r in entity_rows]
        return FeatureRows(
            values={n: [f.get(n) for f in found] for n in names},
            missing=[[n for n in names if f.get(n) is None] for f in found],
            oldest_epoch_s=[None] * len(found),
        )


def serve(policy: str, *bodies: Any) -> tuple[list[Any], FakeTriton]:
    settings = GatewaySettings(**nest({"missing_entities": policy}))
    triton = FakeTriton(columns_config())
    features = FakeFeatures(
        {
            "C-1": {"merchant_category": "grocery", "visits": 3, "vip": True},
            "C-2": {"visits": 5, "vip": False},  # no category: "" stands in under the default policy
            "C-3": {"merchant_category": "fuel", "vip": True},  # no visits: int64, no stand-in
        }
    )
    predictor = Predictor(settings, triton, features)  # type: ignore[arg-type]

    async def main() -> list[Any]:
        requests = [predictor.predict(http_request(b)) for b in bodies]
        return list(await asyncio.gather(*requests, return_exceptions=True))

    return asyncio.run(main()), triton


def row(customer: str, channel: str) -> dict[str, Any]:
    return {"customer_id": customer, "amount": 10.0, "channel": channel}


def test_the_default_policy_stands_in_an_empty_string_but_never_an_integer():
    (ok, partial, refused), triton = serve("default", row("C-1", "web"), row("C-2", "app"), row("C-3", "web"))
    assert [p.label for p in ok.predictions] == [1] and not ok.predictions[0].defaults_used
    assert [p.label for p in partial.predictions] == [0] and partial.predictions[0].defaults_used
    assert isinstance(refused, EntityNotFound) and refused.field == "rows[0]"
    assert "'visits'" in refused.message and "customer_id=C-3" in refused.message
    sent = [c["merchant_category"][:, 0].tolist() for c in triton.calls]
    assert sorted(v for call in sent for v in call) == ["", "grocery"]  # C-3 never reached Triton


def test_the_reject_policy_refuses_any_entity_with_a_missing_value():
    (ok, refused), _ = serve("reject", row("C-1", "app"), {"rows": [row("C-1", "web"), row("C-2", "web")]})
    assert [p.score for p in ok.predictions] == pytest.approx([0.1])
    assert isinstance(refused, EntityNotFound) and refused.field == "rows[1]"
    assert "merchant_category" in refused.message


# -- the skew check's comparison ---------------------------------------------------------------


def test_the_skew_check_compares_strings_exactly_and_numbers_as_the_model_sees_them():
    from gateway.skew import _same

    assert _same("string", "gold", "gold", 1e-6) and not _same("string", "gold", "Gold", 1e-6)
    assert _same("string", "", None, 1e-6) and _same("string", "", math.nan, 1e-6)  # the stand-in
    assert not _same("string", "", "gold", 1e-6)
    # the served float32 of 0.1 is not 0.1, but it is what training's 0.1 becomes in the model
    assert _same("float32", float(np.float32(0.1)), 0.1, 1e-9)
    assert not _same("float32", 0.2, 0.1, 1e-6)
    assert _same("float32", math.nan, None, 1e-6) and not _same("float32", 1.0, None, 1e-6)
    assert _same("int64", 3, 3.0, 1e-6) and not _same("int64", 3, 4, 1e-6)
