"""The gateway through Triton's life: a hot swap to a new version, and Triton killed and back.

Both run on a Triton of this module's own (on a copy of the stack's model repository), so the
session's Triton keeps serving the other tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from builder.runtime.server import ServerOptions, TritonServer
from support import servers
from tests.gateway.helpers import MODEL, ROWS, Stack, gateway_env, predict

pytestmark = pytest.mark.integration


@dataclass
class Own:
    repo: Path
    root: Path
    runtime: Any
    triton: TritonServer
    gateway: servers.Gateway

    def start_triton(self, log: str, **ports: int) -> TritonServer:
        """A TritonServer on this repository (not started), every model in it loaded at start."""
        names = [p.name for p in self.repo.iterdir() if p.is_dir()]
        return TritonServer(
            self.repo, ServerOptions.explicit(names, **ports), runtime=self.runtime, log_path=self.root / log
        )


@pytest.fixture(scope="module")
def own(stack: Stack, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Own]:
    root = tmp_path_factory.mktemp("recovery")
    repo = root / "model_repo"
    shutil.copytree(stack.model_repo, repo)
    holder = Own(repo, root, triton_runtime, None, None)  # type: ignore[arg-type]
    holder.triton = holder.start_triton("triton-0.log").start(timeout=180)
    try:
        # a spec re-read every 30 s: the version label must not wait for it
        url = f"http://{holder.triton.http_url}"
        env = gateway_env(stack, GATEWAY_TRITON_URL=url, GATEWAY_SPEC_TTL_S="30")
        with servers.gateway_process(root, env) as gw:
            holder.gateway = gw
            yield holder
    finally:
        servers.stop_now(holder.triton)


def test_the_answer_names_the_version_triton_ran_right_after_a_hot_swap(stack: Stack, own: Own):
    import tritonclient.http as httpclient
    from mlflow import MlflowClient

    from builder.export import ExportRequest, export_model

    before = predict(own.gateway, {"rows": ROWS})
    assert before.status_code == 200, before.text
    old = before.json()["version"]
    # a new registry version of the same run, exported into this Triton's repository
    client = MlflowClient()
    current = client.get_model_version(MODEL, str(stack.trained.version))
    new = client.create_model_version(MODEL, current.source, run_id=current.run_id).version
    export_model(ExportRequest(f"models:/{MODEL}/{new}", own.repo))
    triton = httpclient.InferenceServerClient(own.triton.http_url)
    triton.load_model(MODEL)  # blocks until loaded; version_policy latest:1 -> the new one
    assert triton.is_model_ready(MODEL, str(new))
    after = predict(own.gateway, {"rows": ROWS})
    assert after.status_code == 200, after.text
    assert after.json()["version"] == str(new) != old


def _ready(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2/health/ready", timeout=0.5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def test_after_triton_is_killed_and_back_the_first_200_comes_within_1s_of_ready(own: Own):
    gw = own.gateway
    assert predict(gw, {"rows": ROWS}).status_code == 200
    ports = dict(own.triton.ports)
    pid = own.triton.pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # no goodbye: the server and its stubs gone at once
    own.triton.stop()  # reaps it
    during = predict(gw, {"rows": ROWS})
    assert during.status_code == 503, during.text
    # An outage of ~10 s, clients asking all along: gRPC's default reconnect back-off has grown
    # to gaps of several seconds by then (1, 1.6, 2.6, 4.1, 6.6 s...), the gap the gateway's
    # 503s outlived Triton by. The length of the outage is what this test is about.
    statuses: set[int] = set()
    outage_end = time.monotonic() + 10
    while time.monotonic() < outage_end:
        statuses.add(predict(gw, {"rows": ROWS}).status_code)
        time.sleep(0.1)

    back = own.start_triton(
        "triton-1.log", http_port=ports["http"], grpc_port=ports["grpc"], metrics_port=ports["metrics"]
    )
    own.triton = back
    failed: list[BaseException] = []

    def start() -> None:
        try:
            back.start(timeout=180)
        except BaseException as exc:  # shown by the main thread
            failed.append(exc)

    triton_http = f"127.0.0.1:{ports['http']}"  # back.ports is set only once start() binds
    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    # clients keep asking while Triton starts; Triton's ready is polled between
    first_ok = None
    while not _ready(triton_http):
        assert not failed, f"Triton did not come back: {failed[0]}\n{back.log_tail()}"
        assert starter.is_alive() or _ready(triton_http), back.log_tail()
        status = predict(gw, {"rows": ROWS}).status_code
        if status == 200:  # Triton served before this loop's ready poll saw it: it is back
            first_ok = time.monotonic()
            break
        statuses.add(status)
        time.sleep(0.05)
    ready_at = time.monotonic() if first_ok is None else first_ok
    assert statuses <= {503, 504}, f"during the outage the gateway answered {statuses}"
    while first_ok is None and time.monotonic() - ready_at < 10:
        if predict(gw, {"rows": ROWS}).status_code == 200:
            first_ok = time.monotonic()
        else:
            time.sleep(0.02)
    starter.join(timeout=60)
    assert first_ok is not None, "the gateway did not recover within 10 s of Triton's ready"
    assert first_ok - ready_at < 1.0, f"first 200 came {first_ok - ready_at:.2f} s after Triton was ready"
    assert requests.get(f"{gw.url}/readyz", timeout=10).status_code == 200
