"""The gateway against the real stack: Feast online store, embedded Triton, `gateway serve`.

Predictions are checked against the trained model on the same features, read from the store
by the test itself; errors against the statuses a client would see.
"""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pandas as pd
import pytest
import requests

from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value
from support import servers
from tests.gateway.helpers import MODEL, ROWS, Stack, expected_scores, gateway_env, online_complete, predict

pytestmark = pytest.mark.integration


def grpc_predict(
    gw: servers.Gateway,
    rows: list[dict[str, Any]],
    model: str = MODEL,
    metadata: tuple[tuple[str, str], ...] = (),
) -> gateway_pb2.PredictResponse:
    with grpc.insecure_channel(gw.grpc) as channel:
        request = gateway_pb2.PredictRequest(
            model=model, rows=[gateway_pb2.Row(fields={k: to_value(v) for k, v in r.items()}) for r in rows]
        )
        return gateway_pb2_grpc.GatewayStub(channel).Predict(request, timeout=10, metadata=metadata)


def test_http_predictions_equal_the_model_on_the_same_features(stack: Stack, gateway: servers.Gateway):
    response = predict(gateway, {"rows": ROWS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == MODEL and body["version"] == str(stack.trained.version)
    scores = np.array([p["score"] for p in body["predictions"]])
    np.testing.assert_allclose(scores, expected_scores(stack, ROWS), atol=1e-5)
    # the gateway applies the run's threshold (0.35, recorded as serving.decision_threshold)
    assert [p["label"] for p in body["predictions"]] == [int(s >= 0.35) for s in scores]
    assert 0 <= body["feature_age_seconds"] < 3 * 24 * 3600
    assert not any(p["defaults_used"] for p in body["predictions"])


def test_single_row_body(stack: Stack, gateway: servers.Gateway):
    response = predict(gateway, ROWS[1])
    assert response.status_code == 200, response.text
    (prediction,) = response.json()["predictions"]
    assert prediction["score"] == pytest.approx(expected_scores(stack, ROWS[1:2])[0], abs=1e-5)


def test_grpc_predictions_equal_http(stack: Stack, gateway: servers.Gateway):
    reply = grpc_predict(gateway, ROWS)
    http = predict(gateway, {"rows": ROWS}).json()
    assert reply.model == MODEL and reply.model_version == str(stack.trained.version)
    assert [p.score for p in reply.predictions] == pytest.approx(
        [p["score"] for p in http["predictions"]], abs=1e-7
    )
    # every answer has its own id, each prediction {request id}-{row}, over both transports
    assert reply.id and reply.id != http["id"]
    assert [p.id for p in reply.predictions] == [f"{reply.id}-{i}" for i in range(len(ROWS))]
    assert [p["id"] for p in http["predictions"]] == [f"{http['id']}-{i}" for i in range(len(ROWS))]


@pytest.mark.parametrize(
    "body, status, field, fragment",
    [
        ({"rows": "nope"}, 422, "rows", "list"),
        ({"rows": []}, 422, "rows", "no rows"),
        (
            {"rows": [{"merchant_id": 3, "amount": 1.0, "hour": 1}]},
            422,
            "rows[0].user_id",
            "missing entity key",
        ),
        ({"rows": [{**ROWS[0], "user_id": "17"}]}, 422, "rows[0].user_id", "integer"),
        ({"rows": [{**ROWS[0], "amount": "lots"}]}, 422, "rows[0].amount", "finite number"),
        ({"rows": [ROWS[0], {**ROWS[0], "hour": None}]}, 422, "rows[1].hour", "missing request field"),
        ({"rows": [{**ROWS[0], "colour": "red"}]}, 422, "rows[0].colour", "unknown field"),
        ({"rows": [ROWS[0]], "extra": 1}, 422, "extra", "unknown top-level"),
        ({"rows": [ROWS[0]] * 17}, 413, None, "exceed the limit of 16"),
        ({"rows": [{**ROWS[0], "user_id": 999999}]}, 404, "rows[0]", "no online features for user_id=999999"),
        ([1, 2], 400, None, "JSON object"),
    ],
)
def test_bad_input_gets_a_clear_4xx(
    gateway: servers.Gateway, body: Any, status: int, field: str | None, fragment: str
):
    response = predict(gateway, body)
    assert response.status_code == status, response.text
    error = response.json()
    assert fragment in error["error"]
    assert error.get("field") == field


def test_malformed_json_unknown_model_and_oversized_body(gateway: servers.Gateway):
    bad = requests.post(f"{gateway.url}/v1/models/{MODEL}/predict", data=b"{not json", timeout=10)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    unknown = predict(gateway, {"rows": ROWS}, model="no-such-model")
    assert unknown.status_code == 404 and unknown.json()["cause"] == "unknown_model"
    huge = requests.post(f"{gateway.url}/v1/models/{MODEL}/predict", data=b" " * 70_000, timeout=10)
    assert huge.status_code == 413
    # and the gateway is still up and serving
    assert predict(gateway, {"rows": ROWS}).status_code == 200


def test_wrong_method_wrong_path_and_a_chunked_oversized_body(gateway: servers.Gateway):
    url = f"{gateway.url}/v1/models/{MODEL}/predict"
    get = requests.get(url, timeout=10)
    assert get.status_code == 405 and get.headers["Allow"] == "POST"
    assert get.json()["cause"] == "method_not_allowed"
    # A model name is one path segment; other paths are the framework's 404s.
    assert requests.post(f"{gateway.url}/v1/models/a/b/predict", json={}, timeout=10).status_code == 404
    assert requests.post(f"{gateway.url}/v1/models//predict", json={}, timeout=10).status_code == 404
    assert requests.get(f"{gateway.url}/no/such/route", timeout=10).status_code == 404

    def chunks():  # no Content-Length: the limit must hold while the body streams in
        for _ in range(20):
            yield b" " * 4096

    chunked = requests.post(url, data=chunks(), timeout=10)
    assert chunked.status_code == 413 and chunked.json()["cause"] == "too_large"
    ok = predict(gateway, {"rows": ROWS})
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/json"


def test_grpc_errors_carry_grpc_statuses(gateway: servers.Gateway):
    with pytest.raises(grpc.RpcError) as invalid:
        grpc_predict(gateway, [{"user_id": 17, "amount": 1.0, "hour": 1}])
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rows[0].merchant_id" in invalid.value.details()
    with pytest.raises(grpc.RpcError) as unknown:
        grpc_predict(gateway, ROWS, model="no-such-model")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as entity:
        grpc_predict(gateway, [{**ROWS[0], "user_id": 999999}])
    assert entity.value.code() == grpc.StatusCode.NOT_FOUND


def test_concurrent_clients_all_get_their_own_answers(stack: Stack, gateway: servers.Gateway):
    rng = np.random.default_rng(3)
    candidates = [
        {
            "user_id": int(u),
            "merchant_id": int(m),
            "amount": float(a),
            "hour": int(h),
            "channel": ("web", "app", "pos")[u % 3],
        }
        for u, m, a, h in zip(
            rng.integers(1, 501, 300),
            rng.integers(1, 101, 300),
            rng.uniform(1, 500, 300).round(2),
            rng.integers(0, 24, 300),
            strict=True,
        )
    ]
    want_all = expected_scores(stack, candidates)
    # entities the online store knows (some users have no fresh snapshot: those answer 404)
    known = [i for i, r in enumerate(candidates) if online_complete(stack, r)]
    rows, want = [candidates[i] for i in known][:160], want_all[known][:160]
    assert len(rows) >= 100
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=32))

    def one(i: int) -> float:
        r = session.post(f"{gateway.url}/v1/models/{MODEL}/predict", json=rows[i], timeout=20)
        assert r.status_code == 200, r.text
        return float(r.json()["predictions"][0]["score"])

    with ThreadPoolExecutor(max_workers=32) as pool:
        got = list(pool.map(one, range(len(rows))))
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_health_ready_and_metrics(gateway: servers.Gateway):
    assert requests.get(f"{gateway.url}/healthz", timeout=5).json() == {"status": "ok"}
    ready = requests.get(f"{gateway.url}/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["ready"] is True
    predict(gateway, {"rows": ROWS})
    predict(gateway, {"rows": [{**ROWS[0], "user_id": 999999}]})
    text = requests.get(f"{gateway.url}/metrics", timeout=5).text
    assert f'gateway_request_seconds_count{{model="{MODEL}",route="predict",status="200"}}' in text
    assert f'gateway_feature_fetch_seconds_count{{model="{MODEL}"}}' in text
    assert f'gateway_triton_seconds_count{{model="{MODEL}"}}' in text
    assert 'gateway_errors_total{cause="unknown_entity"}' in text
    assert "gateway_requests_in_flight" in text


def test_unknown_model_names_do_not_become_metric_labels(gateway: servers.Gateway):
    """Any client can send any model name: each must not grow a new time series."""
    assert predict(gateway, {"rows": ROWS}, model="made-up-http").status_code == 404
    with pytest.raises(grpc.RpcError):
        grpc_predict(gateway, ROWS, model="made-up-grpc")
    text = requests.get(f"{gateway.url}/metrics", timeout=5).text
    assert "made-up" not in text
    assert 'gateway_request_seconds_count{model="other",route="predict",status="404"}' in text
    assert 'gateway_request_seconds_count{model="other",route="grpc_predict",status="NOT_FOUND"}' in text


def test_logs_hold_no_feature_values_or_keys(stack: Stack, tmp_path):
    env = gateway_env(stack, GATEWAY_API_KEYS="s3cr3t-key-1")
    with servers.gateway_process(tmp_path, env) as gw:
        assert predict(gw, {"rows": ROWS}, headers={"X-API-Key": "s3cr3t-key-1"}).status_code == 200
        assert predict(gw, {"rows": ROWS}, headers={"X-API-Key": "wrong"}).status_code == 403
        log = gw.log_text()
    assert "s3cr3t-key-1" not in log and "980.0" not in log


def test_auth_api_key_and_bearer(stack: Stack, tmp_path):
    keys = tmp_path / "api-keys"
    keys.write_text("# mounted secret\nkey-from-file\n")
    env = gateway_env(stack, GATEWAY_API_KEYS="key-a,key-b", GATEWAY_API_KEYS_FILE=str(keys))
    with servers.gateway_process(tmp_path, env) as gw:
        assert predict(gw, {"rows": ROWS}).status_code == 401
        assert predict(gw, {"rows": ROWS}, headers={"X-API-Key": "nope"}).status_code == 403
        assert predict(gw, {"rows": ROWS}, headers={"X-API-Key": "key-b"}).status_code == 200
        assert (
            predict(gw, {"rows": ROWS}, headers={"Authorization": "Bearer key-from-file"}).status_code == 200
        )
        with pytest.raises(grpc.RpcError) as denied:
            grpc_predict(gw, ROWS)
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert grpc_predict(gw, ROWS, metadata=(("x-api-key", "key-a"),)).predictions
        # probes stay open: kubelets carry no API key
        assert servers.http_status(gw.url + "/healthz") == 200


def test_missing_entity_with_defaults_policy_is_flagged(stack: Stack, tmp_path):
    env = gateway_env(stack, GATEWAY_MISSING_ENTITIES="default")
    with servers.gateway_process(tmp_path, env) as gw:
        rows = [ROWS[0], {**ROWS[1], "user_id": 999999}]
        response = predict(gw, {"rows": rows})
        assert response.status_code == 200, response.text
        flags = [p["defaults_used"] for p in response.json()["predictions"]]
        assert flags == [False, True]
        # NaN for the missing user's features, imputed inside the graph with training medians
        got = [p["score"] for p in response.json()["predictions"]]
        np.testing.assert_allclose(got, expected_scores(stack, rows), atol=1e-5)


def test_skew_check_passes_then_catches_a_changed_online_value(stack: Stack, tmp_path):
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "gateway",
        "skew-check",
        "--model",
        MODEL,
        "--sample",
        "20",
        "--triton-url",
        stack.triton.grpc_url,
        "--feature-repo",
        str(stack.feature_repo),
        "--json",
    ]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["passed"] and report["entities"] == 20
    assert report["columns"] == stack.trained.columns

    # Skew by hand: overwrite one user's online value, as a buggy writer would.
    first = json.loads(ok.stdout)
    del first
    import random

    from feast_access.training import load_transactions

    tx = load_transactions(stack.store)
    pairs = sorted(set(zip(tx.user_id.astype(int), tx.merchant_id.astype(int), strict=True)))
    user = random.Random(0).sample(pairs, 20)[0][0]  # the skew check samples with seed 0
    view = stack.store.get_feature_view("user_stats")
    current = stack.store.get_online_features(
        features=["user_stats:avg_amount_30d", "user_stats:user_age_days", "user_stats:tx_last_24h"],
        entity_rows=[{"user_id": user}],
    ).to_dict()
    frame = pd.DataFrame(
        {
            "user_id": [user],
            "avg_amount_30d": [current["avg_amount_30d"][0] + 1000.0],
            "user_age_days": [current["user_age_days"][0]],
            "tx_last_24h": [current["tx_last_24h"][0]],
            "event_timestamp": [pd.Timestamp.now(tz="UTC")],
            "created_timestamp": [pd.Timestamp.now(tz="UTC")],
        }
    )
    try:
        stack.store.write_to_online_store(view.name, frame)
        bad = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    finally:
        frame["avg_amount_30d"] = [current["avg_amount_30d"][0]]
        stack.store.write_to_online_store(view.name, frame)
    assert bad.returncode == 1
    mismatches = json.loads(bad.stdout)["mismatches"]
    assert {(m["entity"]["user_id"], m["column"]) for m in mismatches} == {(user, "avg_amount_30d")}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_down_gives_503_and_the_gateway_recovers(
    stack: Stack, triton_runtime: Any, tmp_path, protocol: str
):
    from builder.runtime.server import ServerOptions, TritonServer

    names = [p.name for p in stack.model_repo.iterdir() if p.is_dir()]
    own = TritonServer(
        stack.model_repo,
        ServerOptions.explicit(names),
        runtime=triton_runtime,
        log_path=tmp_path / "triton.log",
    )
    own.start(timeout=180)
    ports = dict(own.ports)
    try:
        url = f"http://{own.http_url}" if protocol == "http" else f"grpc://{own.grpc_url}"
        env = gateway_env(stack, GATEWAY_TRITON_URL=url, GATEWAY_TRITON_TIMEOUT_S="1.0")
        with servers.gateway_process(tmp_path, env) as gw:
            assert predict(gw, {"rows": ROWS}).status_code == 200
            servers.stop_now(own)  # down is down: the graceful stop would wait for the gateway's connections
            down = predict(gw, {"rows": ROWS})
            assert down.status_code == 503, down.text
            assert down.headers.get("Retry-After") == "1"
            assert down.json()["cause"] == "triton_unavailable"
            assert requests.get(f"{gw.url}/readyz", timeout=10).status_code == 503
            options = ServerOptions.explicit(
                names, http_port=ports["http"], grpc_port=ports["grpc"], metrics_port=ports["metrics"]
            )
            own = TritonServer(
                stack.model_repo, options, runtime=triton_runtime, log_path=tmp_path / "triton2.log"
            )
            own.start(timeout=180)
            deadline = time.monotonic() + 30
            status = 0
            while time.monotonic() < deadline:
                status = predict(gw, {"rows": ROWS}).status_code
                if status == 200:
                    break
                time.sleep(0.5)
            assert status == 200, "the gateway did not recover after Triton came back"
    finally:
        servers.stop_now(own)


