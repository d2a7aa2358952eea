"""A gateway loads redis-py only when its shared state lives in Redis: on SQLite (one machine)
or with the state off, the 13 MiB of redis-py (and the OpenTelemetry SDK it pulls in where that
is installed) stay out of the process, which the chart's memory request counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = """
import json, sys
from gateway.evidence.open import open_store
from gateway.settings import GatewaySettings, nest
import gateway.service, gateway.http.server, gateway.grpc.server  # what `gateway serve` runs
settings = GatewaySettings(**nest({"state_url": sys.argv[1]}))
store = open_store(settings, None)
print(json.dumps({"store": type(store).__name__, "redis": "redis" in sys.modules}))
"""


@pytest.mark.parametrize(
    ("url", "store", "redis"),
    [
        ("off", "NoneType", False),
        ("sqlite:///{tmp}/evidence.sqlite", "SqliteEvidence", False),
        ("redis://127.0.0.1:1/0", "RedisEvidence", True),  # no connection is made to build it
    ],
)
def test_redis_py_is_loaded_only_for_a_redis_store(tmp_path: Path, url: str, store: str, redis: bool) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, url.format(tmp=tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"store": store, "redis": redis}
