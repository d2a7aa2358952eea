"""Reason codes in the gateway's core, with stand-ins for Feast and Triton that record every call:
asked only when a request says ``explain``, the explainer called concurrently with the model,
top-k by |contribution| with the values the model saw, and a request's bad ``explain`` or a
failing explainer kept to the requests that asked."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.core import Predictor
from gateway.errors import GatewayError, InvalidInput, NoExplainer
from gateway.explain import MAX_EXPLAIN
from gateway.http import v1 as http_v1
from gateway.request import PredictRequest, Row
from gateway.settings import GatewaySettings, nest
from tests.gateway.core.helpers import ExplainTriton, SegmentFeatures


def request(*rows: tuple[str, float, str], explain: Any = None) -> PredictRequest:
    fields = tuple(Row({"customer_id": c, "amount": a, "channel": ch}) for c, a, ch in rows)
    return PredictRequest("m", fields, explain)


def serve(triton: ExplainTriton, *requests: PredictRequest, missing: str = "reject") -> list[Any]:
    """Every request at once, as concurrent clients send them (one batch in flight: they merge)."""
    settings = GatewaySettings(**nest({"batch_in_flight": 1, "missing_entities": missing}))
    predictor = Predictor(settings, triton, SegmentFeatures())  # type: ignore[arg-type]

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(predictor.predict(r) for r in requests), return_exceptions=True))

    return asyncio.run(main())


def test_requests_without_explain_make_no_explainer_call_and_carry_no_explanation():
    triton = ExplainTriton()
    results = serve(triton, request(("C-1", 3.0, "web")), request(("C-2", 4.0, "app")))
    assert [model for model, _ in triton.calls] == ["m"]  # one merged call, the explainer never
    assert all(p.explanation is None for r in results for p in r.predictions)
    assert all("explanation" not in row for r in results for row in r.to_dict()["predictions"])


def test_the_explainer_is_called_with_the_model_concurrently_and_only_for_the_rows_that_asked():
    triton = ExplainTriton()
    plain, asked = serve(
        triton,
        request(("C-1", 3.0, "web"), ("C-2", 5.0, "web")),
        request(("C-3", 2.0, "app"), explain=2),
    )
    assert sorted(triton.calls) == [("m", 3), ("m_explain", 1)]  # the explainer: the asking row only
    assert triton.events[:2] == ["start m", "start m_explain"] or triton.events[:2] == [
        "start m_explain",
        "start m",
    ]  # both sent before either answered: concurrent, not one after the other
    assert all(p.explanation is None for p in plain.predictions)
    (prediction,) = asked.predictions
    explanation = prediction.explanation
    # contributions amount 2.0, channel -0.5 (not web), segment -0.25; top 2 by |contribution|
    assert [(r.column, r.value, r.contribution) for r in explanation.reasons] == [
        ("amount", 2.0, 2.0),
        ("channel", "app", -0.5),
    ]
    assert explanation.base_value == 1.0 and explanation.raw_score == 1.0 + 2.0 - 0.5 - 0.25
    assert explanation.explains == "prediction" and explanation.units == "raw"
    body = json.loads(json.dumps(asked.to_dict()))
    assert body["predictions"][0]["explanation"]["reasons"][1] == {
        "column": "channel",
        "value": "app",
        "contribution": -0.5,
    }


def test_k_at_or_above_the_column_count_returns_every_column_and_missing_values_read_as_null():
    triton = ExplainTriton()
    (result,) = serve(triton, request(("C-missing", 0.1, "web"), explain=MAX_EXPLAIN), missing="default")
    (prediction,) = result.predictions
    reasons = prediction.explanation.reasons
    assert [r.column for r in reasons] == ["channel", "segment", "amount"]  # |0.5| > |-0.25| > |0.1|
    assert {r.column: r.value for r in reasons} == {"channel": "web", "segment": None, "amount": 0.1}
    assert prediction.explanation.base_value + sum(r.contribution for r in reasons) == pytest.approx(
        prediction.explanation.raw_score, abs=1e-12
    )


@pytest.mark.parametrize("bad", [-1, 0, MAX_EXPLAIN + 1, 10**30, 2.5, 3.0, "3", True, False])
def test_a_bad_explain_fails_only_its_own_request_naming_the_field(bad: Any):
    triton = ExplainTriton()
    good, refused, other = serve(
        triton,
        request(("C-1", 3.0, "web"), explain=1),
        request(("C-2", 4.0, "web"), explain=bad),
        request(("C-3", 5.0, "app")),
    )
    assert isinstance(refused, InvalidInput) and refused.http_status == 422 and refused.field == "explain"
    assert "explain must be" in refused.message
    assert [p.value for p in good.predictions] == [3.0] and good.predictions[0].explanation is not None
    assert [p.value for p in other.predictions] == [5.0] and other.predictions[0].explanation is None


def test_a_model_without_an_explainer_names_itself_and_the_export_flag():
    triton = ExplainTriton(explainer=False)
    refused, served = serve(triton, request(("C-1", 3.0, "web"), explain=3), request(("C-2", 4.0, "web")))
    assert isinstance(refused, NoExplainer) and refused.http_status == 422 and refused.field == "explain"
    assert "'m'" in refused.message and "builder export --explain" in refused.message
    assert [p.value for p in served.predictions] == [4.0]
    assert [model for model, _ in triton.calls] == ["m"]


def test_a_failing_explainer_fails_the_requests_that_asked_and_no_other():
    triton = ExplainTriton(explainer_fails=True)
    asked, plain = serve(triton, request(("C-1", 3.0, "web"), explain=2), request(("C-2", 4.0, "web")))
    assert isinstance(asked, GatewayError) and "m_explain" in asked.message
    assert [p.value for p in plain.predictions] == [4.0]


@pytest.mark.parametrize(
    ("body", "explain"),
    [
        (b'{"rows": [{"customer_id": "C-1"}], "explain": 3}', 3),
        (b'{"customer_id": "C-1", "explain": 3}', 3),  # one row: the option, not a field
        (b'{"rows": [{"customer_id": "C-1"}], "explain": "3"}', "3"),  # the core refuses it
        (b'{"rows": [{"customer_id": "C-1"}]}', None),
        (b'{"rows": [{"customer_id": "C-1"}], "explain": null}', None),
    ],
)
def test_http_bodies_carry_explain_as_sent(body: bytes, explain: Any):
    parsed = http_v1.parse_request("m", body)
    assert parsed.explain == explain and parsed.rows == (Row({"customer_id": "C-1"}),)


@pytest.mark.parametrize("body", [b'{"rows": [], "explain": [3]}', b'{"rows": [], "explain": {"k": 3}}'])
def test_http_explain_that_is_no_scalar_is_a_422_naming_it(body: bytes):
    with pytest.raises(InvalidInput) as caught:
        http_v1.parse_request("m", body)
    assert caught.value.field == "explain"


def test_grpc_explain_of_another_wire_type_is_refused_naming_the_field():
    from gateway.grpc import v1 as grpc_v1
    from gateway.proto import gateway_pb2

    raw = gateway_pb2.PredictRequest(model="m").SerializeToString()
    as_double = gateway_pb2.PredictRequest.FromString(raw + bytes([3 << 3 | 1]) + b"\x00" * 8)
    with pytest.raises(InvalidInput) as caught:
        grpc_v1.parse_request(as_double)
    assert caught.value.field == "explain"
    assert grpc_v1.parse_request(gateway_pb2.PredictRequest(model="m", explain=0)).explain == 0
    assert grpc_v1.parse_request(gateway_pb2.PredictRequest(model="m")).explain is None


def test_the_checked_in_grpc_code_is_what_grpc_tools_generates_from_the_proto(tmp_path: Any):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    # in its own process: grpc_tools' protoc (C++ protobuf) beside this process's loaded protobuf
    # modules crashed the test worker with a segmentation fault
    args = ["-m", "grpc_tools.protoc", f"-I{root}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}"]
    args += [f"--grpc_python_out={tmp_path}", str(root / "gateway/proto/gateway.proto")]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in ("gateway_pb2.py", "gateway_pb2.pyi", "gateway_pb2_grpc.py"):
        generated = (tmp_path / "gateway/proto" / name).read_text()
        assert generated == (root / "gateway/proto" / name).read_text(), f"regenerate {name}"
