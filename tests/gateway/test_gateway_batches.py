"""Batches and failures on the real stack: the demo training exported a second time with
``max_batch_size=8``, loaded on the running Triton, served by the session's `gateway serve`
(GATEWAY_MAX_BATCH_ROWS=16, so a request may carry twice what one Triton call takes).

Triton refuses a call of more rows than ``max_batch_size``; a user must never see that: every
valid request answers 200 with the native model's scores, however many arrive together. And a
request the gateway must refuse fails alone, whatever it was merged with (on the demo model
itself, whose max_batch_size of 64 the merged requests stay under: only the hostile one is at
stake).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import requests

from builder.export import ExportRequest, export_model
from builder.repository.triton_config import ServingOptions
from support import servers
from tests.gateway.helpers import MODEL, Stack, expected_scores, online_complete

pytestmark = pytest.mark.integration

SMALL = "fraud-detector-mbs8"
MAX_BATCH_SIZE = 8
CHANNELS = ("web", "app", "pos")


@pytest.fixture(scope="module")
def small_model(stack: Stack) -> Iterator[str]:
    """The same registered model, exported with max_batch_size 8 and loaded on the running Triton."""
    import tritonclient.http as httpclient

    export_model(
        ExportRequest(
            f"models:/{MODEL}@champion",
            stack.model_repo,
            name=SMALL,
            serving=ServingOptions(max_batch_size=MAX_BATCH_SIZE),
        )
    )
    client = httpclient.InferenceServerClient(stack.triton.http_url)
    client.load_model(SMALL)
    assert client.get_model_config(SMALL)["max_batch_size"] == MAX_BATCH_SIZE
    try:
        yield SMALL
    finally:
        client.unload_model(SMALL)
        client.close()


@pytest.fixture(scope="module")
def rows(stack: Stack) -> list[dict[str, Any]]:
    """Valid rows whose entities all have online features (so each answers 200, not 404)."""
    candidates = [
        {
            "user_id": u,
            "merchant_id": (u * 7) % 50,
            "amount": 5.0 + u,
            "hour": u % 24,
            "channel": CHANNELS[u % 3],
        }
        for u in range(1, 120)
    ]
    found = [r for r in candidates if online_complete(stack, r)]
    assert len(found) >= 64, "the demo data has fewer complete entities than the test needs"
    return found[:64]


def post(gw: servers.Gateway, model: str, body: Any) -> requests.Response:
    return requests.post(f"{gw.url}/v1/models/{model}/predict", json=body, timeout=30)


def scores(response: requests.Response) -> list[float]:
    assert response.status_code == 200, response.text
    return [p["score"] for p in response.json()["predictions"]]


def test_concurrent_requests_summing_past_max_batch_size_all_answer_the_native_scores(
    stack: Stack, gateway: servers.Gateway, small_model: str, rows: list[dict[str, Any]]
):
    # 16 clients, 4 rounds each, of 4-row requests: merged, they are far past 8 rows a call
    bodies = [{"rows": rows[(4 * i) % 64 : (4 * i) % 64 + 4]} for i in range(64)]
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda b: post(gateway, small_model, b), bodies))
    statuses = [r.status_code for r in responses]
    assert statuses == [200] * len(bodies), [r.text for r in responses if r.status_code != 200][:3]
    native = expected_scores(stack, rows)
    for body, response in zip(bodies, responses, strict=True):
        first = rows.index(body["rows"][0])
        np.testing.assert_allclose(scores(response), native[first : first + 4], atol=1e-5)


def test_one_request_of_more_rows_than_max_batch_size_answers_in_order(
    stack: Stack, gateway: servers.Gateway, small_model: str, rows: list[dict[str, Any]]
):
    body = rows[:13]  # within the gateway's 16, past the model's 8: two Triton calls
    np.testing.assert_allclose(
        scores(post(gateway, small_model, {"rows": body})), expected_scores(stack, body), atol=1e-5
    )


@pytest.mark.parametrize(
    "hostile, field",
    [
        ({"user_id": 2**63}, "rows[0].user_id"),  # past int64: Feast cannot encode the key
        ({"channel": "w\ud800b"}, "rows[0].channel"),  # a lone surrogate: no UTF-8 for Triton
    ],
)
def test_a_hostile_request_merged_with_valid_ones_fails_alone_with_a_422_naming_the_field(
    stack: Stack,
    gateway: servers.Gateway,
    rows: list[dict[str, Any]],
    hostile: dict[str, Any],
    field: str,
):
    bad = {**rows[0], **hostile}
    bodies = [{"rows": [bad]} if i % 4 == 0 else {"rows": rows[i % 64 : i % 64 + 2]} for i in range(48)]
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda b: post(gateway, MODEL, b), bodies))
    hostile_answers = {(r.status_code, r.json().get("field")) for r in responses[::4]}
    neighbours = [(i, r) for i, r in enumerate(responses) if i % 4]
    failed = [r.text for _, r in neighbours if r.status_code != 200]
    assert hostile_answers == {(422, field)} and not failed, (hostile_answers, len(failed), failed[:2])
    native = expected_scores(stack, rows)
    for i, response in neighbours:
        np.testing.assert_allclose(scores(response), native[i % 64 : i % 64 + 2], atol=1e-5)
