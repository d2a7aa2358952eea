"""Bad input to `builder export`: each case is refused with one clear line and its exit code,
writes nothing, and leaves the repository as valid as it was. Run through the CLI's own entry
(``run_app``) in this process, and one case through a real ``python -m builder`` process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.export import ExportRequest, export_model
from support import models
from tests.builder.helpers import builder_in_process

pytestmark = pytest.mark.integration


def builder_process(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=timeout
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def registry_models(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import mlflow
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X, y = models.dataset()
    made: dict[str, Any] = {"good": models.sklearn_classifier("err-good")}
    with mlflow.start_run():
        mlflow.sklearn.log_model(
            GradientBoostingClassifier(n_estimators=5).fit(X, y),
            name="model",
            registered_model_name="err-nosig",
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            pip_requirements=["scikit-learn"],  # given: inferring them takes seconds
        )
    mlflow.MlflowClient().set_registered_model_alias("err-nosig", "champion", "1")

    class Echo(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input):  # type: ignore[no-untyped-def]  (hints upset MLflow)
            return model_input

    with mlflow.start_run():
        mlflow.pyfunc.log_model(
            name="model",
            python_model=Echo(),
            input_example=X.iloc[:2],
            registered_model_name="err-pyfunc",
            pip_requirements=["mlflow"],
        )
    # A custom Python function step: skl2onnx has no converter for it.
    custom = make_pipeline(FunctionTransformer(np.log1p), GradientBoostingClassifier(n_estimators=5)).fit(
        X, y
    )
    with mlflow.start_run():
        mlflow.sklearn.log_model(
            custom,
            name="model",
            input_example=X.iloc[:3],
            registered_model_name="err-custom-op",
            skops_trusted_types=["sklearn.tree._tree.Tree", "numpy.log1p"],
            pip_requirements=["scikit-learn"],
        )
    corrupt = models.sklearn_classifier("err-corrupt")
    info = mlflow.MlflowClient().get_model_version("err-corrupt", str(corrupt.version))
    model_id = info.model_id or info.source.rsplit("/", 1)[-1]  # source is models:/m-<id>
    location = mlflow.get_logged_model(model_id).artifact_location
    skops = Path(location.removeprefix("file://")) / "model.skops"
    assert skops.is_file()
    skops.write_bytes(b"\x00 not a skops archive")

    repo = tmp_path_factory.mktemp("errors") / "model_repo"
    export_model(ExportRequest("models:/err-good@champion", repo, ensemble=False))
    made["repo"] = repo
    return made


CASES = [
    # (id, args after `export`, exit code, fragment of the one-line reason)
    ("no-signature", ["models:/err-nosig@champion"], 4, "without a signature"),
    ("unknown-alias", ["models:/err-good@staging"], 3, "has no alias 'staging'"),
    ("unknown-model", ["models:/nobody@champion"], 3, "no registered model named 'nobody'"),
    ("unknown-version", ["models:/err-good/99"], 3, "has no version 99"),
    ("unsupported-flavor", ["models:/err-pyfunc/1"], 4, "flavor(s) python_function only"),
    ("unconvertible-op", ["models:/err-custom-op/1"], 4, "skl2onnx cannot convert"),
    ("corrupted-artifact", ["models:/err-corrupt@champion"], 4, "cannot be loaded"),
    ("path-traversal", ["models:/err-good@champion", "--name", "../evil"], 2, "escape the model repository"),
    (
        "parity-failure",
        ["models:/err-good@champion", "--name", "strict", "--atol", "0", "--rtol", "0"],
        5,
        "differs from the original",
    ),
    ("bad-uri", ["models:/err-good"], 2, "names no version or alias"),
    (
        "tensorrt-without-gpu",
        ["models:/err-good@champion", "--name", "trt", "--format", "tensorrt"],
        9,
        "needs an NVIDIA GPU",
    ),
]


@pytest.mark.parametrize("args, code, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusal_is_clear_and_writes_nothing(
    registry_models: dict[str, Any], args: list[str], code: int, fragment: str
):
    repo = registry_models["repo"]
    before = snapshot(repo)
    result = builder_in_process("export", *args, "--repo", str(repo))
    assert result.returncode == code, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert fragment in errors[0]
    assert "Traceback" not in result.stderr
    assert any(line.startswith("hint:") for line in result.stderr.splitlines()), result.stderr
    assert snapshot(repo) == before, "a refused export changed the repository"
    assert not (repo.parent / "evil").exists()


def test_a_misspelt_alias_gets_the_alias_it_meant_not_an_offer_to_create_it(registry_models: dict[str, Any]):
    result = builder_in_process("export", "models:/err-good@champoin", "--repo", str(registry_models["repo"]))
    assert result.returncode == 3, result.stderr
    (hint,) = [line for line in result.stderr.splitlines() if line.startswith("hint:")]
    assert "did you mean models:/err-good@champion?" in hint and "set_registered_model_alias" not in hint


def test_parity_failure_reports_the_figures(registry_models: dict[str, Any]):
    result = builder_in_process(
        "export",
        "models:/err-good@champion",
        "--repo",
        str(registry_models["repo"]),
        "--name",
        "strict",
        "--atol",
        "0",
        "--rtol",
        "0",
        "--json",
    )
    assert result.returncode == 5
    assert "max abs err" in result.stdout and "outside tolerance" in result.stdout


def test_repository_still_valid_after_refusals(registry_models: dict[str, Any]):
    result = builder_in_process("validate", "--repo", str(registry_models["repo"]))
    assert result.returncode == 0, result.stderr


def test_reexport_is_idempotent_through_the_cli(registry_models: dict[str, Any]):
    repo = registry_models["repo"]
    before = snapshot(repo)
    result = builder_in_process("export", "models:/err-good@champion", "--repo", str(repo), "--json")
    assert result.returncode == 0, result.stderr
    import json

    out = json.loads(result.stdout)
    assert [m["status"] for m in out["models"]] == ["unchanged"]
    assert snapshot(repo) == before


def test_a_refusal_through_a_real_process(registry_models: dict[str, Any]) -> None:
    """The process boundary: exit code from ``sys.exit``, one error line, no traceback."""
    repo = registry_models["repo"]
    before = snapshot(repo)
    result = builder_process("export", "models:/err-good@staging", "--repo", str(repo))
    assert result.returncode == 3, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "has no alias 'staging'" in errors[0], result.stderr
    assert "Traceback" not in result.stderr and snapshot(repo) == before
