"""Issue 19's three model shapes, gateway side: outlier detectors, classifiers without
probabilities, multi-target regressors. Their contracts are built by hand here (as Triton's
model-config API gives them), so nothing depends on the builder's export of them.

Catalog (accepted and refused contracts), responses per kind, the answers over the real HTTP
app (ASGI, called in-process) and the real gRPC server (on a free port), drift of what they
serve, and the wrong-shaped answers of a model, which are a clear OutputMismatch (502
``output_mismatch``, gRPC INTERNAL), never a 500."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest

from gateway.errors import OutputMismatch, SpecError
from gateway.grpc import v1 as grpc_v1
from gateway.http import bodies
from gateway.http import handling as http_handling
from gateway.payload_log.layout import _predictions
from gateway.responses import predictions
from gateway.stats.reference import parse_reference
from tests.gateway.core.helpers import (
    MULTI_TARGET,
    OUTLIER,
    SVC_BINARY,
    amounts,
    config,
    multi_config,
    outlier_config,
    reference,
    result,
    serve_both,
    service_of,
    spec_of,
    svc_config,
)

SVC_MULTI = {
    "serving.kind": "multiclass",
    "serving.classes": ["a", "b", "c"],
    "serving.outputs": {"label": "label", "scores": "scores"},
}


# -- the catalog: accepted contracts -----------------------------------------------------------


def test_an_outlier_detector_is_read_with_its_score_rule_and_asks_for_label_and_score():
    spec = spec_of(outlier_config())
    assert spec.kind == "outlier" and spec.classes is None
    assert spec.roles.label == "label" and spec.roles.score == "score"
    assert spec.outlier_score is not None
    assert (spec.outlier_score.source, spec.outlier_score.outlier_below) == ("decision_function", 0.0)
    assert spec.outputs == ("label", "score")


def test_a_classifier_without_probabilities_is_served_by_its_label_and_scores():
    spec = spec_of(svc_config())
    assert spec.kind == "binary" and spec.classes == (0, 1) and spec.roles.probabilities is None
    assert spec.outputs == ("label", "scores")
    multi = spec_of(svc_config(SVC_MULTI, width=3))
    assert (
        multi.kind == "multiclass"
        and multi.classes == ("a", "b", "c")
        and multi.outputs == ("label", "scores")
    )
    label_only = spec_of(config({**SVC_BINARY, "serving.outputs": {"label": "label"}}, {"label": ["1"]}))
    assert label_only.outputs == ("label",)


@pytest.mark.parametrize("max_batch_size, dims", [(8, ["3"]), (0, ["-1", "3"]), (8, ["-1"])])
def test_a_multi_target_regressor_keeps_its_targets(max_batch_size: int, dims: list[str]):
    spec = spec_of(multi_config("3", dims, max_batch_size))
    assert spec.kind == "regression" and spec.targets == 3 and spec.outputs == ("prediction",)


def test_targets_absent_is_one():
    cfg = config({**MULTI_TARGET, "serving.targets": None}, {"prediction": ["1"]})
    assert spec_of(cfg).targets == 1


# -- the catalog: refused contracts --------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg, fragment",
    [
        (outlier_config(**{"serving.kind": "anomaly"}), "unknown serving.kind 'anomaly'"),
        (outlier_config(**{"serving.outputs": {"label": "label"}}), "needs a score output"),
        (outlier_config(**{"serving.outputs": {"score": "decision"}}), "score is 'decision', not one of"),
        (outlier_config(**{"serving.score": None}), "needs serving.score"),
        (outlier_config(**{"serving.score": "{"}), "serving.score is not valid JSON"),
        (outlier_config(**{"serving.score": {"source": "decision_function"}}), "finite outlier_below"),
        (outlier_config(**{"serving.score": {"outlier_below": 0.0}}), "a source (text)"),
        (
            outlier_config(**{"serving.score": '{"source": "x", "outlier_below": NaN}'}),
            "finite outlier_below",
        ),
        (svc_config(**{"serving.outputs": {"scores": "scores"}}), "needs a probabilities or a label output"),
        (svc_config(**{"serving.decision_threshold": "0.3"}), "applies to probabilities"),
        (svc_config(**{"serving.outputs": {"label": "label", "scores": "s"}}), "scores is 's', not one of"),
        (multi_config("1", ["3"]), "has 3 column(s) per row, but serving.targets is 1"),
        (multi_config(None, ["3"]), "serving.targets is 1 (absent)"),
        (multi_config("2", ["-1", "3"], 0), "has 3 column(s) per row, but serving.targets is 2"),
        (multi_config("0"), "not a whole number >= 1"),
        (multi_config("three"), "not a whole number >= 1"),
        (svc_config(**{"serving.targets": "2"}), "applies to regression models, not binary"),
    ],
)
def test_a_contract_the_gateway_cannot_serve_is_a_spec_error_saying_what(cfg: dict, fragment: str):
    with pytest.raises(SpecError) as err:
        spec_of(cfg)
    assert fragment in err.value.message
    assert err.value.http_status == 404 and err.value.cause == "unservable_model"


# -- responses per kind ------------------------------------------------------------------------


def test_an_outlier_answer_is_outlier_label_and_score_per_row():
    spec = spec_of(outlier_config())
    out = {"label": np.array([[1], [-1]]), "score": np.array([[0.25], [-0.5]], dtype=np.float32)}
    res = result(spec, out)
    assert res.to_dict()["predictions"] == [
        {"outlier": False, "label": 1, "score": 0.25, "defaults_used": False},
        {"outlier": True, "label": -1, "score": -0.5, "defaults_used": False},
    ]
    assert "classes" not in res.to_dict()
    reply = grpc_v1.to_response(res)
    assert reply.kind == "outlier"
    assert [(p.outlier, p.label, p.score) for p in reply.predictions] == [(False, 1, 0.25), (True, -1, -0.5)]
    assert [p.class_label.int_value for p in reply.predictions] == [1, -1]


def test_without_a_label_output_an_outlier_is_a_score_below_the_threshold():
    cfg = config(
        {
            **OUTLIER,
            "serving.outputs": {"score": "score"},
            "serving.score": {"source": "s", "outlier_below": 0.1},
        },
        {"score": ["1"]},
    )
    spec = spec_of(cfg)
    assert spec.outputs == ("score",)
    body = result(spec, {"score": np.array([[0.05], [0.1], [2.0]], dtype=np.float32)}).to_dict()
    assert [(p["outlier"], p["label"]) for p in body["predictions"]] == [(True, -1), (False, 1), (False, 1)]


def test_a_binary_classifier_without_probabilities_answers_its_label_and_decision_scores():
    spec = spec_of(svc_config())
    res = result(
        spec, {"label": np.array([[0], [1]]), "scores": np.array([[-1.5], [0.75]], dtype=np.float32)}
    )
    body = res.to_dict()
    assert body["classes"] == [0, 1]
    assert body["predictions"] == [
        {"label": 0, "scores": [-1.5], "defaults_used": False},
        {"label": 1, "scores": [0.75], "defaults_used": False},
    ]
    reply = grpc_v1.to_response(res)
    assert [p.label for p in reply.predictions] == [0, 1]
    assert [list(p.scores) for p in reply.predictions] == [[-1.5], [0.75]]
    assert [list(p.probabilities) for p in reply.predictions] == [[], []] and reply.predictions[0].score == 0


def test_a_multiclass_classifier_without_probabilities_answers_one_score_per_class():
    spec = spec_of(svc_config(SVC_MULTI, width=3))
    scores = np.array([[0.1, 2.0, -1.0], [1.5, -0.5, 0.0]], dtype=np.float32)
    res = result(spec, {"label": np.array([[b"b"], [b"a"]], dtype=object), "scores": scores})
    body = json.loads(bodies.to_json(res.to_dict()))
    assert [p["label"] for p in body["predictions"]] == ["b", "a"]
    assert body["predictions"][1]["scores"] == pytest.approx([1.5, -0.5, 0.0])
    assert set(body["predictions"][0]) == {"label", "scores", "defaults_used"}
    reply = grpc_v1.to_response(res)
    assert [p.class_label.string_value for p in reply.predictions] == ["b", "a"]
    assert list(reply.predictions[0].scores) == pytest.approx([0.1, 2.0, -1.0])


def test_a_multi_target_regressor_answers_a_list_and_a_single_target_a_number():
    spec = spec_of(multi_config())
    values = np.array([[1.0, 2.5, -3.0], [0.0, 0.5, 4.0]], dtype=np.float32)
    res = result(spec, {"prediction": values})
    assert res.to_dict()["predictions"] == [
        {"value": [1.0, 2.5, -3.0], "defaults_used": False},
        {"value": [0.0, 0.5, 4.0], "defaults_used": False},
    ]
    reply = grpc_v1.to_response(res)
    assert [list(p.values) for p in reply.predictions] == [[1.0, 2.5, -3.0], [0.0, 0.5, 4.0]]
    single = spec_of(config({**MULTI_TARGET, "serving.targets": None}, {"prediction": ["1"]}))
    one = result(single, {"prediction": np.array([[7.5]], dtype=np.float32)})
    assert one.to_dict()["predictions"] == [{"value": 7.5, "defaults_used": False}]
    assert list(grpc_v1.to_response(one).predictions[0].values) == []


# -- a model answering the wrong shape -----------------------------------------------------------


@pytest.mark.parametrize(
    "cfg, out, fragment",
    [
        # targets absent, the model answers 3 columns (its config says -1: not checked before)
        (
            config({**MULTI_TARGET, "serving.targets": None}, {"prediction": ["-1"]}),
            {"prediction": np.zeros((2, 3), np.float32)},
            "has 3 column(s); 1 expected",
        ),
        (
            multi_config("3", ["-1"]),
            {"prediction": np.zeros((2, 2), np.float32)},
            "has 2 column(s); 3 expected",
        ),
        (outlier_config(), {"label": np.array([[1], [1]])}, "output 'score' is missing"),
        (outlier_config(), {"label": np.array([[1], [0]]), "score": np.zeros((2, 1))}, "-1 (outlier) or 1"),
        (outlier_config(), {"label": np.array([[1], [1]]), "score": np.zeros((2, 2))}, "has 2 column(s); 1"),
        (svc_config(), {"label": np.array([[1], [0]]), "scores": np.zeros((2, 3))}, "has 1 or 2"),
        (
            svc_config(SVC_MULTI, 3),
            {"label": np.array([[b"a"], [b"b"]]), "scores": np.zeros((2, 2))},
            "has 3",
        ),
    ],
)
def test_an_answer_that_breaks_the_contract_is_an_output_mismatch_not_a_500(
    cfg: dict, out: dict[str, np.ndarray], fragment: str
):
    with pytest.raises(OutputMismatch) as err:
        result(spec_of(cfg), out)
    assert fragment in err.value.message
    status, body, _ = http_handling.error_body(err.value)
    assert status == 502 and json.loads(body)["cause"] == "output_mismatch"
    assert err.value.grpc_code == grpc.StatusCode.INTERNAL


# -- drift: which prediction each kind's reference holds -----------------------------------------


SCORE_REF = {
    "name": "score",
    "kind": "numeric",
    "edges": [-0.5, 0.0, 0.5],
    "counts": [3, 7, 10, 10],
    "nulls": 0,
}
LABEL_REF = {"name": "label", "kind": "categorical", "categories": [0, 1], "counts": [20, 10, 0], "nulls": 0}


def test_each_new_kind_reads_the_prediction_reference_the_builder_records():
    outlier = parse_reference(reference(SCORE_REF), spec_of(outlier_config()))
    assert outlier.prediction is not None and outlier.prediction.kind == "numeric"
    svc = parse_reference(reference(LABEL_REF), spec_of(svc_config()))
    assert svc.prediction is not None and svc.prediction.categories == (0, 1)
    # a multi-target regressor has none: a prediction entry, if any, is not read
    multi = parse_reference(reference(None), spec_of(multi_config()))
    assert multi.prediction is None and len(multi.features) == 3


# -- through the real HTTP app and gRPC server, with stand-ins for Triton and Feast -------------


def outlier_answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    score = 0.5 - amounts(inputs) / 100  # amount 100 and more: an outlier
    return {"label": np.where(score < 0, -1, 1).astype(np.int64), "score": score}


def svc_answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    score = amounts(inputs) / 10 - 1
    return {"label": (score >= 0).astype(np.int64), "scores": score}


def multi_answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    a = amounts(inputs)
    return {"prediction": np.hstack([a, 2 * a, 3 * a])}


def test_an_outlier_detector_over_http_and_grpc_and_its_score_drift():
    cfg = outlier_config(**{"drift.reference": reference(SCORE_REF)})
    status, body, reply, drift_status, drift = serve_both(service_of(cfg, outlier_answer))
    assert status == 200 and body["kind"] == "outlier"
    assert [(p["outlier"], p["label"]) for p in body["predictions"]] == [(False, 1), (True, -1)]
    assert [p["score"] for p in body["predictions"]] == pytest.approx([0.45, -1.0])
    assert reply.kind == "outlier" and [p.outlier for p in reply.predictions] == [False, True]
    assert [p.label for p in reply.predictions] == [1, -1]
    assert [p.score for p in reply.predictions] == pytest.approx([0.45, -1.0])
    assert drift_status == 200
    version = drift["versions"][0]
    assert version["drift"] == "on" and version["rows"] == 4  # HTTP's 2 rows and gRPC's 2
    assert version["prediction"]["name"] == "score" and version["prediction"]["kind"] == "numeric"


def test_a_classifier_without_probabilities_over_http_and_grpc_and_its_label_drift():
    cfg = svc_config(**{"drift.reference": reference(LABEL_REF)})
    status, body, reply, _, drift = serve_both(service_of(cfg, svc_answer))
    assert status == 200 and body["classes"] == [0, 1]
    assert [p["label"] for p in body["predictions"]] == [0, 1]
    assert [p["scores"] for p in body["predictions"]] == [[-0.5], [14.0]]
    assert "probabilities" not in body["predictions"][0] and "score" not in body["predictions"][0]
    assert [list(p.scores) for p in reply.predictions] == [[-0.5], [14.0]]
    assert [p.label for p in reply.predictions] == [0, 1]
    prediction = drift["versions"][0]["prediction"]
    assert prediction["name"] == "label" and prediction["kind"] == "categorical"


def test_a_multi_target_regressor_over_http_and_grpc_drifts_on_its_inputs_only():
    cfg = multi_config()
    cfg["parameters"]["drift.reference"] = {"string_value": reference(None)}
    status, body, reply, _, drift = serve_both(service_of(cfg, multi_answer))
    assert status == 200 and body["kind"] == "regression"
    assert body["predictions"][1]["value"] == [150.0, 300.0, 450.0]
    assert [list(p.values) for p in reply.predictions] == [[5.0, 10.0, 15.0], [150.0, 300.0, 450.0]]
    version = drift["versions"][0]
    assert version["drift"] == "on" and version["prediction"] is None
    assert [f["name"] for f in version["features"]] == ["amount", "channel", "visits"]


def test_a_model_answering_the_wrong_shape_is_a_clear_502_over_http_and_internal_over_grpc():
    # the contract says 3 targets (dims -1: nothing to check at load), the model answers 2 columns
    cfg = multi_config("3", ["-1"])
    service = service_of(cfg, lambda inputs: {"prediction": np.zeros((len(inputs["amount"]), 2), np.float32)})
    status, body, reply, _, _ = serve_both(service)
    assert status == 502 and body["cause"] == "output_mismatch"
    assert "'prediction' has 2 column(s); 3 expected" in body["error"]
    assert isinstance(reply, grpc.aio.AioRpcError) and reply.code() == grpc.StatusCode.INTERNAL
    assert "3 expected" in (reply.details() or "")


# -- the payload log's columns for the new kinds -------------------------------------------------


def test_the_payload_log_writes_each_new_kinds_prediction_columns():
    outlier = spec_of(outlier_config())
    rows = predictions(outlier, {"label": np.array([[-1]]), "score": np.array([[-0.25]])}, [False])
    columns = _predictions(outlier, rows)
    assert columns["__outlier"].to_pylist() == [True] and columns["__label"].to_pylist() == [-1]
    assert columns["__score"].to_pylist() == [-0.25]
    svc = spec_of(svc_config())
    columns = _predictions(
        svc, predictions(svc, {"label": np.array([[1]]), "scores": np.array([[0.5]])}, [False])
    )
    assert columns["__scores"].to_pylist() == [[0.5]] and "__probabilities" not in columns
    multi = spec_of(multi_config())
    columns = _predictions(multi, predictions(multi, {"prediction": np.array([[1.0, 2.0, 3.0]])}, [False]))
    assert columns["__values"].to_pylist() == [[1.0, 2.0, 3.0]] and "__value" not in columns
