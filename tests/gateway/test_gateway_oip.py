"""The Open Inference Protocol (KServe v2) on the gateway, driven by the clients that speak it:
tritonclient's HTTP and gRPC clients and perf_analyzer, against the real stack (Feast, Triton,
``gateway serve``). Requests are built from the model's metadata, as a generic client builds
them, and must answer what ``/v1/models/{m}/predict`` answers for the same rows.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from support import servers
from tests.gateway.helpers import MODEL, Stack, gateway_env

pytestmark = pytest.mark.integration

ROWS = [
    {"user_id": 17, "merchant_id": 3, "amount": 42.5, "hour": 13, "channel": "web"},
    {"user_id": 250, "merchant_id": 88, "amount": 980.0, "hour": 3, "channel": "app"},
    {"user_id": 401, "merchant_id": 12, "amount": 12.0, "hour": 20, "channel": "pos"},
]
ROOT = Path(__file__).resolve().parents[2]
# Where `perf_analyzer` is looked for: $PERF_ANALYZER, PATH, then the project's runtime folder
# (the binary of the tritonclient==2.41.0 wheel, with libcudart.so.12 from the Triton runtime's
# nvidia_pytriton.libs in lib/ beside it; libb64-0d from Debian). See docs/gateway.md.
PERF_ANALYZER_DIR = ROOT / ".runtime" / "perf-analyzer"


def v1_predict(gw: servers.Gateway, rows: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    response = requests.post(f"{gw.url}/v1/models/{MODEL}/predict", json={"rows": rows}, timeout=10, **kwargs)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def inputs_from_metadata(
    module: Any, metadata: Any, rows: list[dict[str, Any]], binary: bool = True
) -> list[Any]:
    """InferInputs for ``rows`` built from the model metadata alone (names, datatypes, [-1, 1])."""
    tensors = metadata["inputs"] if isinstance(metadata, dict) else metadata.inputs
    built = []
    for tensor in tensors:
        name, datatype = (
            (tensor["name"], tensor["datatype"])
            if isinstance(tensor, dict)
            else (
                tensor.name,
                tensor.datatype,
            )
        )
        array = np.array([[row[name]] for row in rows], dtype=triton_to_np_dtype(datatype))
        infer_input = module.InferInput(name, list(array.shape), datatype)
        if module is httpclient:
            infer_input.set_data_from_numpy(array, binary_data=binary)
        else:
            infer_input.set_data_from_numpy(array)
        built.append(infer_input)
    return built


def test_server_and_model_ready_with_metadata_listing_keys_and_fields(gateway: servers.Gateway):
    http = httpclient.InferenceServerClient(gateway.http)
    rpc = grpcclient.InferenceServerClient(gateway.grpc)
    assert http.is_server_live() and http.is_server_ready() and http.is_model_ready(MODEL)
    assert rpc.is_server_live() and rpc.is_server_ready() and rpc.is_model_ready(MODEL)
    assert not rpc.is_model_ready("no-such-model") and not http.is_model_ready("no-such-model")
    assert http.get_server_metadata()["name"] == rpc.get_server_metadata().name == "triton-stack-gateway"
    meta = http.get_model_metadata(MODEL)
    inputs = {t["name"]: t["datatype"] for t in meta["inputs"]}
    assert inputs == {
        "user_id": "INT64",
        "merchant_id": "INT64",
        "amount": "FP32",
        "hour": "FP32",
        "channel": "BYTES",
    }
    assert all(t["shape"] == [-1, 1] for t in meta["inputs"])
    outputs = {t["name"]: (t["datatype"], t["shape"]) for t in meta["outputs"]}
    assert outputs == {
        "label": ("INT64", [-1, 1]),
        "probabilities": ("FP64", [-1, 2]),
        "score": ("FP64", [-1, 1]),
        "defaults_used": ("BOOL", [-1, 1]),
    }
    grpc_meta = rpc.get_model_metadata(MODEL)
    assert [(t.name, t.datatype, list(t.shape)) for t in grpc_meta.inputs] == [
        (t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]
    ]
    assert grpc_meta.versions == meta["versions"]


@pytest.mark.parametrize("binary", [True, False], ids=["binary-data", "json-data"])
def test_http_infer_answers_what_v1_predict_answers(gateway: servers.Gateway, binary: bool):
    client = httpclient.InferenceServerClient(gateway.http)
    inputs = inputs_from_metadata(httpclient, client.get_model_metadata(MODEL), ROWS, binary)
    result = client.infer(MODEL, inputs, request_id="my-req-1")
    v1 = v1_predict(gateway, ROWS)
    scores = result.as_numpy("score")
    assert scores.shape == (3, 1)
    np.testing.assert_array_equal(scores[:, 0], [p["score"] for p in v1["predictions"]])
    assert result.as_numpy("label")[:, 0].tolist() == [p["label"] for p in v1["predictions"]]
    assert result.as_numpy("probabilities").tolist() == [p["probabilities"] for p in v1["predictions"]]
    assert result.as_numpy("defaults_used")[:, 0].tolist() == [False] * 3
    response = result.get_response()
    assert response["id"] == "my-req-1" and response["model_version"] == v1["version"]
    params = response["parameters"]
    assert len(params["prediction_id"]) == 32 and params["prediction_id"] != v1["id"]
    assert 0 <= params["feature_age_seconds"] < 3 * 24 * 3600


def test_grpc_infer_answers_what_v1_predict_answers(gateway: servers.Gateway):
    client = grpcclient.InferenceServerClient(gateway.grpc)
    inputs = inputs_from_metadata(grpcclient, client.get_model_metadata(MODEL), ROWS)
    outputs = [grpcclient.InferRequestedOutput("score"), grpcclient.InferRequestedOutput("label")]
    result = client.infer(MODEL, inputs, outputs=outputs)
    v1 = v1_predict(gateway, ROWS)
    np.testing.assert_array_equal(result.as_numpy("score")[:, 0], [p["score"] for p in v1["predictions"]])
    assert result.as_numpy("label")[:, 0].tolist() == [p["label"] for p in v1["predictions"]]
    assert result.as_numpy("probabilities") is None  # only what was asked for
    response = result.get_response()
    assert response.parameters["feature_age_seconds"].double_param >= 0
    assert response.id == response.parameters["prediction_id"].string_param  # no id sent: the gateway's
    # the versioned form answers for the version the gateway serves, and only that one
    assert client.infer(MODEL, inputs, model_version=v1["version"]).as_numpy("score") is not None
    with pytest.raises(InferenceServerException) as wrong:
        client.infer(MODEL, inputs, model_version="999")
    assert wrong.value.status() == "StatusCode.NOT_FOUND"


def test_unknown_entity_and_model_are_404_or_not_found(gateway: servers.Gateway):
    rows = [{**ROWS[0], "user_id": 999999}]
    http = httpclient.InferenceServerClient(gateway.http)
    with pytest.raises(InferenceServerException) as missing:
        http.infer(MODEL, inputs_from_metadata(httpclient, http.get_model_metadata(MODEL), rows))
    assert (
        missing.value.status() == "404" and "no online features for user_id=999999" in missing.value.message()
    )
    rpc = grpcclient.InferenceServerClient(gateway.grpc)
    with pytest.raises(InferenceServerException) as not_found:
        rpc.infer(MODEL, inputs_from_metadata(grpcclient, rpc.get_model_metadata(MODEL), rows))
    assert not_found.value.status() == "StatusCode.NOT_FOUND"
    unknown = requests.post(f"{gateway.url}/v2/models/no-such-model/infer", json={"inputs": []}, timeout=10)
    assert unknown.status_code == 404 and set(unknown.json()) == {"error"}


def _tensor(name: str, datatype: str, data: list[Any], shape: list[int] | None = None) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape or [len(data), 1], "data": data}


def _json_inputs(**override: dict[str, Any]) -> list[dict[str, Any]]:
    types = {
        "user_id": "INT64",
        "merchant_id": "INT64",
        "amount": "FP32",
        "hour": "FP32",
        "channel": "BYTES",
    }
    return [override.get(n, _tensor(n, t, [ROWS[0][n]])) for n, t in types.items()]


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        (
            {"inputs": _json_inputs(amount=_tensor("amount", "BYTES", ["42.5"]))},
            400,
            "input 'amount' is BYTES",
        ),
        (
            {"inputs": _json_inputs(user_id=_tensor("user_id", "FP32", [17.0]))},
            400,
            "input 'user_id' is FP32",
        ),
        (
            {"inputs": _json_inputs(user_id=_tensor("user_id", "INT64", [1.5]))},
            400,
            "1.5 is not a INT64 value",
        ),
        ({"inputs": _json_inputs(hour=_tensor("hour", "FP32", [1, 2], [1, 2]))}, 400, "takes [N, 1]"),
        ({"inputs": _json_inputs(hour=_tensor("hour", "FP32", [1, 2]))}, 400, "different row counts"),
        ({"inputs": _json_inputs()[:-1]}, 400, "missing input 'channel'"),
        ({"inputs": [*_json_inputs(), _tensor("colour", "BYTES", ["red"])]}, 400, "unknown input 'colour'"),
        ({"inputs": _json_inputs(), "outputs": [{"name": "nope"}]}, 400, "unknown output 'nope'"),
        (
            {"inputs": _json_inputs(), "outputs": [{"name": "label", "parameters": {"classification": 2}}]},
            400,
            "classification",
        ),
        ({"inputs": _json_inputs(amount=_tensor("amount", "FP64", [float("nan")]))}, 422, "finite number"),
        ({"inputs": _json_inputs(user_id=_tensor("user_id", "INT32", [2**40]))}, 400, "not a INT32 value"),
        ({"inputs": "x"}, 400, "inputs must be a list"),
        ([1], 400, "JSON object"),
    ],
)
def test_hostile_infer_bodies_get_a_one_line_4xx(
    gateway: servers.Gateway, body: Any, status: int, fragment: str
):
    response = requests.post(f"{gateway.url}/v2/models/{MODEL}/infer", data=json.dumps(body), timeout=10)
    assert response.status_code == status, response.text
    error = response.json()
    assert set(error) == {"error"} and fragment in error["error"] and "\n" not in error["error"]


def test_widened_datatypes_are_taken(gateway: servers.Gateway):
    body = {
        "inputs": _json_inputs(
            amount=_tensor("amount", "FP64", [42.5]), user_id=_tensor("user_id", "INT32", [17], [1])
        )
    }
    response = requests.post(f"{gateway.url}/v2/models/{MODEL}/infer", json=body, timeout=10)
    assert response.status_code == 200, response.text
    score = next(o for o in response.json()["outputs"] if o["name"] == "score")["data"]
    assert score == [v1_predict(gateway, ROWS[:1])["predictions"][0]["score"]]


def _binary_body(channel: bytes, extra: bytes = b"", size_delta: int = 0) -> tuple[bytes, dict[str, str]]:
    raw = {
        "user_id": np.array([17], "<i8").tobytes(),
        "merchant_id": np.array([3], "<i8").tobytes(),
        "amount": np.array([42.5], "<f4").tobytes(),
        "hour": np.array([13], "<f4").tobytes(),
        "channel": struct.pack("<I", len(channel)) + channel,
    }
    types = {
        "user_id": "INT64",
        "merchant_id": "INT64",
        "amount": "FP32",
        "hour": "FP32",
        "channel": "BYTES",
    }
    head = {
        "inputs": [
            {
                "name": n,
                "datatype": t,
                "shape": [1, 1],
                "parameters": {"binary_data_size": len(raw[n]) + size_delta},
            }
            for n, t in types.items()
        ]
    }
    header = json.dumps(head).encode()
    return header + b"".join(raw.values()) + extra, {"Inference-Header-Content-Length": str(len(header))}


@pytest.mark.parametrize(
    "channel, extra, delta, fragment",
    [
        (b"web", b"", 0, None),
        (b"\xff\xfe", b"", 0, "not UTF-8"),
        (b"web", b"junk", 0, "follow the last input"),
        (b"web", b"", 1, "bytes of INT64"),
    ],
    ids=["ok", "not-utf8", "trailing-bytes", "wrong-size"],
)
def test_binary_data_requests(
    gateway: servers.Gateway, channel: bytes, extra: bytes, delta: int, fragment: str | None
):
    body, headers = _binary_body(channel, extra, delta)
    response = requests.post(f"{gateway.url}/v2/models/{MODEL}/infer", data=body, headers=headers, timeout=10)
    if fragment is None:
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 400 and fragment in response.json()["error"], response.text


def test_grpc_hostile_requests_are_invalid_argument(gateway: servers.Gateway):
    client = grpcclient.InferenceServerClient(gateway.grpc)
    inputs = inputs_from_metadata(grpcclient, client.get_model_metadata(MODEL), ROWS[:1])
    wrong = grpcclient.InferInput("amount", [1, 1], "BYTES")
    wrong.set_data_from_numpy(np.array([[b"42.5"]], dtype=object))
    with pytest.raises(InferenceServerException) as bad_type:
        client.infer(MODEL, [*inputs[:2], wrong, *inputs[3:]])
    assert (
        bad_type.value.status() == "StatusCode.INVALID_ARGUMENT"
        and "'amount' is BYTES" in bad_type.value.message()
    )
    not_utf8 = grpcclient.InferInput("channel", [1, 1], "BYTES")
    not_utf8.set_data_from_numpy(np.array([[b"\xff\xfe"]], dtype=object))
    with pytest.raises(InferenceServerException) as bad_text:
        client.infer(MODEL, [*inputs[:4], not_utf8])
    assert bad_text.value.status() == "StatusCode.INVALID_ARGUMENT" and "UTF-8" in bad_text.value.message()
    # bytes that are no ModelInferRequest at all
    with grpc.insecure_channel(gateway.grpc) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as garbage:
            call(b"\xff\xff\xff", timeout=10)
    assert garbage.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_auth_when_keys_are_on(stack: Stack, tmp_path: Path):
    env = gateway_env(stack, GATEWAY_API_KEYS="oip-key")
    with servers.gateway_process(tmp_path, env) as gw:
        http = httpclient.InferenceServerClient(gw.http)
        assert http.is_server_live() and http.is_server_ready()  # probes stay open
        with pytest.raises(InferenceServerException) as refused:
            http.get_model_metadata(MODEL)
        assert refused.value.status() == "401"
        key = {"x-api-key": "oip-key"}
        meta = http.get_model_metadata(MODEL, headers=key)
        with pytest.raises(InferenceServerException) as forbidden:
            http.infer(MODEL, inputs_from_metadata(httpclient, meta, ROWS), headers={"x-api-key": "wrong"})
        assert forbidden.value.status() == "403"
        assert (
            http.infer(MODEL, inputs_from_metadata(httpclient, meta, ROWS), headers=key).as_numpy("score")
            is not None
        )
        rpc = grpcclient.InferenceServerClient(gw.grpc)
        with pytest.raises(InferenceServerException) as unauthenticated:
            rpc.infer(MODEL, inputs_from_metadata(grpcclient, meta, ROWS))
        assert unauthenticated.value.status() == "StatusCode.UNAUTHENTICATED"
        bearer = {"authorization": "Bearer oip-key"}
        assert (
            rpc.infer(MODEL, inputs_from_metadata(grpcclient, meta, ROWS), headers=bearer).as_numpy("label")
            is not None
        )


def _perf_analyzer() -> tuple[str, dict[str, str]] | str:
    """The binary and its environment, or why there is none."""
    binary = os.environ.get("PERF_ANALYZER") or shutil.which("perf_analyzer")
    local = PERF_ANALYZER_DIR / "perf_analyzer"
    if binary is None and local.exists():
        binary = str(local)
    if binary is None:
        return (
            "perf_analyzer not found ($PERF_ANALYZER, PATH, .runtime/perf-analyzer/): it ships only in the "
            "tritonclient==2.41.0 wheel (bin/perf_analyzer) and needs libb64-0d and a libcudart.so.12 "
            "(docs/gateway.md, 'Open Inference Protocol')"
        )
    lib = PERF_ANALYZER_DIR / "lib"
    env = {**os.environ, "LD_LIBRARY_PATH": f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    return binary, env


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_drives_the_gateway_without_errors(
    gateway: servers.Gateway, tmp_path: Path, protocol: str
):
    found = _perf_analyzer()
    if isinstance(found, str):
        pytest.skip(found)
    binary, env = found
    data = tmp_path / "rows.json"
    # each row as perf_analyzer reads it: one [1] tensor per input, numbers of its datatype
    meta = httpclient.InferenceServerClient(gateway.http).get_model_metadata(MODEL)
    types = {t["name"]: t["datatype"] for t in meta["inputs"]}
    cast = {name: float if datatype.startswith("FP") else (lambda v: v) for name, datatype in types.items()}
    data.write_text(json.dumps({"data": [{k: [cast[k](row[k])] for k in types} for row in ROWS]}))
    url = gateway.http if protocol == "http" else gateway.grpc
    argv = [
        binary,
        "-m",
        MODEL,
        "-u",
        url,
        "-i",
        protocol,
        "--input-data",
        str(data),
        "--concurrency-range",
        "2",
        "--measurement-interval",
        "2000",
        "--max-trials",
        "4",
        "--stability-percentage",
        "100",
    ]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    print(run.stdout)  # the latency and throughput table, with -s
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Throughput:" in run.stdout and "error" not in run.stdout.lower(), run.stdout


def _spec(kind: str, classes: tuple[Any, ...] | None, roles: Any, **extra: Any) -> Any:
    from gateway.catalog import Column, ModelSpec

    return ModelSpec(
        name="m",
        triton_model="m",
        version="2",
        layout="columns",
        input_name="",
        columns=(Column("x", "float32"),),
        feature_service="fs",
        entity_keys=(Column("k", "string"),),
        request_fields=("x",),
        kind=kind,  # type: ignore[arg-type]
        classes=classes,
        roles=roles,
        outputs=(),
        **extra,
    )


def test_the_other_kinds_answer_their_tensors_through_tritonclient():
    """The kinds the served stack does not have (string classes, regression targets, outliers,
    classifiers without probabilities), from a PredictResult to what tritonclient reads."""
    from tritonclient.grpc import service_pb2
    from tritonclient.grpc._infer_result import InferResult

    from gateway.catalog import OutlierScore, OutputRoles
    from gateway.grpc.oip import infer_response
    from gateway.oip import mapping
    from gateway.responses import Prediction, PredictResult

    cases = [
        (
            _spec("multiclass", ("a", "b", "c"), OutputRoles(label="l", probabilities="p")),
            [Prediction(False, label="b", probabilities=(0.1, 0.8, 0.1))],
            {"label": [[b"b"]], "probabilities": [[0.1, 0.8, 0.1]], "defaults_used": [[False]]},
        ),
        (
            _spec("regression", None, OutputRoles(value="v"), targets=2),
            [Prediction(True, values=(1.0, 2.0))],
            {"value": [[1.0, 2.0]], "defaults_used": [[True]]},
        ),
        (
            _spec(
                "outlier", None, OutputRoles(score="s"), outlier_score=OutlierScore("decision_function", 0.0)
            ),
            [Prediction(False, score=-0.3, label=-1, outlier=True)],
            {"label": [[-1]], "score": [[-0.3]], "outlier": [[True]], "defaults_used": [[False]]},
        ),
        (
            _spec("binary", (0, 1), OutputRoles(label="l", scores="s")),
            [Prediction(False, label=1, scores=(0.7,))],
            {"label": [[1]], "scores": [[0.7]], "defaults_used": [[False]]},
        ),
    ]
    for spec, predictions, expected in cases:
        assert [t.name for t in mapping.outputs(spec)] == list(expected)
        result = PredictResult("m", "2", spec.kind, spec.classes, predictions, 1.0, id="abc")
        answer = InferResult(infer_response(service_pb2.ModelInferRequest(), mapping.outputs(spec), result))
        assert {name: answer.as_numpy(name).tolist() for name in expected} == expected, spec.kind
        assert [t.datatype for t in mapping.inputs(spec)] == ["BYTES", "FP32"]