def test_redis_profile_then_online_store_down_gives_503(stack: Stack, tmp_path, monkeypatch):
    from datetime import UTC, datetime

    from feast_access.store import REDIS_ENV, apply, materialize
    from feature_repo.definitions import OBJECTS

    with servers.redis_server(tmp_path) as redis:
        monkeypatch.setenv(REDIS_ENV, redis.address)
        apply(stack.feature_repo, OBJECTS, profile="redis")
        materialize(stack.feature_repo, end=datetime.now(UTC), profile="redis")
        env = gateway_env(
            stack,
            GATEWAY_ONLINE_STORE="redis",
            GATEWAY_REDIS_URL=redis.address,
            GATEWAY_FEATURE_TIMEOUT_S="1.0",
        )
        with servers.gateway_process(tmp_path, env) as gw:
            response = predict(gw, {"rows": ROWS})
            assert response.status_code == 200, response.text
            scores = [p["score"] for p in response.json()["predictions"]]
            np.testing.assert_allclose(scores, expected_scores(stack, ROWS), atol=1e-5)
            redis.stop()
            down = predict(gw, {"rows": ROWS})
            assert down.status_code == 503, down.text
            assert down.json()["cause"] == "feature_store_unavailable"
            assert down.headers.get("Retry-After") == "1"
            assert requests.get(f"{gw.url}/readyz", timeout=10).status_code == 503
            assert servers.http_status(gw.url + "/healthz") == 200  # live, just not ready


