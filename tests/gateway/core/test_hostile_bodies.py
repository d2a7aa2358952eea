"""Hostile request bodies without servers: each is a 4xx from the error tree (never an exception
the transport turns into a 500), and every error body encodes."""

from __future__ import annotations

import json

import pytest

from gateway.errors import BadRequest, GatewayError, InvalidInput
from gateway.grpc import handling as grpc_handling
from gateway.http import handling as http_handling
from gateway.http import v1 as http_v1
from gateway.proto import gateway_pb2

# body -> the error it must be (each once escaped parse_request as a 500, or would reach Feast or
# Triton with a value neither can take)
HOSTILE: dict[str, tuple[bytes, type[GatewayError]]] = {
    "deep nesting": (b"[" * 10_000 + b"]" * 10_000, BadRequest),
    "deep nesting in a field": (b'{"amount": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", BadRequest),
    "a 5,000-digit integer": (b'{"user_id": ' + b"9" * 5_000 + b"}", BadRequest),
    "1e1000 as an integer": (b'{"amount": -1' + b"0" * 1000 + b"}", BadRequest),
    "duplicate keys": (b'{"user_id": 1, "user_id": 2}', BadRequest),
    "invalid UTF-8": (b'{"channel": "\xff\xfe"}', BadRequest),
    "a surrogate encoded in the bytes": (b'{"channel": "\xed\xa0\x80"}', BadRequest),
    "a lone surrogate in a key": (b'{"\\ud800": 1}', InvalidInput),
    "a lone surrogate in a value": (b'{"channel": "\\udfff"}', InvalidInput),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_bodies_are_client_errors_whose_bodies_encode(name: str):
    body, expected = HOSTILE[name]
    with pytest.raises(GatewayError) as caught:
        http_v1.parse_request("fraud-detector", body)
    assert type(caught.value) is expected, caught.value.message
    status, encoded, _ = http_handling.error_body(caught.value)
    assert 400 <= status < 500
    assert json.loads(encoded)["error"]


def test_what_is_valid_still_parses():
    text = "caf\u00e9 \U0001f600"
    body = {"rows": [{"user_id": 2**63 - 1, "channel": text, "amount": 1e3, "big": 10**999}]}
    request = http_v1.parse_request("m", json.dumps(body, ensure_ascii=False).encode())
    assert request.rows[0].fields == body["rows"][0]
    # a surrogate pair escaped in JSON is one valid character, not a lone surrogate
    pair = http_v1.parse_request("m", b'{"channel": "\\ud83d\\ude00"}')
    assert pair.rows[0].fields["channel"] == "\U0001f600"


def test_an_error_naming_a_lone_surrogate_encodes_as_its_json_escape():
    exc = InvalidInput("unknown field", field="rows[0].\ud800")
    _, encoded, _ = http_handling.error_body(exc)
    assert json.loads(encoded)["field"] == "rows[0].\ud800"


@pytest.mark.parametrize("raw", [b"\xff" * 64, b"\x0a\x05ab", b"\x12\x03\x0a\x01\xff", b"garbage!"])
def test_grpc_bytes_that_do_not_decode_are_invalid_argument(raw: bytes):
    with pytest.raises(BadRequest) as caught:
        grpc_handling.decode(gateway_pb2.PredictRequest, raw)
    assert caught.value.grpc_code.name == "INVALID_ARGUMENT"
