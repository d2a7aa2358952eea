"""The gateway on the Redis profile under concurrent load while redis-server fails: SIGKILLed
and restarted on the same port, and paused (SIGSTOP) past the feature deadline, then resumed.

What a client must see, whichever the fault: during the outage a 503 with ``Retry-After``
within the deadline (plus a margin), never a hang and never a 500; the first 200 within 1 s of
Redis answering again; every 200 with the scores the gateway gave before the outage; and the
gateway's connections to Redis afterwards bounded by the load, not by the number of requests
that failed.

The restarted Redis keeps its data as a production one does, through persistence: an
append-only file (``appendfsync everysec``), which a SIGKILL does not lose (the kernel holds
what was written; only a power cut loses the last second). Nothing is materialized again.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from support import servers
from tests.gateway.helpers import MODEL, ROWS, Stack, expected_scores, gateway_env

pytestmark = pytest.mark.integration

DEADLINE_S = 0.5  # GATEWAY_FEATURE_TIMEOUT_S
PROBE_S = 0.25  # after a read's deadline, the gateway's PING probe tells down (503) from slow (504)
MARGIN_S = 0.25  # HTTP, scheduling
CLIENTS = 8
FAILED_READS = 6  # an outage lasts at least this many failed online-store reads


@dataclass
class Redis:
    server: servers.RedisServer
    gateway: servers.Gateway
    want: dict[int, float]  # user_id -> the score the model gives that row


@pytest.fixture(scope="module")
def redis(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    from feast_access.store import REDIS_ENV, apply, materialize
    from feature_repo.definitions import OBJECTS

    root = tmp_path_factory.mktemp("redis-faults")
    # A repository of its own: the Redis registry records what was materialized into which store.
    repo = root / "feature_repo"
    shutil.copytree(stack.feature_repo, repo, ignore=shutil.ignore_patterns("registry_redis.db*"))
    with pytest.MonkeyPatch.context() as mp, servers.redis_server(root, appendonly=True) as server:
        mp.setenv(REDIS_ENV, server.address)
        apply(repo, OBJECTS, profile="redis")
        materialize(repo, end=datetime.now(UTC), profile="redis")
        env = gateway_env(
            stack,
            GATEWAY_FEATURE_REPO=str(repo),
            GATEWAY_ONLINE_STORE="redis",
            GATEWAY_REDIS_URL=server.address,
            GATEWAY_FEATURE_TIMEOUT_S=str(DEADLINE_S),
        )
        want = dict(zip((r["user_id"] for r in ROWS), expected_scores(stack, ROWS), strict=True))
        with servers.gateway_process(root, env) as gw:
            yield Redis(server, gw, want)


@dataclass(frozen=True)
class Answer:
    client: int
    sent: float  # time.monotonic()
    done: float
    status: int  # -1: no HTTP answer within the client's own 10 s timeout
    retry_after: str | None
    scores: dict[int, float] | None  # user_id -> score, for a 200
    text: str


@dataclass
class Load:
    """``CLIENTS`` threads, each posting its own order of ``ROWS`` in a loop on a keep-alive
    connection, every answer recorded."""

    gw: servers.Gateway
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Load:
        for i in range(CLIENTS):
            thread = threading.Thread(target=self._client, args=(i,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)
        assert not any(t.is_alive() for t in self._threads), "a client is still waiting for an answer"

    def _client(self, i: int) -> None:
        rows = ROWS[i % len(ROWS) :] + ROWS[: i % len(ROWS)]  # a batch must not mix rows up
        url = f"{self.gw.url}/v1/models/{MODEL}/predict"
        with requests.Session() as session:
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    r = session.post(url, json={"rows": rows}, timeout=10)
                    status, retry, text = r.status_code, r.headers.get("Retry-After"), r.text
                except requests.RequestException as exc:
                    status, retry, text = -1, None, repr(exc)
                done = time.monotonic()
                scores = None
                if status == 200:
                    got = [p["score"] for p in r.json()["predictions"]]
                    scores = {row["user_id"]: s for row, s in zip(rows, got, strict=True)}
                with self._lock:
                    self.answers.append(Answer(i, sent, done, status, retry, scores, text[:300]))

    def seen(self) -> list[Answer]:
        with self._lock:
            return list(self.answers)

    def until(self, what: str, ok: Callable[[list[Answer]], bool], timeout: float = 10) -> float:
        """Polls the answers until ``ok`` holds; returns when it did."""
        deadline = time.monotonic() + timeout
        while not ok(self.seen()):
            assert time.monotonic() < deadline, f"{what}: not within {timeout} s; last: {self.seen()[-3:]}"
            time.sleep(0.01)
        return time.monotonic()


def every_client(answers: list[Answer], n: int, served: bool, after: float) -> bool:
    """Every client has had ``n`` answers (200s, or else failures) to requests sent after ``after``."""
    counts = [0] * CLIENTS
    for a in answers:
        if (a.status == 200) == served and a.sent > after:
            counts[a.client] += 1
    return min(counts) >= n


def redis_connections(pid: int, port: int) -> int:
    """The sockets ``pid`` holds open to ``port`` (closed ones leave its fd table at once)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since listed
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rpartition(":")[2], 16) == port and fields[9] in inodes:
                count += 1
    return count


@dataclass
class Outage:
    answers: list[Answer]  # every answer, before, during and after
    start: float  # the fault took effect
    ended: float  # the fault was undone (restart begun, SIGCONT sent)
    back: float  # Redis answered again
    failed_reads: int  # the gateway's online-store reads during the outage (all failed)
    connections: dict[str, int]  # the gateway's to Redis: before, peak during, after