def test_two_workers_share_both_ports_and_stop_together(stack: Stack, tmp_path):
    # gateway serve --workers 2: two processes bind the same HTTP and gRPC ports (SO_REUSEPORT)
    with servers.gateway_process(tmp_path, gateway_env(stack, GATEWAY_WORKERS="2")) as gw:
        children = [  # the workers, not multiprocessing's resource tracker
            c
            for c in Path(f"/proc/{gw.proc.pid}/task/{gw.proc.pid}/children").read_text().split()
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()
        ]
        assert len(children) == 2, children
        want = expected_scores(stack, ROWS)
        for _ in range(4):  # fresh connections, whichever worker the kernel hands each to
            scores = [p["score"] for p in predict(gw, {"rows": ROWS}).json()["predictions"]]
            np.testing.assert_allclose(scores, want, atol=1e-5)
            np.testing.assert_allclose([p.score for p in grpc_predict(gw, ROWS).predictions], want, atol=1e-5)
        gw.proc.send_signal(signal.SIGTERM)  # the supervisor stops its workers and exits 0
        assert gw.proc.wait(timeout=30) == 0
        assert not any(Path(f"/proc/{c}").exists() for c in children)


def _running(pid: str) -> bool:
    """Alive and not a zombie (an orphan's exit is reaped by whatever adopted it, maybe late)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_stop_when_their_supervisor_is_killed(stack: Stack, tmp_path):
    # A supervisor killed outright (SIGKILL, the OOM killer, a caller's timeout) runs no handler:
    # its workers used to go on serving the port, orphaned. Now the kernel tells each (SIGTERM).
    with servers.gateway_process(tmp_path, gateway_env(stack, GATEWAY_WORKERS="2")) as gw:
        children = [
            c
            for c in Path(f"/proc/{gw.proc.pid}/task/{gw.proc.pid}/children").read_text().split()
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()
        ]
        assert len(children) == 2, children
        assert predict(gw, {"rows": ROWS}).status_code == 200
        gw.proc.kill()
        gw.proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while any(_running(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(c) for c in children), "workers outlived their supervisor"
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{gw.url}/healthz", timeout=5)  # nobody serves the port any more


def test_the_pre_resolved_read_returns_what_the_feast_sdk_returns(stack: Stack):
    # gateway/clients/online_read.py calls the store's online_read itself; the SDK's answer is the reference
    import asyncio

    from feature_repo import SERVICE
    from gateway.clients.features import OnlineFeatures

    features = OnlineFeatures(stack.feature_repo, "sqlite", timeout_s=10.0)
    assert features.plan(SERVICE) is not None  # this service is read through the plan
    keys = [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in ROWS]
    keys += [{"user_id": 10**9, "merchant_id": 3}, keys[0]]  # an unknown user; a repeated entity
    got = asyncio.run(features.fetch(SERVICE, keys))
    sdk = stack.store.get_online_features(features=stack.store.get_feature_service(SERVICE), entity_rows=keys)
    want = sdk.to_dict(include_event_timestamps=True)
    names = [k for k in want if not k.endswith("__ts") and k not in ("user_id", "merchant_id")]
    assert sorted(got.values) == sorted(names)
    for name in names:
        assert got.values[name] == want[name], name
        assert got.times[name] == want[f"{name}__ts"], name
    assert got.values["user_age_days"][3] is None and got.values["merchant_risk"][3] is not None
    assert set(got.missing[3]) == {"user_age_days", "tx_last_24h", "avg_amount_30d"}


def test_deadline_passing_gives_504(stack: Stack, tmp_path):
    # A Triton deadline no call can meet: every request must end in a 504, fast, not hang.
    env = gateway_env(stack, GATEWAY_TRITON_TIMEOUT_S="0.0001")
    with servers.gateway_process(tmp_path, env, wait_ready=False) as gw:
        start = time.monotonic()
        response = predict(gw, {"rows": ROWS})
        assert response.status_code == 504, response.text
        assert response.json()["cause"] == "triton_timeout"
        assert time.monotonic() - start < 5


@pytest.mark.parametrize("reads", ["inline", "thread"])
def test_a_locked_sqlite_store_is_a_504_not_a_hang_and_the_gateway_recovers(stack: Stack, tmp_path, reads):
    """A writer holding the SQLite online store (as a materialize run does) while requests come in.

    inline reads wait out SQLite's busy timeout (5 s) on the event loop; thread reads give up at
    the feature deadline (1 s here). Either way the client gets a 504 and the next request,
    after the writer lets go, is served.
    """
    import sqlite3

    env = gateway_env(stack, GATEWAY_FEATURE_READS=reads, GATEWAY_FEATURE_TIMEOUT_S="1.0")
    with servers.gateway_process(tmp_path, env) as gw:
        assert predict(gw, {"rows": ROWS[:1]}).status_code == 200
        writer = sqlite3.connect(stack.feature_repo / "data" / "online_store.db", isolation_level=None)
        try:
            writer.execute("BEGIN EXCLUSIVE")
            start = time.monotonic()
            blocked = predict(gw, {"rows": ROWS[:1]})
            took = time.monotonic() - start
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert blocked.status_code == 504, blocked.text
        assert blocked.json()["cause"] == "feature_timeout"
        assert took < 8, f"a locked store took {took:.1f} s to answer"
        after = predict(gw, {"rows": ROWS[:1]})
        assert after.status_code == 200, after.text
        np.testing.assert_allclose(
            [p["score"] for p in after.json()["predictions"]], expected_scores(stack, ROWS[:1]), atol=1e-5
        )
