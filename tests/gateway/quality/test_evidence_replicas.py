"""One truth across replicas: several gateway processes behind one address, as deployed.

The chart runs 2-10 gateway replicas behind a Service and fraud labels come back days later,
through whichever replica the Service picks. Here, on the real stack (Triton, Feast, a champion
and a challenger version of a model, the challenger shadowing every request):

- ``gateway serve --workers 3`` (one port, the kernel spreading connections; the evidence in
  the SQLite file every worker shares), and
- three separate ``gateway serve`` processes on the Redis profile behind Debian's haproxy in
  round robin (the production shape: the evidence in the Redis Feast's online store uses),
  one of them SIGKILLed and restarted mid-run.

Each gets 600 one-row predictions, each on its own connection, then a label for every returned
id through the same address: all 600 must be accepted, six reads of ``/quality`` and
``/shadow`` must be equal, the champion's AUC must be the one computed here from the scores
the callers got (what one process gave before), and ``loadtests evidence`` must give one
verdict. Then the failure modes: the shared store down (predictions still served, the loss
counted, feedback a 503 with Retry-After), and the CRITICAL switch to the fallback on three
workers (every worker follows, no request fails, no switching back and forth).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from support import servers
from support.balancer import haproxy
from tests.gateway.helpers import MODEL, Stack, flood_labels, gateway_env, like_training, rank_auc

pytestmark = pytest.mark.integration

NAME = "fraud-replicas"
N = 600


@dataclass
class Versions:
    champion: str
    challenger: str


@pytest.fixture(scope="module")
def versions(stack: Stack) -> Iterator[Versions]:
    """The champion and, loaded beside it, a weaker challenger (5 boosting rounds)."""
    import mlflow
    import tritonclient.http as httpclient

    from builder.export import ExportRequest, export_model
    from support.train import train_and_register

    export_model(ExportRequest(f"models:/{MODEL}@champion", stack.model_repo, name=NAME))
    experiment = mlflow.get_experiment_by_name("tests").experiment_id
    challenger = train_and_register(
        stack.store, MODEL, experiment, n_estimators=5, alias="replicas-challenger"
    )
    export_model(
        ExportRequest(f"models:/{MODEL}@replicas-challenger", stack.model_repo, name=NAME, keep_serving=True)
    )
    client = httpclient.InferenceServerClient(stack.triton.http_url)
    client.load_model(NAME)
    try:
        yield Versions(str(stack.trained.version), str(challenger.version))
    finally:
        client.unload_model(NAME)
        client.close()


@pytest.fixture(scope="module")
def rows(stack: Stack) -> list[dict[str, Any]]:
    return like_training(stack, N, seed=21)


def env_for(stack: Stack, **extra: str) -> dict[str, str]:
    shadow = {"GATEWAY_SHADOW": json.dumps({NAME: {"share": 1.0}})}
    return gateway_env(
        stack, GATEWAY_MODELS=f'["{NAME}"]', GATEWAY_MISSING_ENTITIES="default", **{**shadow, **extra}
    )


def predict_each_on_its_own_connection(url: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answers = []
    for row in rows:
        response = requests.post(f"{url}/v1/models/{NAME}/predict", json=row, timeout=10)
        assert response.status_code == 200, response.text
        (answer,) = response.json()["predictions"]
        answers.append(answer)
    return answers


def labels_for(answers: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Labels that follow the champion's odds (a fixed seed: every run labels alike)."""
    score = np.array([a["score"] for a in answers])
    truth = np.random.default_rng(5).random(len(score)) < score
    return [{"id": a["id"], "label": int(t)} for a, t in zip(answers, truth, strict=True)], truth


def send_labels(url: str, labels: list[dict[str, Any]], per_request: int = 20) -> dict[str, int]:
    totals: dict[str, int] = {}
    for i in range(0, len(labels), per_request):
        response = requests.post(
            f"{url}/v1/models/{NAME}/feedback", json={"labels": labels[i : i + per_request]}, timeout=10
        )
        assert response.status_code == 200, response.text
        for key, value in response.json().items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return totals


