"""``builder export --ensemble`` (the real CLI) SIGKILLed in its write step: the real Triton
serves the old ensemble whole, ``builder validate`` names the mix on disk, the killed export's
scratch folder goes with the next export, and that export completes (serving the new one).

Every kill point is covered, without servers, by tests/builder/repository/test_repository_crash.py; this is
the worst one (every step's new version in place, the ensemble not yet committed) end to end.
The second test runs Triton in ``poll`` mode over a repository while a write pauses at each
of its holds, renames and commits and is killed half-way: every answer comes from the
version its config was written with.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.ensemble_models import transforms
from support import models, servers

pytestmark = pytest.mark.integration


def builder(*args: str, tmpdir: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    env.pop("BUILDER_FAULT_AT", None)
    if fault:
        env["BUILDER_FAULT_AT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=300, env=env
    )


def labels(server: Any, reg: models.Registered, raw: np.ndarray) -> tuple[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("input", list(raw.shape), "FP32")
    inp.set_data_from_numpy(raw)
    result = client.infer("crash_ensemble", [inp])
    return result.get_response().model_version, result.as_numpy("label")[:, 0]


def expected(reg: models.Registered, raw: np.ndarray) -> np.ndarray:
    features = transforms.preprocess(raw, reg.extra["spec"]["preprocess"])
    probs = reg.native.predict_proba(pd.DataFrame(features.astype(np.float64), columns=models.FEATURES))
    return (probs[:, 1] >= reg.extra["threshold"]).astype(np.int64)


def test_killed_ensemble_export(mlflow_registry: str, tmp_path: Path, start_triton: Any) -> None:
    old = models.sklearn_for_ensemble("crash", threshold=0.2)
    new = models.sklearn_for_ensemble("crash", threshold=0.8)
    repo, tmpdir = tmp_path / "model_repo", tmp_path / "tmp"
    tmpdir.mkdir()
    first = builder("export", "models:/crash/1", "--repo", str(repo), "--ensemble", tmpdir=tmpdir)
    assert first.returncode == 0, first.stderr
    killed = builder(
        "export", "models:/crash/2", "--repo", str(repo), "--ensemble",
        tmpdir=tmpdir, fault="version:crash_postprocess",
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (repo / "crash" / "2").is_dir() and (repo / "crash_postprocess" / "2").is_dir()
    left = [p.name for p in tmpdir.iterdir() if p.is_dir()]
    assert len(left) == 1 and left[0].startswith("builder-export-")  # what SIGKILL leaves

    raw = old.X.iloc[:64].to_numpy(dtype=np.float32)
    assert (expected(old, raw) != expected(new, raw)).any()  # the two exports are told apart
    server = start_triton(repo, model_control_mode="none")
    version, got = labels(server, old, raw)
    assert version == "1"
    np.testing.assert_array_equal(got, expected(old, raw))  # the old ensemble, whole
    servers.stop_now(server)

    check = builder("validate", "--repo", str(repo), tmpdir=tmpdir)
    assert check.returncode == 7  # ValidationError
    assert "mixed ensemble" in check.stdout + check.stderr

    again = builder("export", "models:/crash/2", "--repo", str(repo), "--ensemble", tmpdir=tmpdir)
    assert again.returncode == 0, again.stderr
    assert not [p.name for p in tmpdir.iterdir() if p.is_dir()]  # no scratch folder, old or new
    assert not list(repo.glob("*/.staging-*"))
    check = builder("validate", "--repo", str(repo), tmpdir=tmpdir)
    assert check.returncode == 0, check.stdout + check.stderr
    server = start_triton(repo, model_control_mode="none")
    version, got = labels(server, new, raw)
    assert version == "2"
    np.testing.assert_array_equal(got, expected(new, raw))


CHILD = """
import os, sys, time
from pathlib import Path
from builder.repository import write as repository
from tests.builder.repository.helpers import export_artifacts

repo, phase, kill_at = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]

def fault(point):
    phase.write_text(point)
    if point.split(":")[0] in ("hold", "version", "config"):
        time.sleep(2.5)  # two polls of Triton's at least: it sees this state
    if point == kill_at:
        os._exit(9)

repository._fault = fault
repository.write_models(repo, 2, export_artifacts(2, "fused"))
"""


def served(client: Any, name: str) -> tuple[str, str] | None:
    """(the version that answered a request, the ``test.export`` of the config around it), or
    None while Triton reloads (the config changed between the two reads, or no answer)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def export() -> str:
        config = client.get_model_config(name, as_json=True)["config"]
        return str(config["parameters"]["test.export"]["string_value"])

    inp = grpcclient.InferInput("input", [1, 3], "FP32")
    inp.set_data_from_numpy(np.ones((1, 3), np.float32))
    try:
        before = export()
        version = client.infer(name, [inp]).get_response().model_version
        after = export()
    except InferenceServerException:
        return None
    return (version, before) if before == after else None


def test_polling_triton_serves_each_model_whole_through_an_interrupted_write(
    tmp_path: Path, start_triton: Any
) -> None:
    """The layout of the demo (the bare model and the fused ``NAME_ensemble``, plain ONNX,
    ``latest:1``) under a Triton in ``poll`` mode: the write pauses at each hold, rename and
    commit for two polls, and is killed once the fused model's new folder is renamed in beside
    its old config. Every answer comes from the version its config was written with."""
    import tritonclient.grpc as grpcclient

    from builder.repository.write import write_models
    from tests.builder.repository.helpers import export_artifacts

    repo, phase = tmp_path / "model_repo", tmp_path / "phase"
    write_models(repo, 1, export_artifacts(1, "fused"))
    server = start_triton(repo, model_control_mode="poll", extra_args=["--repository-poll-secs=1"])
    client = grpcclient.InferenceServerClient(server.grpc_url)
    names = ("tiny", "tiny_ensemble")
    root = Path(__file__).resolve().parents[3]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(repo), str(phase), "version:tiny_ensemble"],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
    )
    seen: dict[str, dict[str, set[tuple[str, str]]]] = {}
    while child.poll() is None:
        point = phase.read_text() if phase.exists() else "start"
        for name in names:
            got = served(client, name)
            if got is not None:
                seen.setdefault(point, {}).setdefault(name, set()).add(got)
        time.sleep(0.05)
    assert child.returncode == 9
    deadline = time.monotonic() + 3  # the killed state, as the next polls see it
    after_kill: dict[str, set[tuple[str, str]]] = {name: set() for name in names}
    while time.monotonic() < deadline:
        for name in names:
            got = served(client, name)
            if got is not None:
                after_kill[name].add(got)
        time.sleep(0.05)

    everything = [*(s for by_name in seen.values() for s in by_name.values()), *after_kill.values()]
    assert all(version == export for pairs in everything for version, export in pairs), seen
    assert seen["version:tiny"]["tiny"] == {("1", "1")}  # the new folder in place: still inert
    assert ("2", "2") in after_kill["tiny"]  # committed before the kill
    assert after_kill["tiny_ensemble"] == {("1", "1")}  # not committed: the old one, whole

    check = builder("validate", "--repo", str(repo), tmpdir=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr  # a consistent state, pinned

    write_models(repo, 2, export_artifacts(2, "fused"))  # the next export rolls forward
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and {served(client, n) for n in names} != {("2", "2")}:
        time.sleep(0.2)
    assert {served(client, n) for n in names} == {("2", "2")}
