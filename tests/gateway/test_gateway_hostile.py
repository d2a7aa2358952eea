"""Hostile clients against the real `gateway serve`: bodies that once were 500s, gRPC bytes that
once were UNKNOWN, idle connections once held forever. Each answer is a 4xx (or its gRPC
status), and the gateway keeps serving."""

from __future__ import annotations

import json
import random
import socket

import grpc
import pytest
import requests

from gateway.proto import gateway_pb2
from support import servers
from tests.gateway.helpers import MODEL, ROWS, Stack, gateway_env, predict

pytestmark = pytest.mark.integration

ROW = json.dumps(ROWS[0]).encode()  # {"user_id": 17, ...}


def _with(field: bytes) -> bytes:
    """ROWS[0] with one more raw JSON member, spliced in as bytes."""
    return ROW[:-1] + b", " + field + b"}"


HOSTILE: dict[str, tuple[bytes, int]] = {
    "arrays nested 10,000 deep": (b"[" * 10_000 + b"]" * 10_000, 400),
    "objects nested 10,000 deep": (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, 400),
    "a 5,000-digit user_id": (ROW.replace(b"17", b"9" * 5_000, 1), 400),
    "amount 1e400 as an integer": (ROW.replace(b"42.5", b"1" + b"0" * 400), 422),
    "user_id beyond int64": (ROW.replace(b"17", b"9" * 30, 1), 422),
    "a lone surrogate in a key": (_with(b'"\\ud800": 1'), 422),
    "a lone surrogate in a value": (ROW.replace(b'"web"', b'"\\udc00web"'), 422),
    "invalid UTF-8": (ROW.replace(b'"web"', b'"\xff\xfe"'), 400),
    "NaN": (ROW.replace(b"42.5", b"NaN"), 422),
    "Infinity": (ROW.replace(b"42.5", b"-Infinity"), 422),
    "duplicate keys": (_with(b'"amount": 1.0'), 400),
    "rows: 20,000 numbers": (b'{"rows": [' + b",".join([b"0"] * 20_000) + b"]}", 422),
    "rows: 400 rows, within the body limit": (b'{"rows": [' + b",".join([ROW] * 400) + b"]}", 413),
    "a field of 20,000 numbers": (_with(b'"extra": [' + b",".join([b"1"] * 20_000) + b"]"), 422),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_http_bodies_are_4xx_with_a_json_error(gateway: servers.Gateway, name: str):
    body, status = HOSTILE[name]
    assert len(body) <= 65536, "the matrix stays within the gateway's body limit"
    resp = requests.post(
        f"{gateway.url}/v1/models/{MODEL}/predict",
        data=body,
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]  # the error body encodes, whatever the request held
    assert predict(gateway, {"rows": ROWS}).status_code == 200, "the gateway stopped serving"


FEEDBACK_HOSTILE: dict[str, tuple[bytes, int, str]] = {  # body, status, the first label's outcome
    "a label of 10**999 (valid JSON, past float's range)": (b'"label": 1' + b"0" * 999, 200, "invalid"),
    "a label of -10**999": (b'"label": -1' + b"0" * 999, 200, "invalid"),
    "a label of 1e999 (infinite as a float)": (b'"label": 1e999', 200, "invalid"),
    "a label that is an object": (b'"label": {"a": 1}', 422, ""),
    "a label nested 10,000 deep": (b'"label": ' + b"[" * 10_000 + b"]" * 10_000, 400, ""),
}


@pytest.mark.parametrize("name", list(FEEDBACK_HOSTILE))
def test_hostile_labels_are_an_outcome_or_a_4xx_never_a_500(gateway: servers.Gateway, name: str):
    label, status, outcome = FEEDBACK_HOSTILE[name]
    body = (
        b'{"labels": [{"id": "0123456789abcdef0123456789abcdef-0", '
        + label
        + b'}, {"id": "x-1", "label": 1}]}'
    )
    resp = requests.post(
        f"{gateway.url}/v1/models/{MODEL}/feedback",
        data=body,
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert resp.status_code == status, resp.text
    if outcome:  # one item's bad label is its own outcome: the other item is judged as usual
        assert resp.json()["errors"][0]["outcome"] == outcome and resp.json()["unknown"] == 1
    else:
        assert resp.json()["error"]
    assert predict(gateway, {"rows": ROWS}).status_code == 200, "the gateway stopped serving"


def _grpc_hostile() -> list[bytes]:
    row_with_bad_key = b"\x0a\x03\x0a\x01\xff"  # Row{fields{key: b"\xff"}}: not UTF-8
    fixed = [
        b"\xff" * 64,  # a varint that never ends
        b"\x0a\x05ab",  # model: 5 bytes announced, 2 sent
        b"\x0a\x02\xff\xfe",  # model: not UTF-8
        b"\x12\x05" + row_with_bad_key,
        b"\x7b" * 200,  # groups nested 200 deep (protobuf's limit is 100)
    ]
    rng = random.Random(10)
    return fixed + [rng.randbytes(rng.randint(1, 256)) for _ in range(150)]


def test_grpc_bytes_that_are_no_predict_request_are_invalid_argument(gateway: servers.Gateway):
    with grpc.insecure_channel(gateway.grpc) as channel:
        call = channel.unary_unary("/gateway.v1.Gateway/Predict")  # identity serializers: raw bytes
        codes = []
        for raw in _grpc_hostile():
            try:
                call(raw, timeout=10)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as err:
                codes.append(err.code())
        # the fixed ones cannot decode; a random one may (as unknown fields: no model, a 404)
        assert set(codes[:5]) == {grpc.StatusCode.INVALID_ARGUMENT}, codes[:5]
        assert not {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL} & set(codes), codes
        good = gateway_pb2.PredictRequest(
            model=MODEL,
            rows=[
                gateway_pb2.Row(
                    fields={
                        "user_id": gateway_pb2.Value(int_value=17),
                        "merchant_id": gateway_pb2.Value(int_value=3),
                        "amount": gateway_pb2.Value(double_value=42.5),
                        "hour": gateway_pb2.Value(int_value=13),
                        "channel": gateway_pb2.Value(string_value="web"),
                    }
                )
            ],
        )
        reply = gateway_pb2.PredictResponse.FromString(call(good.SerializeToString(), timeout=10))
        assert reply.model == MODEL and len(reply.predictions) == 1


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (EOF) within ``seconds``; what it sent is drained."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_idle_connections_are_closed_and_metrics_can_require_the_key(stack: Stack, tmp_path):
    env = gateway_env(
        stack, GATEWAY_IDLE_TIMEOUT_S="1", GATEWAY_API_KEYS="k-1", GATEWAY_METRICS_REQUIRE_KEY="true"
    )
    with servers.gateway_process(tmp_path, env, wait_ready=False) as gw:
        host, http_port = gw.http.split(":")
        _, grpc_port = gw.grpc.split(":")
        # never sends a byte: HTTP, and gRPC (no HTTP/2 preface)
        with socket.create_connection((host, int(http_port))) as silent:
            assert _closed_within(silent, 5), "an HTTP connection that sent nothing stayed open"
        with socket.create_connection((host, int(grpc_port))) as silent:
            assert _closed_within(silent, 5), "a gRPC connection that sent nothing stayed open"
        # half a request head, then silence
        with socket.create_connection((host, int(http_port))) as stalled:
            stalled.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            assert _closed_within(stalled, 5), "a connection stalled in its headers stayed open"
        # keep-alive after an answer
        with socket.create_connection((host, int(http_port))) as kept:
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            kept.settimeout(5)
            assert kept.recv(65536).startswith(b"HTTP/1.1 200")
            assert _closed_within(kept, 5), "an idle keep-alive connection stayed open"
        # a connection in use is not cut
        with requests.Session() as session:
            for _ in range(3):
                assert session.get(f"{gw.url}/healthz", timeout=5).status_code == 200
        assert requests.get(f"{gw.url}/metrics", timeout=5).status_code == 401
        scraped = requests.get(f"{gw.url}/metrics", headers={"X-API-Key": "k-1"}, timeout=5)
        assert scraped.status_code == 200 and "gateway_" in scraped.text
