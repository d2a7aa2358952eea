"""Reason codes through the real stack: the session's fraud model exported again with
``--explain`` (its explainer loaded beside it in the session's Triton), and a three-class
RandomForest Pipeline on the same features; `gateway serve` in front, over HTTP, gRPC and
the Open Inference Protocol.

Each explanation is checked against shap's TreeExplainer on the native Pipeline for the input
the gateway assembled (the request's fields and the online features, numbers as float32), per
original column (the one-hot columns ``channel`` and ``merchant_category`` each one column),
within 1e-5; base value + the contributions of every column = the raw score (whose sigmoid is the
served score). Requests that do not ask never reach the explainer (Triton's own statistics).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import triton_to_np_dtype

from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value
from support import servers
from tests.gateway.helpers import (
    MODEL,
    ROWS,
    Stack,
    gateway_env,
    predict,
    register_multiclass,
    served_frame,
    shap_by_column,
)

pytestmark = pytest.mark.integration

EXPLAINED, TIERS = "fraud-explained", "fraud-tiers"
UNKNOWN_USER = {"user_id": 10**6, "merchant_id": 3, "amount": 55.0, "hour": 2, "channel": "web"}
EXPLAIN_ROWS = [*ROWS, UNKNOWN_USER]  # the last: no user features online, NaN to the model


@dataclass
class Explained:
    gateway: servers.Gateway
    stack: Stack
    tiers: Any  # the native three-class Pipeline
    columns: list[str]
    strings: list[str]


@pytest.fixture(scope="module")
def explained(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Explained]:
    from builder.export import ExportRequest, export_model

    export_model(ExportRequest(f"models:/{MODEL}@champion", stack.model_repo, name=EXPLAINED, explain=True))
    tiers, columns, strings = register_multiclass(stack, TIERS)
    export_model(ExportRequest(f"models:/{TIERS}@champion", stack.model_repo, explain=True))
    names = [EXPLAINED, f"{EXPLAINED}_explain", TIERS, f"{TIERS}_explain"]
    client = httpclient.InferenceServerClient(stack.triton.http_url)
    for name in names:
        client.load_model(name)
    env = gateway_env(
        stack,
        GATEWAY_MODELS=json.dumps([MODEL, EXPLAINED, TIERS]),
        GATEWAY_MISSING_ENTITIES="default",  # the unknown user is served, with NaN features
    )
    try:
        with servers.gateway_process(tmp_path_factory.mktemp("gw-explain"), env) as gw:
            yield Explained(gw, stack, tiers, columns, strings)
    finally:
        for name in names:
            client.unload_model(name)
        client.close()


def explainer_calls(stack: Stack, model: str) -> int:
    client = httpclient.InferenceServerClient(stack.triton.http_url)
    try:
        stats = client.get_inference_statistics(f"{model}_explain")["model_stats"]
    finally:
        client.close()
    return sum(int(s.get("inference_stats", {}).get("success", {}).get("count", 0)) for s in stats)


def by_column(explanation: dict[str, Any]) -> dict[str, float]:
    return {r["column"]: r["contribution"] for r in explanation["reasons"]}


def grpc_predict(gw: servers.Gateway, rows: list[dict[str, Any]], model: str, **extra: Any) -> Any:
    with grpc.insecure_channel(gw.grpc) as channel:
        request = gateway_pb2.PredictRequest(
            model=model,
            rows=[gateway_pb2.Row(fields={k: to_value(v) for k, v in r.items()}) for r in rows],
            **extra,
        )
        return gateway_pb2_grpc.GatewayStub(channel).Predict(request, timeout=30)


def test_binary_reasons_equal_shap_per_original_column_and_add_up_to_the_raw_score(explained: Explained):
    stack = explained.stack
    response = predict(explained.gateway, {"rows": EXPLAIN_ROWS, "explain": 100}, model=EXPLAINED)
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    trained = stack.trained
    frame = served_frame(stack, trained.columns, trained.string_columns, EXPLAIN_ROWS)
    expected, base = shap_by_column(trained.model, frame)
    for i, prediction in enumerate(predictions):
        explanation = prediction["explanation"]
        # every column once, by its own name: channel and merchant_category are one column each
        assert sorted(by_column(explanation)) == sorted(trained.columns)
        got = by_column(explanation)
        assert [got[c] for c in trained.columns] == pytest.approx(expected[i, :, 0].tolist(), abs=1e-5)
        assert explanation["base_value"] == pytest.approx(base[-1], abs=1e-5)
        total = explanation["base_value"] + sum(got.values())
        assert total == pytest.approx(explanation["raw_score"], abs=1e-9)
        assert 1 / (1 + np.exp(-explanation["raw_score"])) == pytest.approx(prediction["score"], abs=1e-5)
        assert explanation["units"] == "log_odds" and explanation["explains"] == 1
        magnitudes = [abs(r["contribution"]) for r in explanation["reasons"]]
        assert magnitudes == sorted(magnitudes, reverse=True)
    # the values the model saw: the request's, Feast's, and null where the store had none
    seen = {r["column"]: r["value"] for r in predictions[0]["explanation"]["reasons"]}
    assert seen["amount"] == 42.5 and seen["channel"] == "web"
    assert isinstance(seen["merchant_category"], str)
    unknown = {r["column"]: r["value"] for r in predictions[-1]["explanation"]["reasons"]}
    user_features = [c for c in trained.columns if c.startswith("user_")]
    assert user_features and all(unknown[c] is None for c in user_features)


def test_top_k_are_the_largest_of_all_and_grpc_answers_the_same(explained: Explained):
    gw = explained.gateway
    full = predict(gw, {"rows": ROWS, "explain": 1000}, model=EXPLAINED).json()["predictions"]
    top = predict(gw, {"rows": ROWS, "explain": 3}, model=EXPLAINED).json()["predictions"]
    for every, three in zip(full, top, strict=True):
        assert three["explanation"]["reasons"] == every["explanation"]["reasons"][:3]
        assert three["explanation"]["raw_score"] == every["explanation"]["raw_score"]
    reply = grpc_predict(gw, ROWS, EXPLAINED, explain=3)
    for message, three in zip(reply.predictions, top, strict=True):
        explanation = message.explanation
        assert [(r.column, r.contribution) for r in explanation.reasons] == [
            (r["column"], r["contribution"]) for r in three["explanation"]["reasons"]
        ]
        assert explanation.raw_score == three["explanation"]["raw_score"]
        assert explanation.units == "log_odds" and explanation.explains.int_value == 1
    assert not grpc_predict(gw, ROWS, EXPLAINED).predictions[0].HasField("explanation")


def test_multiclass_reasons_are_the_predicted_class_and_equal_shap(explained: Explained):
    response = predict(explained.gateway, {"rows": EXPLAIN_ROWS, "explain": 100}, model=TIERS)
    assert response.status_code == 200, response.text
    body = response.json()
    frame = served_frame(explained.stack, explained.columns, explained.strings, EXPLAIN_ROWS)
    expected, base = shap_by_column(explained.tiers, frame)
    classes = body["classes"]
    for i, prediction in enumerate(body["predictions"]):
        explanation = prediction["explanation"]
        assert explanation["explains"] == prediction["label"]  # the predicted class's reasons
        k = classes.index(prediction["label"])
        got = by_column(explanation)
        assert [got[c] for c in explained.columns] == pytest.approx(expected[i, :, k].tolist(), abs=1e-5)
        assert explanation["base_value"] == pytest.approx(base[k], abs=1e-5)
        assert explanation["base_value"] + sum(got.values()) == pytest.approx(
            explanation["raw_score"], abs=1e-9
        )
        assert explanation["units"] == "probability"  # a forest's: the class's probability


def test_oip_lists_explanations_and_answers_them_only_when_asked(explained: Explained):
    gw, stack = explained.gateway, explained.stack
    http = httpclient.InferenceServerClient(gw.http)
    rpc = grpcclient.InferenceServerClient(gw.grpc)
    meta = http.get_model_metadata(EXPLAINED)
    assert {"name": "explanations", "datatype": "BYTES", "shape": [-1, 1]} in meta["outputs"]
    assert "explanations" not in [o["name"] for o in http.get_model_metadata(MODEL)["outputs"]]
    rows = ROWS[:2]
    v1 = predict(gw, {"rows": rows, "explain": 1000}, model=EXPLAINED).json()["predictions"]

    def infer(module: Any, client: Any, outputs: list[str] | None) -> Any:
        tensors = []
        for t in meta["inputs"]:  # built from the metadata alone, as docs/gateway.md shows
            array = np.array([[r[t["name"]]] for r in rows], dtype=triton_to_np_dtype(t["datatype"]))
            tensor = module.InferInput(t["name"], list(array.shape), t["datatype"])
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        wanted = None if outputs is None else [module.InferRequestedOutput(n) for n in outputs]
        return client.infer(EXPLAINED, tensors, outputs=wanted)

    before = explainer_calls(stack, EXPLAINED)
    plain = infer(httpclient, http, None)
    assert plain.as_numpy("explanations") is None and plain.as_numpy("score") is not None
    assert explainer_calls(stack, EXPLAINED) == before  # asked for nothing: the explainer untouched
    for module, client in ((httpclient, http), (grpcclient, rpc)):
        result = infer(module, client, ["score", "explanations"])
        docs = [json.loads(v) for v in result.as_numpy("explanations")[:, 0]]
        assert [d["reasons"] for d in docs] == [p["explanation"]["reasons"] for p in v1]
        assert [d["raw_score"] for d in docs] == [p["explanation"]["raw_score"] for p in v1]
    http.close()
    rpc.close()


def test_requests_without_explain_never_call_the_explainer(explained: Explained):
    gw, stack = explained.gateway, explained.stack
    before = explainer_calls(stack, EXPLAINED)
    for _ in range(5):
        assert predict(gw, {"rows": ROWS}, model=EXPLAINED).status_code == 200
        grpc_predict(gw, ROWS, EXPLAINED)
    assert explainer_calls(stack, EXPLAINED) == before
    assert predict(gw, {"rows": ROWS, "explain": 2}, model=EXPLAINED).status_code == 200
    assert explainer_calls(stack, EXPLAINED) == before + 1  # one call for the request's rows


@pytest.mark.parametrize("bad", [-1, 0, 1001, 10**30, 2.5, 3.0, "3", True, [3], {"k": 3}])
def test_http_hostile_explain_is_a_422_naming_the_field(explained: Explained, bad: Any):
    response = predict(explained.gateway, {"rows": ROWS[:1], "explain": bad}, model=EXPLAINED)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "explain" and "explain must be" in response.json()["error"]


def test_explain_on_a_model_without_explainer_names_it_and_the_flag(explained: Explained):
    gw = explained.gateway
    response = predict(gw, {"rows": ROWS[:1], "explain": 3})
    assert response.status_code == 422 and response.json()["cause"] == "no_explainer"
    assert MODEL in response.json()["error"] and "builder export --explain" in response.json()["error"]
    with pytest.raises(grpc.RpcError) as refused:
        grpc_predict(gw, ROWS[:1], MODEL, explain=3)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "builder export --explain" in refused.value.details() and MODEL in refused.value.details()
    body: dict[str, Any] = {
        "inputs": [
            {"name": t["name"], "datatype": t["datatype"], "shape": [1, 1], "data": [ROWS[0][t["name"]]]}
            for t in requests.get(f"{gw.url}/v2/models/{MODEL}", timeout=10).json()["inputs"]
        ],
        "outputs": [{"name": "explanations"}],
    }
    oip = requests.post(f"{gw.url}/v2/models/{MODEL}/infer", json=body, timeout=10)
    assert oip.status_code == 422 and "builder export --explain" in oip.json()["error"], oip.text
    body["outputs"] = [{"name": "explanations", "parameters": {"explain": "x"}}]
    hostile = requests.post(f"{gw.url}/v2/models/{EXPLAINED}/infer", json=body, timeout=10)
    assert hostile.status_code == 422 and "explain" in hostile.json()["error"], hostile.text


@pytest.mark.parametrize("bad", [-1, 0, 1001, 2**62])
def test_grpc_hostile_explain_is_invalid_argument_naming_the_field(explained: Explained, bad: int):
    with pytest.raises(grpc.RpcError) as refused:
        grpc_predict(explained.gateway, ROWS[:1], EXPLAINED, explain=bad)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith("explain:")
