"""Issue 19's three model shapes, gateway side: outlier detectors, classifiers without
probabilities, multi-target regressors. Their contracts are built by hand here (as Triton's
model-config API gives them), so nothing depends on the builder's export of them.

Catalog (accepted and refused contracts), responses per kind, the answers over the real HTTP
app (ASGI, called in-process) and the real gRPC server (on a free port), drift of what they
serve, and the wrong-shaped answers of a model, which are a clear OutputMismatch (502
``output_mismatch``, gRPC INTERNAL), never a 500."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest

from gateway import grpc_app, http_app
from gateway.auth import ApiKeys
from gateway.catalog import ModelSpec, spec_from_config
from gateway.core import Predictor
from gateway.drift.monitor import DriftMonitor
from gateway.drift.reference import parse_reference
from gateway.errors import OutputMismatch, SpecError
from gateway.features import FeatureRows
from gateway.payload_log.layout import _predictions
from gateway.proto import gateway_pb2
from gateway.responses import PredictResult, predictions
from gateway.service import Service
from gateway.settings import GatewaySettings
from support.servers import free_port

COLUMNS = [
    {"name": "amount", "dtype": "float32"},
    {"name": "channel", "dtype": "string"},
    {"name": "visits", "dtype": "int64"},
]
TRITON = {"float32": "TYPE_FP32", "string": "TYPE_STRING", "int64": "TYPE_INT64"}
KEYS = {"customer_id": "string"}

OUTLIER = {
    "serving.kind": "outlier",
    "serving.outputs": {"label": "label", "score": "score"},
    "serving.score": {"source": "decision_function", "outlier_below": 0.0},
}
SVC_BINARY = {
    "serving.kind": "binary",
    "serving.classes": [0, 1],
    "serving.outputs": {"label": "label", "scores": "scores"},
}
SVC_MULTI = {
    "serving.kind": "multiclass",
    "serving.classes": ["a", "b", "c"],
    "serving.outputs": {"label": "label", "scores": "scores"},
}
MULTI_TARGET = {
    "serving.kind": "regression",
    "serving.outputs": {"value": "prediction"},
    "serving.targets": "3",
}


def config(params: dict[str, Any], outputs: dict[str, list[str]], max_batch_size: int = 8) -> dict:
    """A Triton model config as tritonclient's ``as_json`` gives it; ``outputs``: name -> dims."""
    base: dict[str, Any] = {
        "feast.feature_service": "svc",
        "feast.entity_keys": "customer_id",
        "feast.request_fields": '["amount", "channel"]',
        "serving.layout": "columns",
        "serving.columns": json.dumps(COLUMNS),
    }
    base.update({k: v if isinstance(v, str) or v is None else json.dumps(v) for k, v in params.items()})
    return {
        "name": "m",
        "max_batch_size": max_batch_size,
        "input": [{"name": c["name"], "data_type": TRITON[c["dtype"]], "dims": ["1"]} for c in COLUMNS],
        "output": [{"name": n, "dims": d} for n, d in outputs.items()],
        "parameters": {k: {"string_value": v} for k, v in base.items() if v is not None},
    }


def outlier_config(**change: Any) -> dict:
    return config({**OUTLIER, **change}, {"label": ["1"], "score": ["1"]})


def svc_config(params: dict[str, Any] = SVC_BINARY, width: int = 1, **change: Any) -> dict:
    return config({**params, **change}, {"label": ["1"], "scores": [str(width)]})


def multi_config(targets: str | None = "3", dims: list[str] | None = None, max_batch_size: int = 8) -> dict:
    return config({**MULTI_TARGET, "serving.targets": targets}, {"prediction": dims or ["3"]}, max_batch_size)


def spec_of(cfg: dict) -> ModelSpec:
    return spec_from_config("m", "m", "3", cfg, KEYS)


def result(spec: ModelSpec, out: dict[str, np.ndarray]) -> PredictResult:
    n = len(next(iter(out.values())))
    return PredictResult("m", "3", spec.kind, spec.classes, predictions(spec, out, [False] * n), 1.0)


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
    reply = grpc_app.to_response(res)
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
    reply = grpc_app.to_response(res)
    assert [p.label for p in reply.predictions] == [0, 1]
    assert [list(p.scores) for p in reply.predictions] == [[-1.5], [0.75]]
    assert [list(p.probabilities) for p in reply.predictions] == [[], []] and reply.predictions[0].score == 0


def test_a_multiclass_classifier_without_probabilities_answers_one_score_per_class():
    spec = spec_of(svc_config(SVC_MULTI, width=3))
    scores = np.array([[0.1, 2.0, -1.0], [1.5, -0.5, 0.0]], dtype=np.float32)
    res = result(spec, {"label": np.array([[b"b"], [b"a"]], dtype=object), "scores": scores})
    body = json.loads(http_app.to_json(res.to_dict()))
    assert [p["label"] for p in body["predictions"]] == ["b", "a"]
    assert body["predictions"][1]["scores"] == pytest.approx([1.5, -0.5, 0.0])
    assert set(body["predictions"][0]) == {"label", "scores", "defaults_used"}
    reply = grpc_app.to_response(res)
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
    reply = grpc_app.to_response(res)
    assert [list(p.values) for p in reply.predictions] == [[1.0, 2.5, -3.0], [0.0, 0.5, 4.0]]
    single = spec_of(config({**MULTI_TARGET, "serving.targets": None}, {"prediction": ["1"]}))
    one = result(single, {"prediction": np.array([[7.5]], dtype=np.float32)})
    assert one.to_dict()["predictions"] == [{"value": 7.5, "defaults_used": False}]
    assert list(grpc_app.to_response(one).predictions[0].values) == []


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
    status, body, _ = http_app.error_body(err.value)
    assert status == 502 and json.loads(body)["cause"] == "output_mismatch"
    assert err.value.grpc_code == grpc.StatusCode.INTERNAL


