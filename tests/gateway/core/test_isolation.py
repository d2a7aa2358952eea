"""Batches the model takes, and failures kept to the request that caused them: the gateway's
core with stand-ins for Feast and Triton that behave as the real ones do at their edges (Triton
refuses a call of more rows than ``max_batch_size``; Feast raises ValueError on a key it cannot
encode)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gateway.batching import join_rows, split_rows
from gateway.catalog import spec_from_config
from gateway.clients.features import FeatureRows, OnlineFeatures
from gateway.core import Predictor
from gateway.errors import GatewayError, InvalidInput, RefusedByStore, SpecError, Unavailable
from gateway.request import PredictRequest, Row
from gateway.settings import GatewaySettings, nest

COLUMNS = [
    {"name": "amount", "dtype": "float32"},
    {"name": "channel", "dtype": "string"},
    {"name": "segment", "dtype": "string"},
]
TRITON = {"float32": "TYPE_FP32", "string": "TYPE_STRING"}


def config(max_batch_size: int | None) -> dict:
    """A Triton model config as tritonclient's ``as_json`` gives it (a zero is omitted)."""
    params = {
        "feast.feature_service": "svc",
        "feast.entity_keys": "customer_id",
        "feast.request_fields": '["amount", "channel"]',
        "serving.layout": "columns",
        "serving.columns": json.dumps(COLUMNS),
        "serving.kind": "regression",
        "serving.outputs": json.dumps({"value": "value"}),
    }
    cfg: dict[str, Any] = {
        "name": "m",
        "input": [{"name": c["name"], "data_type": TRITON[c["dtype"]], "dims": ["1"]} for c in COLUMNS],
        "output": [{"name": "value"}],
        "parameters": {k: {"string_value": v} for k, v in params.items()},
    }
    if max_batch_size is not None:
        cfg["max_batch_size"] = max_batch_size
    return cfg


class FakeTriton:
    """Scores a row as its ``amount``; refuses what the real Triton refuses, and ``boom`` rows."""

    def __init__(self, max_batch_size: int, failure: GatewayError | None = None) -> None:
        self.cfg = config(max_batch_size)
        self.max_batch_size = max_batch_size
        self.failure = failure
        self.calls: list[int] = []  # rows per call

    async def model_ready_version(self, model: str) -> str | None:
        return "1"

    async def ready_versions(self, model: str) -> list[str]:
        return ["1"]

    async def model_config(self, model: str) -> dict:
        return self.cfg

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict, str]:
        n = len(inputs["amount"])
        self.calls.append(n)
        await asyncio.sleep(0)  # a real call yields to the loop
        if 0 < self.max_batch_size < n:
            raise GatewayError(f"Triton failed inference: batch-size must be <= {self.max_batch_size}")
        if self.failure is not None:
            raise self.failure
        if "boom" in inputs["channel"][:, 0].tolist():  # a value this model's graph cannot take
            raise GatewayError("Triton failed inference: unknown category 'boom'")
        return {"value": inputs["amount"].astype(np.float32)}, "1"  # and the version that ran


class FakeFeatures:
    """Every customer has a segment; a ``BAD`` key makes the read raise, as Feast does."""

    def __init__(self) -> None:
        self.reads: list[int] = []  # rows per read

    async def key_types(self, service: str) -> dict[str, str]:
        return {"customer_id": "string"}

    async def fetch(self, service: str, entity_rows: list[dict[str, Any]]) -> FeatureRows:
        self.reads.append(len(entity_rows))
        if any(r["customer_id"] == "BAD" for r in entity_rows):
            raise RefusedByStore("the online store refused these entity keys (ValueError: ...)", field="rows")
        n = len(entity_rows)
        return FeatureRows({"segment": ["gold"] * n}, [[] for _ in range(n)], [None] * n)


def request(*rows: tuple[str, float, str]) -> PredictRequest:
    return PredictRequest(
        "m", tuple(Row({"customer_id": c, "amount": a, "channel": ch}) for c, a, ch in rows)
    )


def rows(n: int, start: float = 0.0) -> list[tuple[str, float, str]]:
    return [(f"C-{i}", start + i, "web") for i in range(n)]


def serve(
    triton: FakeTriton, features: FakeFeatures, *requests: PredictRequest, max_rows: int = 256
) -> list[Any]:
    """Every request at once, as concurrent clients send them (one batch in flight, so they merge)."""
    settings = GatewaySettings(**nest({"batch_in_flight": 1, "max_batch_rows": max_rows}))
    predictor = Predictor(settings, triton, features)  # type: ignore[arg-type]

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(predictor.predict(r) for r in requests), return_exceptions=True))

    return asyncio.run(main())


def values(result: Any) -> list[float]:
    assert not isinstance(result, BaseException), result
    return [p.value for p in result.predictions]


# -- the model's batch size --------------------------------------------------------------------


def test_max_batch_size_is_read_from_the_config_and_absent_means_zero():
    def spec(cfg: dict) -> Any:
        return spec_from_config("m", "m", "1", cfg, {"customer_id": "string"})

    assert spec(config(8)).max_batch_size == 8
    assert spec(config(None)).max_batch_size == 0  # proto3 JSON leaves out max_batch_size: 0
    with pytest.raises(SpecError, match="max_batch_size"):
        spec(config(-1))


