"""Registry refusals that never mislead: a missing SQLite registry is reported, not created; an
unknown model's hint names a command that exists; a flavor the builder does not convert (H2O) is
refused naming those it does. Through the real CLI: a process where the registry is looked up
from the environment and the working folder, the CLI's entry in this process where it is the
session's registry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.errors import ConversionError, RegistryError
from tests.builder.helpers import builder_in_process

pytestmark = pytest.mark.integration


def builder(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


def _error_and_hint(stderr: str) -> tuple[str, str]:
    lines = stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    hints = [line for line in lines if line.startswith("hint:")]
    assert len(errors) == 1 and hints, stderr
    assert "Traceback" not in stderr
    return errors[0], hints[0]


def test_missing_default_registry_is_reported_not_created(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    result = builder("export", "models:/x@y", "--repo", "r", cwd=tmp_path, env=env)
    assert result.returncode == RegistryError.exit_code, result.stderr
    error, hint = _error_and_hint(result.stderr)
    assert "no MLflow registry at sqlite:///mlflow.db" in error and "does not exist" in error
    assert "MLFLOW_TRACKING_URI" in hint
    assert list(tmp_path.iterdir()) == [], "the refused export created files"


def test_missing_sqlite_file_named_by_the_environment(tmp_path: Path):
    missing = tmp_path / "nowhere" / "mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{missing}"}
    result = builder("export", "models:/x@y", "--repo", str(tmp_path / "r"), env=env)
    assert result.returncode == RegistryError.exit_code, result.stderr
    error, _ = _error_and_hint(result.stderr)
    assert f"no MLflow registry at sqlite:///{missing}" in error
    assert not missing.parent.exists()


def test_unknown_model_hint_names_a_real_command(mlflow_registry: str, tmp_path: Path):
    result = builder_in_process("export", "models:/nobody-here@champion", "--repo", str(tmp_path / "r"))
    assert result.returncode == RegistryError.exit_code, result.stderr
    error, hint = _error_and_hint(result.stderr)
    assert "no registered model named 'nobody-here'" in error
    assert "`mlflow models`" not in hint
    assert f"mlflow ui --backend-store-uri {mlflow_registry}" in hint
    assert "search_registered_models" in hint
    # The command the hint names exists in this environment.
    ui = subprocess.run([sys.executable, "-m", "mlflow", "ui", "--help"], capture_output=True, text=True)
    assert ui.returncode == 0 and "--backend-store-uri" in ui.stdout


def test_an_unsupported_flavor_is_a_clear_refusal(mlflow_registry: str, tmp_path: Path):
    """An MLmodel that lists only an ``h2o`` flavor (what mlflow.h2o logs) is refused naming the
    supported flavors, before anything is loaded."""
    import mlflow

    model_dir = tmp_path / "h2o_model"
    model_dir.mkdir()
    (model_dir / "MLmodel").write_text(
        "artifact_path: model\n"
        "flavors:\n"
        "  h2o:\n"
        "    h2o_version: 3.46.0.7\n"
        "    data: model.h2o\n"
        "mlflow_version: 3.17.2\n"
    )
    with mlflow.start_run() as run:
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
    result = builder_in_process(
        "export", f"runs:/{run.info.run_id}/model", "--name", "h2o", "--repo", str(tmp_path / "r")
    )
    assert result.returncode == ConversionError.exit_code, result.stderr
    error, hint = _error_and_hint(result.stderr)
    assert "has flavor(s) h2o" in error
    assert "onnx, pytorch, keras, tensorflow, xgboost, lightgbm, catboost, sklearn" in error
    assert "mlflow.onnx.log_model" in hint
    assert not (tmp_path / "r").exists()
