"""Each Locust user smoke-runs with ``locust.run_single_user`` against a real target.

In a subprocess (``smoke_user.py``): Locust would monkey-patch this pytest process with gevent.
Triton users run against the real embedded Triton serving a freshly exported model; the
gateway user against the real gateway, in tests/gateway/test_gateway_release_gate.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loadtests.helpers import Served, smoke_user

pytestmark = pytest.mark.integration


def assert_all_succeeded(result: dict[str, object], type_: str, name: str) -> None:
    assert result["finished"], result
    requests = result["requests"]
    assert isinstance(requests, list) and requests
    for request in requests:
        assert request["exception"] is None, request
        assert (request["type"], request["name"]) == (type_, name)
        assert request["response_time"] > 0 and request["response_length"] > 0


def model_of(served: Served, layout: str) -> str:
    return served.model if layout == "matrix" else served.typed_model


@pytest.mark.parametrize("layout", ["matrix", "columns"])
@pytest.mark.parametrize("source", ["repo", "server"])
def test_triton_http_user(served: Served, tmp_path: Path, source: str, layout: str) -> None:
    # "repo": the exported input example; "server": no local repository, signature from /v2/models.
    # "columns": one typed input per column, strings sent as BYTES (JSON strings).
    repo = str(served.repo) if source == "repo" else str(tmp_path / "no-repo")
    model = model_of(served, layout)
    result = smoke_user(
        "TritonHttpUser",
        ["--host", served.http_url, "--model", model, "--model-repo", repo, "--rows-per-request", "2"],
        tmp_path,
    )
    assert_all_succeeded(result, "POST", "infer")


@pytest.mark.parametrize("layout", ["matrix", "columns"])
@pytest.mark.parametrize("source", ["repo", "server"])
def test_triton_grpc_user(served: Served, tmp_path: Path, source: str, layout: str) -> None:
    repo = str(served.repo) if source == "repo" else str(tmp_path / "no-repo")
    model = model_of(served, layout)
    result = smoke_user(
        "TritonGrpcUser",
        ["--host", served.grpc_url, "--model", model, "--model-repo", repo, "--rows-per-request", "2"],
        tmp_path,
    )
    assert_all_succeeded(result, "grpc", "infer")


def test_refused_requests_are_failures_with_the_reason(served: Served, tmp_path: Path) -> None:
    """100 rows exceed the exported max_batch_size of 64: Triton answers 400, recorded as failed."""
    result = smoke_user(
        "TritonHttpUser",
        [
            "--host",
            served.http_url,
            "--model",
            served.model,
            "--model-repo",
            str(served.repo),
            "--rows-per-request",
            "100",
        ],
        tmp_path,
        requests=2,
    )
    requests = result["requests"]
    assert requests, result
    for request in requests:
        assert request["exception"] and "HTTP 400" in request["exception"], request


def test_a_user_that_cannot_build_inputs_stops_cleanly(served: Served, tmp_path: Path) -> None:
    """Unknown model, no local repo: the gRPC user stops (its channel closed) instead of hanging."""
    result = smoke_user(
        "TritonGrpcUser",
        ["--host", served.grpc_url, "--model", "no-such-model", "--model-repo", str(tmp_path)],
        tmp_path,
        timeout=30,
    )
    assert result == {"finished": False, "requests": [], "user_exception": None}