# -- drift: which prediction each kind's reference holds -----------------------------------------


def reference(prediction: dict[str, Any] | None) -> str:
    features = [
        {"name": "amount", "kind": "numeric", "edges": [10.0, 20.0], "counts": [10, 10, 10], "nulls": 0},
        {
            "name": "channel",
            "kind": "categorical",
            "categories": ["web", "app"],
            "counts": [15, 10, 5],
            "nulls": 0,
        },
        {"name": "visits", "kind": "numeric", "edges": [2.0], "counts": [15, 15], "nulls": 0},
    ]
    raw: dict[str, Any] = {"format": 1, "rows": 30, "source": "test", "features": features}
    if prediction is not None:
        raw["prediction"] = prediction
    return json.dumps(raw)


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


class FakeTriton:
    def __init__(self, cfg: dict, answer: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> None:
        self.cfg, self.answer = cfg, answer

    async def model_ready_version(self, model: str) -> str | None:
        return None if model.endswith("_ensemble") else "3"

    async def ready_versions(self, model: str) -> list[str]:
        return [] if model.endswith("_ensemble") else ["3"]

    async def model_config(self, model: str) -> dict:
        return self.cfg

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict, str]:
        out = self.answer(inputs)
        return {k: v for k, v in out.items() if k in outputs}, "3"

    async def close(self) -> None:
        pass


class FakeFeatures:
    async def key_types(self, service: str) -> dict[str, str]:
        return dict(KEYS)

    async def fetch(self, service: str, entity_rows: list[dict[str, Any]]) -> FeatureRows:
        n = len(entity_rows)
        return FeatureRows(
            values={"visits": [3] * n}, missing=[[] for _ in range(n)], oldest_epoch_s=[None] * n
        )

    async def close(self) -> None:
        pass


def amounts(inputs: dict[str, np.ndarray]) -> np.ndarray:
    return inputs["amount"].astype(np.float32).reshape(-1, 1)


def outlier_answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    score = 0.5 - amounts(inputs) / 100  # amount 100 and more: an outlier
    return {"label": np.where(score < 0, -1, 1).astype(np.int64), "score": score}


def svc_answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    score = amounts(inputs) / 10 - 1
    return {"label": (score >= 0).astype(np.int64), "scores": score}


def multi_answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    a = amounts(inputs)
    return {"prediction": np.hstack([a, 2 * a, 3 * a])}


def service_of(cfg: dict, answer: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]) -> Service:
    settings = GatewaySettings(models=("m",))
    drift = DriftMonitor()
    predictor = Predictor(settings, FakeTriton(cfg, answer), FakeFeatures(), (drift,))  # type: ignore[arg-type]
    return Service(settings, predictor, ApiKeys.from_settings(settings), ("m",), drift)


async def asgi(app: Any, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
    """One request through the ASGI app, as uvicorn would hand it over."""
    sent: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            await asyncio.sleep(3600)
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path_only, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path_only,
        "raw_path": path_only.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(data)


ROWS = {"rows": [{"customer_id": "C-1", "amount": 5.0, "channel": "web"},
                 {"customer_id": "C-2", "amount": 150.0, "channel": "app"}]}  # fmt: skip


def grpc_rows() -> gateway_pb2.PredictRequest:
    return gateway_pb2.PredictRequest(
        model="m",
        rows=[
            gateway_pb2.Row(
                fields={
                    "customer_id": gateway_pb2.Value(string_value=r["customer_id"]),
                    "amount": gateway_pb2.Value(double_value=r["amount"]),
                    "channel": gateway_pb2.Value(string_value=r["channel"]),
                }
            )
            for r in ROWS["rows"]
        ],
    )


def serve_both(service: Service) -> tuple[int, Any, Any, int, Any]:
    """The HTTP answer, the gRPC answer (or its error) and the drift report, for ROWS."""

    async def main() -> tuple[int, Any, Any, int, Any]:
        status, body = await asgi(
            http_app.create_app(service), "POST", "/v1/models/m/predict", json.dumps(ROWS).encode()
        )
        port = free_port()
        server = grpc_app.create_server(service, f"127.0.0.1:{port}")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary(
                    "/gateway.v1.Gateway/Predict",
                    request_serializer=gateway_pb2.PredictRequest.SerializeToString,
                    response_deserializer=gateway_pb2.PredictResponse.FromString,
                )
                try:
                    reply: Any = await call(grpc_rows(), timeout=10)
                except grpc.aio.AioRpcError as exc:
                    reply = exc
        finally:
            await server.stop(None)
        await asyncio.sleep(0)  # the drift monitor observes after the batch (call_soon)
        drift_status, drift = await asgi(http_app.create_app(service), "GET", "/v1/models/m/drift?window=1h")
        return status, body, reply, drift_status, drift

    return asyncio.run(main())


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
