"""The ``triton-stack`` MLflow deployments plugin (builder/mlflow_deploy/), as an MLflow user
drives it: through ``mlflow.deployments.get_deploy_client`` and the ``mlflow deployments`` CLI,
against the real SQLite registry and one real tritonserver in explicit model-control mode on a
temp repository. A deployment is created (exported, loaded), listed, read, asked for
predictions (the sklearn model's own answers), updated to a second registry version (its
answers then), deleted (unloaded, its folder gone, predict refused); refusals arrive as one
``MlflowException`` line with an MLflow error code, and as one ``Error:`` line from the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from mlflow.deployments import BaseDeploymentClient, PredictionsResponse, get_deploy_client
from mlflow.exceptions import MlflowException

from builder.runtime.paths import RuntimePaths
from builder.runtime.ports import free_ports
from builder.runtime.server import ServerOptions, TritonServer
from support import models, servers

pytestmark = pytest.mark.integration

NAME = "mlfd-fraud"


@pytest.fixture(scope="module")
def fitted(mlflow_registry: str) -> dict[int, Any]:
    """Two registry versions of one model, with different answers: version -> native model."""
    from sklearn.linear_model import LogisticRegression

    X, y = models.dataset(200)
    natives = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in (1.0, 0.01):
            model = LogisticRegression(C=c, max_iter=500).fit(X, y)
            natives[models.register_fitted(NAME, model, X)] = model
    return natives


@pytest.fixture(scope="module")
def triton(triton_runtime: RuntimePaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """One tritonserver on an empty repository, explicit model control: the plugin loads."""
    root = tmp_path_factory.mktemp("mlflow-deployments")
    (root / "model_repo").mkdir()
    server = TritonServer(
        root / "model_repo", ServerOptions.explicit([]), runtime=triton_runtime, log_path=root / "triton.log"
    )
    server.start(timeout=120)
    yield server
    servers.stop_now(server)


@pytest.fixture(scope="module")
def target(triton: TritonServer) -> str:
    return f"triton-stack:{triton.repo}?triton=http://{triton.http_url}"


@pytest.fixture(scope="module")
def client(target: str) -> BaseDeploymentClient:
    return get_deploy_client(target)


def rows() -> pd.DataFrame:
    X, _ = models.dataset(100, seed=7)  # more rows than one request carries (max_batch_size 64)
    return X


def assert_answers(response: PredictionsResponse, native: Any, X: pd.DataFrame) -> None:
    got = response["predictions"]
    np.testing.assert_allclose(np.array(got["probabilities"]), native.predict_proba(X), atol=1e-5)
    np.testing.assert_array_equal(np.array(got["label"]), native.predict(X))


def refusal(excinfo: pytest.ExceptionInfo[MlflowException]) -> str:
    message = excinfo.value.message
    assert "\n" not in message and "Traceback" not in message
    return str(message)


def test_a_deployment_is_created_served_updated_and_deleted(
    client: BaseDeploymentClient, fitted: dict[int, Any], triton: TritonServer
) -> None:
    v1, v2 = sorted(fitted)
    X = rows()

    created = client.create_deployment(NAME, f"models:/{NAME}/{v1}")
    assert created["name"] == NAME and created["version"] == v1 and created["parity"]["passed"]
    assert {
        "name": NAME,
        "state": "READY",
        "versions": [{"version": v1, "state": "READY", "reason": ""}],
    } in (client.list_deployments())
    got = client.get_deployment(NAME)
    assert got["state"] == "READY" and got["serving"]["serving.layout"] == "matrix"
    assert json.loads(got["serving"]["serving.classes"]) == [0, 1]

    answer = client.predict(NAME, X)  # 100 rows: two requests of at most max_batch_size 64
    assert isinstance(answer, PredictionsResponse) and answer["model_version"] == v1
    assert_answers(answer, fitted[v1], X)
    # MLflow's serving JSON, as `mlflow models predict` takes it
    split = json.loads(X.iloc[:3].to_json(orient="split"))
    assert_answers(client.predict(NAME, {"dataframe_split": split}), fitted[v1], X.iloc[:3])
    assert answer.get_predictions().shape == (100, 2)

    with pytest.raises(MlflowException) as excinfo:
        client.create_deployment(NAME, f"models:/{NAME}/{v2}")
    assert excinfo.value.error_code == "RESOURCE_ALREADY_EXISTS" and NAME in refusal(excinfo)

    updated = client.update_deployment(NAME, f"models:/{NAME}@champion")  # champion: v2
    assert updated["version"] == v2
    answer = client.predict(NAME, X)
    assert answer["model_version"] == v2
    assert_answers(answer, fitted[v2], X)
    assert [v["version"] for v in client.get_deployment(NAME)["versions"] if v["state"] == "READY"] == [v2]

    client.delete_deployment(NAME)
    assert not (triton.repo / NAME).exists()
    assert not any(m["name"] == NAME and m.get("state") == "READY" for m in triton.models())
    with pytest.raises(MlflowException) as excinfo:
        client.predict(NAME, X)
    assert excinfo.value.error_code == "RESOURCE_DOES_NOT_EXIST" and "not loaded" in refusal(excinfo)
    client.delete_deployment(NAME)  # idempotent, as MLflow asks


def test_refusals_are_one_mlflow_exception_line_and_write_nothing(
    client: BaseDeploymentClient, fitted: dict[int, Any], triton: TritonServer, target: str, tmp_path: Path
) -> None:
    with pytest.raises(MlflowException) as excinfo:
        client.create_deployment("mlfd-missing", "models:/no-such-model@champion")
    assert excinfo.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    assert "no-such-model" in refusal(excinfo)
    assert not (triton.repo / "mlfd-missing").exists()

    with pytest.raises(MlflowException) as excinfo:
        client.get_deployment("mlfd-nobody")
    assert excinfo.value.error_code == "RESOURCE_DOES_NOT_EXIST"

    with pytest.raises(MlflowException) as excinfo:
        client.create_deployment("mlfd-flavor", f"models:/{NAME}/1", flavor="sklearn")
    assert excinfo.value.error_code == "INVALID_PARAMETER_VALUE" and "hint:" in refusal(excinfo)

    with pytest.raises(MlflowException) as excinfo:
        client.create_deployment("mlfd-typo", f"models:/{NAME}/1", config={"ensembel": "true"})
    assert "ensembel" in refusal(excinfo)

    down = get_deploy_client(f"triton-stack:{triton.repo}?triton=http://127.0.0.1:1")
    with pytest.raises(MlflowException) as excinfo:
        down.create_deployment("mlfd-down", f"models:/{NAME}/1")
    assert excinfo.value.error_code == "TEMPORARILY_UNAVAILABLE" and "does not answer" in refusal(excinfo)
    assert not (triton.repo / "mlfd-down").exists()

    with pytest.raises(MlflowException) as excinfo:
        get_deploy_client("triton-stack:s3://bucket/model_repo")
    assert "not a local folder" in refusal(excinfo)

    # the README's placeholder typed as is: refused, and no folder made at that path
    placeholder = tmp_path / "abs" / "path" / "model_repo"
    typed = get_deploy_client(f"triton-stack:{placeholder}?triton=http://{triton.http_url}")
    with pytest.raises(MlflowException) as excinfo:
        typed.create_deployment("mlfd-placeholder", f"models:/{NAME}/1")
    assert "does not exist" in refusal(excinfo) and "--model-control-mode explicit" in refusal(excinfo)
    assert not (tmp_path / "abs").exists()
    # a folder that exists but is not the one this Triton serves: refused before writing
    elsewhere = tmp_path / "other_repo"
    (elsewhere / "some_model").mkdir(parents=True)
    wrong = get_deploy_client(f"triton-stack:{elsewhere}?triton=http://{triton.http_url}")
    with pytest.raises(MlflowException) as excinfo:
        wrong.create_deployment("mlfd-elsewhere", f"models:/{NAME}/1")
    assert "does not serve" in refusal(excinfo)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["some_model"]


def mlflow_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("mlflow")), "deployments", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=dict(os.environ))


def test_the_mlflow_deployments_cli_creates_and_predicts(
    target: str, fitted: dict[int, Any], tmp_path: Path
) -> None:
    name, v1 = "mlfd-cli", min(fitted)
    done = mlflow_cli("create", "-t", target, "-m", f"models:/{NAME}/{v1}", "--name", name)
    assert done.returncode == 0, done.stderr
    assert name in done.stdout

    X = rows().iloc[:5]
    payload = tmp_path / "input.json"
    payload.write_text(json.dumps({"dataframe_split": json.loads(X.to_json(orient="split"))}))
    done = mlflow_cli("predict", "-t", target, "--name", name, "--input-path", str(payload))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(
        np.array(answer["predictions"]["probabilities"]), fitted[v1].predict_proba(X), atol=1e-5
    )

    # a refusal through the CLI: the refused predict of a name that is not deployed (the client's
    # refusals, each a one-line MlflowException, are tested above; one mlflow start is ~8 s here)
    done = mlflow_cli("predict", "-t", target, "--name", "mlfd-cli-missing", "--input-path", str(payload))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "mlfd-cli-missing" in errors[0]

    # (delete through the CLI is the client's delete_deployment, tested above: one mlflow start
    # is ~8 s of imports here)
    get_deploy_client(target).delete_deployment(name)


def test_run_local_serves_until_sigterm_and_removes_its_repository(
    fitted: dict[int, Any], triton_runtime: RuntimePaths, tmp_path: Path
) -> None:
    """``mlflow deployments run-local``: exported into a temp repository, served in the
    foreground, stopped by SIGTERM (what Kubernetes and `kill` send) with exit 0, nothing left."""
    http, grpc, metrics = free_ports(3)
    command = [
        str(Path(sys.executable).with_name("mlflow")), "deployments", "run-local", "-t", "triton-stack",
        "-m", f"models:/{NAME}/{min(fitted)}", "--name", "mlfd-local",
        "-C", f"http_port={http}", "-C", f"grpc_port={grpc}", "-C", f"metrics_port={metrics}",
    ]  # fmt: skip
    env = dict(os.environ, BUILDER_RUNTIME_DIR=str(triton_runtime.root), TMPDIR=str(tmp_path))
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    with subprocess.Popen(command, env=env, **output) as proc:  # type: ignore[call-overload]
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("serving "):
                    break
            assert f"http://127.0.0.1:{http}" in "".join(lines), "".join(lines)
            ready = f"http://127.0.0.1:{http}/v2/models/mlfd-local/ready"
            with urllib.request.urlopen(ready, timeout=5) as response:
                assert response.status == 200
            proc.send_signal(signal.SIGTERM)
            rest, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, "".join(lines) + rest
    assert "stopping" in rest and "Traceback" not in rest
    assert not list(tmp_path.glob("triton-stack-*")), "the temp repository was left behind"
