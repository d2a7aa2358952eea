"""``builder export --ensemble`` (the real CLI) SIGKILLed in its write step: the real Triton
serves the old ensemble whole, ``builder validate`` names the mix on disk, the killed export's
scratch folder goes with the next export, and that export completes (serving the new one).

Every kill point is covered, without servers, by tests/unit/test_repository_crash.py; this is
the worst one (every step's new version in place, the ensemble not yet committed) end to end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.ensemble_models import transforms
from tests import models

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
    server.stop()

    check = builder("validate", "--repo", str(repo), tmpdir=tmpdir)
    assert check.returncode != 0
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