def test_split_rows_cuts_at_the_size_and_join_rows_restores_the_order():
    arrays = {"a": np.arange(20).reshape(20, 1), "b": np.arange(40).reshape(20, 2)}
    pieces = split_rows(arrays, 8)
    assert [len(p["a"]) for p in pieces] == [8, 8, 4]
    joined = join_rows(pieces)
    assert all(np.array_equal(joined[k], arrays[k]) for k in arrays)
    assert [len(p["a"]) for p in split_rows(arrays, 0)] == [20]  # no batch axis: sent whole


def test_concurrent_requests_summing_past_max_batch_size_all_succeed_in_calls_it_takes():
    triton, features = FakeTriton(max_batch_size=8), FakeFeatures()
    requests = [request(*rows(3, start=100 * k)) for k in range(10)]
    results = serve(triton, features, *requests)
    assert [values(r) for r in results] == [[100 * k + i for i in range(3)] for k in range(10)]
    assert max(triton.calls) <= 8 and sum(triton.calls) == 30
    assert max(features.reads) > 3  # they were merged, not served one by one


def test_one_request_larger_than_max_batch_size_is_split_and_answered_in_order():
    triton, features = FakeTriton(max_batch_size=8), FakeFeatures()
    (result,) = serve(triton, features, request(*rows(20)))
    assert values(result) == list(range(20))
    assert triton.calls == [8, 8, 4] and features.reads == [20]  # one read, three calls


def test_a_model_without_a_batch_axis_takes_the_request_whole():
    triton, features = FakeTriton(max_batch_size=0), FakeFeatures()
    (result,) = serve(triton, features, request(*rows(100)))
    assert values(result) == list(range(100)) and triton.calls == [100]


def test_a_model_taking_more_than_the_gateway_reads_at_once_still_gets_bounded_batches():
    triton, features = FakeTriton(max_batch_size=1024), FakeFeatures()
    results = serve(triton, features, *(request(*rows(16)) for _ in range(12)), max_rows=16)
    assert all(values(r) == list(range(16)) for r in results)
    assert max(features.reads) == 64  # max(GATEWAY_MAX_BATCH_ROWS, 64), not the model's 1024


# -- a request's failure is its own -----------------------------------------------------------


def test_keys_the_store_refuses_fail_only_the_request_that_sent_them():
    triton, features = FakeTriton(max_batch_size=64), FakeFeatures()
    bad = request(("C-1", 1.0, "web"), ("BAD", 2.0, "web"))
    good = [request(*rows(2, start=10 * k)) for k in range(1, 4)]
    first, refused, *others = serve(triton, features, good[0], bad, *good[1:])
    assert isinstance(refused, RefusedByStore) and refused.http_status == 422 and refused.field == "rows"
    assert [values(r) for r in (first, *others)] == [[10.0, 11.0], [20.0, 21.0], [30.0, 31.0]]
    assert features.reads[0] == 8  # the merged read, then each request alone


def test_a_value_triton_refuses_fails_only_the_request_that_sent_it():
    triton, features = FakeTriton(max_batch_size=64), FakeFeatures()
    good = [request(*rows(2, start=10 * k)) for k in range(3)]
    results = serve(triton, features, good[0], request(("C-9", 9.0, "boom")), *good[1:])
    assert isinstance(results[1], GatewayError) and "boom" in results[1].message
    assert [values(r) for r in (results[0], *results[2:])] == [[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]]


def test_a_dependency_that_is_down_fails_the_batch_at_once_without_retrying_each_request():
    down = Unavailable("Triton is unreachable", cause="triton_unavailable")
    triton, features = FakeTriton(max_batch_size=64, failure=down), FakeFeatures()
    results = serve(triton, features, *(request(*rows(2)) for _ in range(4)))
    assert all(r is down for r in results)
    assert len(triton.calls) == 1 and len(features.reads) == 1


@pytest.mark.parametrize(
    "row, field",
    [
        ({"customer_id": "C-\ud800", "amount": 1.0, "channel": "web"}, "rows[0].customer_id"),
        ({"customer_id": "C-1", "amount": 1.0, "channel": "w\udfffeb"}, "rows[0].channel"),
        ({"customer_id": "C-1", "amount": 2**200, "channel": "web"}, "rows[0].amount"),
    ],
)
def test_values_no_store_or_triton_can_take_are_a_422_naming_the_field_before_any_read(
    row: dict[str, Any], field: str
):
    triton, features = FakeTriton(max_batch_size=64), FakeFeatures()
    (err,) = serve(triton, features, PredictRequest("m", (Row(row),)))
    assert isinstance(err, InvalidInput) and err.http_status == 422 and err.field == field
    assert features.reads == [] and triton.calls == []


def test_an_online_store_raising_on_the_keys_is_a_422_not_an_unreachable_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    class Store:  # Feast's SQLite store encoding an int64 key it cannot hold
        def get_feature_service(self, name: str) -> object:
            return object()

        def get_online_features(self, **kwargs: Any) -> Any:
            raise ValueError("Value out of range: 9223372036854775808")

    # in place of feast_access.store (whose Feast import alone takes seconds)
    monkeypatch.setitem(sys.modules, "feast_access.store", SimpleNamespace(open_store=lambda *a: Store()))
    features = OnlineFeatures(tmp_path, "sqlite", timeout_s=1.0)
    with pytest.raises(RefusedByStore) as err:
        asyncio.run(features.fetch("svc", [{"user_id": 2**63}]))
    assert err.value.http_status == 422 and "out of range" in err.value.message