def wait_for_shadow_rows(url: str, rows: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = requests.get(f"{url}/v1/models/{NAME}/shadow", params={"window": "5m"}, timeout=10).json()
        if body.get("rows", 0) >= rows:
            return
        time.sleep(0.3)
    raise AssertionError(f"the shadow report did not reach {rows} rows: {body}")


def six_reads(url: str, what: str) -> list[dict[str, Any]]:
    return [
        requests.get(f"{url}/v1/models/{NAME}/{what}", params={"window": "5m"}, timeout=30).json()
        for _ in range(6)
    ]


def evidence_verdict(url: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests", "evidence", "--criteria", "promotion", "--gateway", url,
         "--model", NAME, "--window", "5m", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode in (0, 6), done.stderr  # held, or a criterion failed: judged either way
    verdict: dict[str, Any] = json.loads(done.stdout)
    return verdict


def check_one_truth(url: str, answers: list[dict[str, Any]], versions: Versions) -> None:
    wait_for_shadow_rows(url, N)
    labels, truth = labels_for(answers)
    outcomes = send_labels(url, labels)
    assert (outcomes["accepted"], outcomes["unknown"], outcomes.get("expired", 0)) == (N, 0, 0)

    qualities = six_reads(url, "quality")
    assert all(q == qualities[0] for q in qualities), qualities
    by_role = {v["role"]: v for v in qualities[0]["versions"]}
    assert (by_role["champion"]["version"], by_role["champion"]["rows"]) == (versions.champion, N)
    assert (by_role["challenger"]["version"], by_role["challenger"]["rows"]) == (versions.challenger, N)
    score = np.array([a["score"] for a in answers])
    assert by_role["champion"]["metrics"]["auc"] == pytest.approx(rank_auc(truth, score), abs=1e-6)
    assert qualities[0]["feedback"]["accepted"] == N

    shadows = six_reads(url, "shadow")
    assert all(s == shadows[0] for s in shadows), shadows
    assert shadows[0]["rows"] == N and shadows[0]["challenger"]["version"] == versions.challenger

    first, second = evidence_verdict(url), evidence_verdict(url)
    assert first == second


def test_three_workers_behind_one_port_share_one_truth(
    stack: Stack, versions: Versions, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    env = env_for(stack, GATEWAY_WORKERS="3", GATEWAY_STATE_URL=f"sqlite:///{tmp_path / 'evidence.sqlite'}")
    with servers.gateway_process(tmp_path, env) as gw:
        answers = predict_each_on_its_own_connection(gw.url, rows)
        check_one_truth(gw.url, answers, versions)


@dataclass
class OnRedis:
    repo: Path
    redis: servers.RedisServer
    specs: Path  # compiled once, as the chart's init step does: no gateway start compiles them


@pytest.fixture(scope="module")
def on_redis(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnRedis]:
    """The feature repository on the Redis profile, materialized with Feast (as the chart runs)."""
    from feast_access.store import REDIS_ENV, apply, materialize
    from feature_repo.definitions import OBJECTS
    from gateway.feature_specs import compile_into
    from gateway.settings import FeatureSettings

    root = tmp_path_factory.mktemp("replicas-redis")
    repo = root / "feature_repo"
    shutil.copytree(stack.feature_repo, repo, ignore=shutil.ignore_patterns("registry_redis.db*"))
    with pytest.MonkeyPatch.context() as mp, servers.redis_server(root) as server:
        mp.setenv(REDIS_ENV, server.address)
        apply(repo, OBJECTS, profile="redis")
        materialize(repo, end=datetime.now(UTC), profile="redis")
        specs = root / "specs"
        settings = FeatureSettings(feature_repo=repo, online_store="redis", redis_url=server.address)
        compile_into(settings, specs)
        yield OnRedis(repo, server, specs)


def test_three_gateways_on_redis_behind_haproxy_and_one_killed_mid_run(
    stack: Stack, versions: Versions, rows: list[dict[str, Any]], on_redis: OnRedis, tmp_path: Path
) -> None:
    env = env_for(
        stack,
        GATEWAY_FEATURE_REPO=str(on_redis.repo),
        GATEWAY_FEATURE_SPECS=str(on_redis.specs),
        GATEWAY_ONLINE_STORE="redis",
        GATEWAY_REDIS_URL=on_redis.redis.address,
    )
    ports = [(servers.free_port(), servers.free_port()) for _ in range(3)]
    with (
        servers.gateway_process(tmp_path, env, ports=ports[0]),
        servers.gateway_process(tmp_path, env, ports=ports[1]) as second,
        servers.gateway_process(tmp_path, env, ports=ports[2]),
        haproxy([f"127.0.0.1:{h}" for h, _ in ports], tmp_path, health_path="/healthz") as balancer,
    ):
        answers = predict_each_on_its_own_connection(balancer.url, rows[: N // 2])
        # what a replica has sent to the store survives it (a SIGKILL takes only what it had not
        # sent yet: the last second's shadow counts, the last millisecond's answers)
        wait_for_shadow_rows(balancer.url, N // 2)
        os.killpg(second.proc.pid, signal.SIGKILL)  # a replica dies: what it served is in Redis
        second.proc.wait()
        with servers.gateway_process(tmp_path, env, ports=ports[1]):  # and comes back on its port
            answers += predict_each_on_its_own_connection(balancer.url, rows[N // 2 :])
            check_one_truth(balancer.url, answers, versions)


def test_the_shared_store_down_costs_evidence_never_a_prediction(
    stack: Stack, versions: Versions, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The online store is SQLite here and the evidence a Redis of its own, so only the
    evidence goes away: predictions answer 200, the loss is counted, feedback says 503."""
    with servers.redis_server(tmp_path, appendonly=True) as evidence:  # a Redis that keeps its data
        env = env_for(stack, GATEWAY_STATE_URL=f"redis://{evidence.address}/0")
        with servers.gateway_process(tmp_path, env) as gw:
            before = predict_each_on_its_own_connection(gw.url, rows[:20])
            time.sleep(0.3)  # the writer's round trip: these are remembered now
            evidence.kill()
            during = predict_each_on_its_own_connection(gw.url, rows[20:60])  # asserts every 200
            time.sleep(1.5)  # the writer's next round trip fails
            metrics = requests.get(f"{gw.url}/metrics", timeout=10).text
            lost = [line for line in metrics.splitlines() if line.startswith("gateway_evidence_lost_total{")]
            assert any(f'model="{NAME}",what="prediction"' in line for line in lost), lost
            refused = requests.post(
                f"{gw.url}/v1/models/{NAME}/feedback", json={"labels": labels_for(before)[0]}, timeout=10
            )
            assert refused.status_code == 503 and refused.headers["Retry-After"], refused.text
            assert "evidence store" in refused.json()["error"]
            assert requests.get(f"{gw.url}/v1/models/{NAME}/quality", timeout=10).status_code == 503

            evidence.restart()
            time.sleep(0.5)
            again = send_labels(gw.url, labels_for(before)[0])
            assert again["accepted"] == 20  # remembered before the outage: nothing lost
            lost_ones = send_labels(gw.url, labels_for(during)[0])
            assert lost_ones["accepted"] + lost_ones["unknown"] == 40
            assert predict_each_on_its_own_connection(gw.url, rows[60:61])


class Traffic:
    """One client sending predictions until stopped, counting every answer and its version."""

    def __init__(self, url: str, rows: list[dict[str, Any]]) -> None:
        self.url, self.rows = url, rows
        self.failed: list[str] = []
        self.versions: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            row = self.rows[i % len(self.rows)]
            i += 1
            try:
                response = requests.post(f"{self.url}/v1/models/{NAME}/predict", json=row, timeout=10)
            except requests.RequestException as exc:
                self.failed.append(repr(exc))
                continue
            if response.status_code != 200:
                self.failed.append(response.text)
            else:
                self.versions.append(response.json()["version"])
            time.sleep(0.005)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def versions_served(url: str, row: dict[str, Any], n: int = 30) -> set[str]:
    return {
        requests.post(f"{url}/v1/models/{NAME}/predict", json=row, timeout=10).json()["version"]
        for _ in range(n)
    }


def wait_judged(url: str, rows: int) -> dict[str, Any]:
    """The fallback status once the judge has seen ``rows`` labeled rows (it judges every 0.5 s)."""
    deadline = time.monotonic() + 15
    while True:
        status: dict[str, Any] = requests.get(f"{url}/v1/models/{NAME}/fallback", timeout=10).json()
        if (status.get("judged") or {}).get("rows") == rows or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_the_critical_switch_to_the_fallback_on_three_workers(
    stack: Stack, versions: Versions, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    rule = {
        "version": versions.challenger,
        "metric": "auc",
        "threshold": 0.7,
        "window": "5m",
        "min_labels": 100,
    }
    env = env_for(
        stack,
        GATEWAY_WORKERS="3",
        GATEWAY_SHADOW="{}",
        GATEWAY_STATE_URL=f"sqlite:///{tmp_path / 'evidence.sqlite'}",
        GATEWAY_FALLBACK=json.dumps({NAME: rule}),
        GATEWAY_FALLBACK_POLL_S="0.2",
        GATEWAY_FALLBACK_JUDGE_S="0.5",
        GATEWAY_PAYLOAD_LOG=str(tmp_path / "log"),
        GATEWAY_PAYLOAD_LOG_FLUSH_S="0.2",
    )
    with servers.gateway_process(tmp_path, env) as gw:
        assert versions_served(gw.url, rows[0]) == {versions.champion}
        answers = predict_each_on_its_own_connection(gw.url, rows[:150])
        # fewer labels than min_labels, however bad: no switch
        score = np.array([a["score"] for a in answers])
        inverted = [
            {"id": a["id"], "label": int(s < np.median(score))} for a, s in zip(answers, score, strict=True)
        ]
        assert send_labels(gw.url, inverted[:90])["accepted"] == 90
        status = wait_judged(gw.url, 90)
        assert status["active"] is False and status["judged"]["margin"] < 0  # broken, on too few labels

        with Traffic(gw.url, rows[150:200]) as traffic:
            switched_at = time.monotonic()
            assert send_labels(gw.url, inverted[90:])["accepted"] == 60  # AUC ~0 on 150 labels
            deadline = time.monotonic() + 10
            while versions_served(gw.url, rows[0], 12) != {versions.challenger}:
                assert time.monotonic() < deadline, requests.get(f"{gw.url}/v1/models/{NAME}/fallback").text
                time.sleep(0.2)
            took = time.monotonic() - switched_at
            time.sleep(1.0)
        assert traffic.failed == []  # not one request failed during the switch
        assert took < 5.0  # the judge (0.5 s) and every worker's poll (0.2 s), with room
        assert versions_served(gw.url, rows[1], 30) == {versions.challenger}  # every worker follows
        status = requests.get(f"{gw.url}/v1/models/{NAME}/fallback", timeout=10).json()
        assert status["active"] is True and status["decision"]["by"] == "rule"
        assert "auc" in status["decision"]["reason"] and status["judged"]["margin"] < 0
        metrics = requests.get(f"{gw.url}/metrics", timeout=10).text
        assert (
            f'gateway_fallback_active{{fallback="{NAME}:{versions.challenger}",model="{NAME}"}} 1.0'
            in metrics
        )

        # reversed by a command; the labels that tripped it do not trip it again
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "fallback", "reset", NAME, "--url", gw.url,
             "--reason", "fixed"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 10
        while versions_served(gw.url, rows[0], 12) != {versions.champion}:
            assert time.monotonic() < deadline, "the workers did not follow the reset"
            time.sleep(0.2)
        assert versions_served(gw.url, rows[0], 30) == {versions.champion}
        # labels that hover at the threshold: at most one switch, never back and forth
        hover = predict_each_on_its_own_connection(gw.url, rows[200:500])
        rng = np.random.default_rng(3)
        flips = rng.random(len(hover)) < 0.3  # AUC near 0.7 with 30 % of the labels against the score
        hs = np.array([a["score"] for a in hover])
        hovering = [
            {"id": a["id"], "label": int((s >= np.median(hs)) != f)}
            for a, s, f in zip(hover, hs, flips, strict=True)
        ]
        seen: list[bool] = []
        for i in range(0, len(hovering), 30):
            send_labels(gw.url, hovering[i : i + 30])
            time.sleep(0.3)
            seen.append(requests.get(f"{gw.url}/v1/models/{NAME}/fallback", timeout=10).json()["active"])
        changes = sum(1 for a, b in itertools.pairwise(seen) if a != b)
        assert changes <= 1 and (not seen[0] or all(seen)), seen
    # every payload-log row says who answered it: the fallback's rows its version, flagged
    import pandas as pd

    frame = pd.concat([pd.read_parquet(f) for f in sorted((tmp_path / "log").rglob("*.parquet"))])
    on_fallback = frame[frame["__fallback"]]
    assert len(on_fallback) > 0 and set(on_fallback["__model_version"]) == {versions.challenger}
    assert set(frame.loc[~frame["__fallback"], "__model_version"]) == {versions.champion}
    assert set(frame["__answered_by"]) == {NAME}


def predict_latencies(url: str, rows: list[dict[str, Any]], seconds: float) -> np.ndarray:
    """One client's predict latencies (s), one kept-alive connection, for ``seconds``."""
    took = []
    with requests.Session() as session:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            start = time.perf_counter()
            response = session.post(f"{url}/v1/models/{NAME}/predict", json=rows[i % len(rows)], timeout=10)
            took.append(time.perf_counter() - start)
            assert response.status_code == 200, response.text
            i += 1
    return np.array(took)


def test_a_label_flood_never_starves_predictions(
    stack: Stack, versions: Versions, rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    """8 senders posting 100 labels a request as fast as they can (a backfill, a retry storm):
    predictions keep flowing (every one answered, p99 and throughput far from the collapse once
    seen), every label request is answered 200 or 503 with Retry-After, and the labels taken are
    kept."""
    with servers.gateway_process(tmp_path, env_for(stack, GATEWAY_SHADOW="{}")) as gw:
        answers = predict_each_on_its_own_connection(gw.url, rows[:400])
        labels, _ = labels_for(answers)
        baseline = predict_latencies(gw.url, rows, 4.0)
        # the senders are processes of their own, as real ones are: threads here would make this
        # process's own GIL part of the latency it measures
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager, context.Pool(8) as pool:
            ready = manager.Barrier(9)  # the 8 senders and this test: the flood starts at once
            jobs = [(gw.url, NAME, labels, seed, ready, 8.0) for seed in range(8)]
            flooding = pool.map_async(flood_labels, jobs, chunksize=1)
            ready.wait(timeout=120)
            time.sleep(0.5)
            flooded = predict_latencies(gw.url, rows, 6.0)
            statuses = [s for part in flooding.get(timeout=60) for s in part]
        assert set(statuses) <= {200, 503} and statuses.count(200) > 0, set(statuses)
        # Not a benchmark (two shared cores, another test worker beside it): bounds that the
        # flood once broke by far (p99 19 -> 96 ms, throughput / 7) and noise does not reach;
        # measured here 2.6-3.6x p99 before the label gate, within 2x after in quiet runs.
        base_p99, flood_p99 = np.percentile(baseline, 99), np.percentile(flooded, 99)
        assert flood_p99 <= 4 * base_p99 + 0.010, (base_p99, flood_p99)
        assert len(flooded) >= 0.3 * len(baseline) * 6 / 4  # throughput: far from the 7x drop
        quality = requests.get(
            f"{gw.url}/v1/models/{NAME}/quality", params={"window": "5m"}, timeout=30
        ).json()
        accepted = quality["feedback"]["accepted"]
        assert 0 < accepted <= 400 and quality["versions"][0]["rows"] == accepted  # each id labeled once
