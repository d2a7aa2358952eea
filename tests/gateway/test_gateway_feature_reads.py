"""The gateway reads features without the Feast SDK (issue 33): `gateway serve` compiles the
feature services in a child process and serves from the specs, the serving process never maps
pandas or pyarrow, the answers equal the SDK reader's, and a deployment can compile once
(`gateway compile-features`) and serve with no feature repository at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests

from support import servers
from tests.gateway.helpers import MODEL, ROWS, Stack, expected_scores, gateway_env

pytestmark = pytest.mark.integration


def _scores(gw: servers.Gateway) -> np.ndarray:
    response = requests.post(f"{gw.url}/v1/models/{MODEL}/predict", json={"rows": ROWS}, timeout=30)
    assert response.status_code == 200, response.text
    return np.array([p["score"] for p in response.json()["predictions"]])


def _mapped(pid: int) -> str:
    """Every file the process has mapped (its shared libraries: pyarrow's and pandas' are .so files)."""
    return Path(f"/proc/{pid}/maps").read_text()


def _gateway(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, cwd=cwd, timeout=180
    )


def test_the_direct_reader_answers_as_the_sdk_without_pandas_or_pyarrow(stack: Stack, tmp_path: Path) -> None:
    with servers.gateway_process(tmp_path, gateway_env(stack, compiled=False)) as direct:
        direct_scores = _scores(direct)
        maps = _mapped(direct.proc.pid)
    with servers.gateway_process(tmp_path, gateway_env(stack, GATEWAY_FEATURE_READER="sdk")) as sdk:
        sdk_scores = _scores(sdk)
        sdk_maps = _mapped(sdk.proc.pid)
    np.testing.assert_allclose(direct_scores, expected_scores(stack, ROWS), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(direct_scores, sdk_scores)
    assert "pyarrow" not in maps and "/pandas/" not in maps
    assert "pyarrow" in sdk_maps  # the check sees what `import feast` brings, when it is there


def test_compiled_once_the_gateway_serves_without_the_feature_repository(
    stack: Stack, tmp_path: Path
) -> None:
    specs = tmp_path / "specs"
    done = _gateway(
        tmp_path, "compile-features", "--feature-repo", str(stack.feature_repo), "--out", str(specs)
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((specs / "refused.json").read_text()) == {}
    env = gateway_env(stack, GATEWAY_FEATURE_SPECS=str(specs), GATEWAY_FEATURE_REPO=str(tmp_path / "nowhere"))
    with servers.gateway_process(tmp_path, env) as gw:
        np.testing.assert_allclose(_scores(gw), expected_scores(stack, ROWS), rtol=1e-5, atol=1e-6)


def test_specs_that_cannot_be_served_are_one_line_each(stack: Stack, tmp_path: Path) -> None:
    not_a_folder = _gateway(tmp_path, "serve", "--feature-specs", str(tmp_path / "missing"))
    assert not_a_folder.returncode == 2
    assert "error: " in not_a_folder.stderr and "is not a folder of feature specs" in not_a_folder.stderr
    not_a_repo = _gateway(
        tmp_path, "compile-features", "--feature-repo", str(tmp_path), "--out", str(tmp_path / "o")
    )
    assert not_a_repo.returncode == 2 and "feature_store.yaml" in not_a_repo.stderr
    for done in (not_a_folder, not_a_repo):
        assert "Traceback" not in done.stderr and "hint:" in done.stderr
    specs = tmp_path / "stale"
    done = _gateway(
        tmp_path, "compile-features", "--feature-repo", str(stack.feature_repo), "--out", str(specs)
    )
    assert done.returncode == 0, done.stderr
    path = next(p for p in specs.glob("*.json") if p.name != "refused.json")
    spec = json.loads(path.read_text())
    spec["feast_version"] = "0.1.0"  # a store layout the reader does not know: refused at start
    path.write_text(json.dumps(spec))
    env = gateway_env(stack, GATEWAY_FEATURE_SPECS=str(specs))
    with pytest.raises(servers.ServerStartError) as caught, servers.gateway_process(tmp_path, env):
        pass
    said = str(caught.value)
    assert "Feast 0.1.0" in said and "Traceback" not in said