def feature_reads(gw: servers.Gateway) -> int:
    """The online-store reads the gateway has made (failed ones too), from its /metrics."""
    text = requests.get(f"{gw.url}/metrics", timeout=5).text
    found = re.search(rf'gateway_feature_fetch_seconds_count{{model="{MODEL}"}} (\S+)', text)
    return int(float(found.group(1))) if found else 0


def outage(redis: Redis, fault: Callable[[], None], recover: Callable[[], float]) -> Outage:
    """Load before, during and after an outage of Redis: ``fault`` starts it, ``recover`` ends
    it and returns when Redis answered again."""
    gw, port = redis.gateway, redis.server.port
    with Load(gw) as warm:
        warm.until("200s before the fault", lambda a: every_client(a, 3, True, 0))
    before = redis_connections(gw.proc.pid, port)
    peak = before
    with Load(gw) as load:
        load.until("200s before the fault", lambda a: every_client(a, 1, True, 0))
        fault()
        start = time.monotonic()
        reads = feature_reads(gw)
        # Down for at least twice the deadline, until every client has had two failures and the
        # gateway has failed FAILED_READS reads (each a connection a leak would keep).
        while (
            time.monotonic() - start < 2 * DEADLINE_S
            or not every_client(load.seen(), 2, False, start)
            or feature_reads(gw) - reads < FAILED_READS
        ):
            assert time.monotonic() - start < 20, f"no failures during the outage: {load.seen()[-3:]}"
            peak = max(peak, redis_connections(gw.proc.pid, port))
            time.sleep(0.01)
        ended = time.monotonic()
        reads = feature_reads(gw) - reads
        back = recover()
        load.until(
            "the first 200 after the outage", lambda a: any(x.status == 200 and x.sent > ended for x in a)
        )
        load.until("200s after the outage", lambda a: every_client(a, 3, True, ended))
    after = redis_connections(gw.proc.pid, port)
    connections = {"before": before, "peak": peak, "after": after}
    return Outage(warm.seen() + load.seen(), start, ended, back, reads, connections)


def check(redis: Redis, out: Outage, slowest_allowed: float) -> dict[str, Any]:
    """What a client must see (module docstring); returns the figures observed."""
    answers = out.answers
    assert {a.status for a in answers} <= {200, 503}, [a for a in answers if a.status not in (200, 503)][:3]
    refused = [a for a in answers if a.status == 503]
    assert all(a.retry_after == "1" for a in refused), [a for a in refused if a.retry_after != "1"][:3]
    slowest = max(a.done - a.sent for a in refused)
    assert slowest <= slowest_allowed, f"a 503 took {slowest:.2f} s (allowed {slowest_allowed:.2f} s)"
    during = [a for a in answers if out.start < a.sent and a.done < out.ended]
    assert during and all(a.status == 503 for a in during), [a for a in during if a.status != 503][:3]
    # no wrong answer: every 200, before and after, is the model's score, bit for bit the one
    # the gateway gave before the outage
    served = [a for a in answers if a.status == 200 and a.scores is not None]
    first_seen = served[0].scores
    assert first_seen is not None
    for user, score in first_seen.items():
        assert score == pytest.approx(redis.want[user], abs=1e-5), (user, score, redis.want)
    wrong = [a for a in served if a.scores != {u: first_seen[u] for u in a.scores or {}}]
    assert not wrong, wrong[:3]
    first_ok = min(a.done for a in served if a.sent > out.ended)
    assert first_ok - out.back < 1.0, f"first 200 came {first_ok - out.back:.2f} s after Redis answered again"
    # The client keeps a pool of as many connections as reads were in flight at once; a failed
    # read closes its own. Not one per failed read or request.
    assert out.failed_reads >= FAILED_READS
    assert out.connections["after"] <= out.connections["before"] + 2, out.connections
    assert out.connections["peak"] <= out.connections["before"] + CLIENTS, out.connections
    return {
        "503s": len(refused),
        "failed_reads": out.failed_reads,
        "fastest_503_s": round(min(a.done - a.sent for a in refused), 3),
        "slowest_503_s": round(slowest, 3),
        "first_200_after_redis_back_s": round(first_ok - out.back, 3),
        "outage_s": round(out.ended - out.start, 3),
        "connections": out.connections,
    }


def test_redis_sigkilled_then_restarted_with_its_data(redis: Redis):
    # A refused connection fails the read at once (503 in milliseconds), whatever the queue.
    out = outage(redis, redis.server.kill, redis.server.restart)
    print("\nSIGKILL + restart:", check(redis, out, slowest_allowed=DEADLINE_S + PROBE_S + MARGIN_S))


def test_redis_paused_past_the_deadline_then_resumed(redis: Redis):
    def pause() -> None:
        redis.server.proc.send_signal(signal.SIGSTOP)
        stat = Path(f"/proc/{redis.server.proc.pid}/stat")
        while stat.read_text().rpartition(")")[2].split()[0] != "T":  # stopped, not just signalled
            time.sleep(0.001)

    def resume() -> float:
        redis.server.proc.send_signal(signal.SIGCONT)
        return time.monotonic()  # it answers from here: the kernel kept what was sent meanwhile

    out = outage(redis, pause, resume)
    # A read the paused Redis never answers is a 503 after the deadline plus the gateway's probe
    # (a PING it does not answer either). A request that arrived while that batch was stuck gets
    # the same 503 when the batch does (gateway/batching.py), not after a read of its own.
    figures = check(redis, out, slowest_allowed=DEADLINE_S + PROBE_S + MARGIN_S)
    assert figures["fastest_503_s"] >= DEADLINE_S, figures  # stalled, not refused: the deadline ran
    print("\nSIGSTOP past the deadline + SIGCONT:", figures)
