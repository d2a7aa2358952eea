"""What ``--explain`` refuses (one ``error:`` line and a ``hint:``, the export's exit code,
nothing written), the run's tag that asks for an explainer, and ``builder validate`` catching
an explainer left behind by a newer version of its model. No server: the repository is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from builder.errors import ConversionError, UsageError
from tests.builder.explain.helpers import export, fit_and_register, pipeline, refused_models

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def refused(mlflow_registry: str) -> dict[str, Any]:
    return {
        name: fit_and_register(name, model, "multiclass" if name == "xr_gbc3" else "binary")
        for name, (model, _) in refused_models().items()
    }


def test_the_cli_refuses_a_model_without_an_exact_explainer_in_two_lines(
    refused: dict[str, Any], tmp_path: Path
):
    repo = tmp_path / "repo"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "builder",
            "export",
            "models:/xr_svc@champion",
            "--repo",
            str(repo),
            "--explain",
        ],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    assert done.returncode == ConversionError.exit_code, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[0] == "error: xr_svc version 1: SVC has no exact explainer"
    assert lines[1].startswith("hint: ") and "without --explain" in lines[1]
    assert "Traceback" not in done.stderr
    assert not repo.exists() or not any(repo.iterdir())  # nothing written


@pytest.mark.parametrize("name", [n for n in refused_models() if n != "xr_svc"])
def test_models_and_transforms_with_no_exact_per_column_values_are_refused(
    refused: dict[str, Any], tmp_path: Path, name: str
):
    repo = tmp_path / "repo"
    with pytest.raises(ConversionError) as caught:
        export(refused[name], repo)
    assert refused_models()[name][1] in caught.value.message
    assert caught.value.hint
    assert not repo.exists() or not any(repo.iterdir())


def test_the_same_models_export_without_explain(refused: dict[str, Any], tmp_path: Path):
    from builder.export import ExportRequest, export_model

    result = export_model(ExportRequest(model_uri="models:/xr_pca@champion", repo=tmp_path / "repo"))
    assert [w.name for w in result.written] == ["xr_pca"]


def test_explain_and_keep_serving_are_refused_together(tmp_path: Path):
    from builder.export import ExportRequest

    with pytest.raises(UsageError, match="--keep-serving cannot be used with --explain"):
        ExportRequest(model_uri="models:/m@champion", repo=tmp_path, explain=True, keep_serving=True)


def test_a_linear_model_without_training_rows_is_refused(mlflow_registry: str, tmp_path: Path):
    import warnings

    import mlflow
    from sklearn.linear_model import LogisticRegression

    from tests.builder.explain.helpers import frame, labels

    x = frame(100, 0)
    model = LogisticRegression(max_iter=300).fit(x, labels(x, "binary"))
    with mlflow.start_run(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=x.iloc[:5],
            registered_model_name="xr_norows",
            pip_requirements=["sklearn"],
        )
    mlflow.MlflowClient().set_registered_model_alias("xr_norows", "champion", "1")
    from builder.export import ExportRequest, export_model

    with pytest.raises(UsageError, match="training rows' mean") as caught:
        export_model(ExportRequest(model_uri="models:/xr_norows@champion", repo=tmp_path / "r", explain=True))
    assert "log_reference" in (caught.value.hint or "")


def test_the_run_tag_asks_for_the_explainer_and_no_explain_overrides_it(mlflow_registry: str, tmp_path: Path):
    from mlflow import MlflowClient
    from sklearn.tree import DecisionTreeClassifier

    from builder.export import ExportRequest, export_model
    from serving_contract import keys

    case = fit_and_register("xr_tagged", DecisionTreeClassifier(max_depth=3), "binary")
    version = MlflowClient().get_model_version("xr_tagged", "1")
    MlflowClient().set_tag(str(version.run_id), keys.EXPLAIN_TAG, "true")
    asked = export_model(ExportRequest(model_uri="models:/xr_tagged@champion", repo=tmp_path / "a"))
    assert [w.name for w in asked.written] == ["xr_tagged", "xr_tagged_explain"]
    off = export_model(
        ExportRequest(model_uri="models:/xr_tagged@champion", repo=tmp_path / "b", explain=False)
    )
    assert [w.name for w in off.written] == ["xr_tagged"]
    del case


def test_validate_catches_an_explainer_left_beside_a_newer_version(mlflow_registry: str, tmp_path: Path):
    from sklearn.tree import DecisionTreeClassifier

    from builder.export import ExportRequest, export_model
    from builder.repository.validate import validate_repository

    repo = tmp_path / "repo"
    first = fit_and_register("xr_versions", DecisionTreeClassifier(max_depth=3), "binary")
    export(first, repo)
    assert validate_repository(repo)[1] == []
    fit_and_register("xr_versions", DecisionTreeClassifier(max_depth=4), "binary")  # version 2
    export_model(ExportRequest(model_uri="models:/xr_versions@champion", repo=repo, explain=False))
    problems = validate_repository(repo)[1]
    assert any(
        p.startswith("xr_versions_explain: explains xr_versions version 1, but xr_versions serves version 2")
        for p in problems
    ), problems
    export(first, repo, force=True)  # version 2 again, with its explainer: another config, so forced
    assert validate_repository(repo)[1] == []


def test_an_ensemble_that_preprocesses_the_models_inputs_is_refused(mlflow_registry: str, tmp_path: Path):
    """The gateway sends the explainer the ensemble's raw inputs; with a preprocess stage (the
    run's impute/scale spec) those are not the model's, so --explain is refused, nothing written."""
    from builder.export import ExportRequest, export_model
    from support import models

    models.sklearn_for_ensemble("xr_ens")
    repo = tmp_path / "repo"
    with pytest.raises(ConversionError) as caught:
        export_model(ExportRequest("models:/xr_ens@champion", repo, ensemble=True, explain=True))
    assert "generated preprocess stage changes the model's inputs" in caught.value.message
    assert "\n" not in caught.value.message and caught.value.hint
    assert not repo.exists() or not any(repo.iterdir())


def test_an_ensemble_of_a_typed_pipeline_is_explained_and_validates(mlflow_registry: str, tmp_path: Path):
    """The demo's shape: a typed Pipeline served as ``<model>_ensemble`` (post-only stages),
    whose contract names the bare model's explainer; `builder validate` accepts it."""
    from sklearn.ensemble import GradientBoostingClassifier

    from builder.repository.validate import validate_repository

    model = pipeline(GradientBoostingClassifier(n_estimators=5))
    case = fit_and_register("xr_typed_ens", model, "binary", strings=True)
    repo = tmp_path / "repo"
    written = export(case, repo, ensemble=True, ensemble_mode="fused").written
    assert {w.name for w in written} >= {"xr_typed_ens", "xr_typed_ens_ensemble", "xr_typed_ens_explain"}
    assert validate_repository(repo)[1] == []
