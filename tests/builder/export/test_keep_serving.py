"""``builder export --keep-serving``: a challenger version loaded beside the champion, through the
real MLflow registry. The config loads both versions and records the champion (the gateway names
it; Triton would send a request that names no version to the challenger) and keeps its drift
reference; a challenger whose serving contract differs, a repository where nothing serves yet,
and an ensemble are refused in one line with nothing written; a plain export of the challenger
afterwards promotes it; and one Triton loads both versions."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.errors import RepositoryError
from builder.export import ExportRequest, export_model
from builder.repository.triton_config import ModelConfig, parse_pbtxt
from support import models, servers

pytestmark = pytest.mark.integration

NAME = "ks-fraud"


@pytest.fixture(scope="module")
def versions(mlflow_registry: str) -> dict[str, int]:
    """v1 the champion, v2 a challenger (another fit, same contract), v3 the same model read
    through another Feast feature service (another contract), v4 a later challenger."""
    from sklearn.linear_model import LogisticRegression

    X, y = models.dataset(200)
    service = {"feast.feature_service": "fraud_v1"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        champion = LogisticRegression(C=1.0, max_iter=500).fit(X, y)
        challenger = LogisticRegression(C=0.01, max_iter=500).fit(X, y)
    return {
        "champion": models.register_fitted(NAME, champion, X, tags=service, reference=True),
        "challenger": models.register_fitted(NAME, challenger, X, tags=service, reference=True),
        "other-contract": models.register_fitted(
            NAME, challenger, X, tags={"feast.feature_service": "fraud_v2"}, reference=True
        ),
        "next-challenger": models.register_fitted(NAME, challenger, X, tags=service, reference=True),
    }


def uri(version: int) -> str:
    return f"models:/{NAME}/{version}"


def config(repo: Path) -> ModelConfig:
    return parse_pbtxt((repo / NAME / "config.pbtxt").read_text())


def parameters(repo: Path) -> dict[str, str]:
    return {k: v.string_value for k, v in config(repo).parameters.items()}


def metadata(repo: Path, version: int) -> dict[str, Any]:
    return dict(json.loads((repo / NAME / str(version) / "metadata.json").read_text()))


def policy(repo: Path) -> str:
    return config(repo).version_policy.WhichOneof("policy_choice") or ""


def snapshot(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}


def builder_cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any) -> tuple[int, list[str]]:
    """``builder ARGS`` in this process, under the CLI's error contract: exit code, stderr lines."""
    from builder.cli.main import _register_commands, app, report_error, run_app

    _register_commands()
    monkeypatch.setattr(sys, "argv", ["builder", *args])
    code = run_app(app, "builder", report_error)
    return code, capsys.readouterr().err.splitlines()


def one_refusal(lines: list[str]) -> tuple[str, str]:
    errors = [ln for ln in lines if ln.startswith("error:")]
    hints = [ln for ln in lines if ln.startswith("hint:")]
    assert len(errors) == 1 and len(hints) == 1, lines
    assert not any("Traceback" in ln for ln in lines), lines
    return errors[0], hints[0]


@pytest.fixture(scope="module")
def served(versions: dict[str, int], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The champion exported plainly, then the challenger with --keep-serving (through the CLI's
    request), in a repository of its own."""
    repo = tmp_path_factory.mktemp("keep-serving") / "model_repo"
    export_model(ExportRequest(uri(versions["champion"]), repo))
    export_model(ExportRequest(uri(versions["challenger"]), repo, keep_serving=True))
    return repo


def test_both_versions_load_and_the_config_records_the_champion(
    served: Path, versions: dict[str, int]
) -> None:
    champion, challenger = versions["champion"], versions["challenger"]
    assert (served / NAME / str(champion) / "model.onnx").is_file()
    assert (served / NAME / str(challenger) / "model.onnx").is_file()
    loaded = config(served).version_policy
    assert policy(served) == "specific" and list(loaded.specific.versions) == [champion, challenger]
    params = parameters(served)
    assert params["serving.champion_version"] == str(champion)
    # The export's identity is the challenger's (it wrote the config), the drift reference the
    # champion's (the champion serves: drift is measured against it).
    meta = {v: metadata(served, v) for v in (champion, challenger)}
    assert params["builder.export_identity"] == meta[challenger]["identity"]
    reference = json.loads(params["drift.reference"])
    assert reference == meta[champion]["drift"]["reference"]
    assert reference != meta[challenger]["drift"]["reference"]
    assert params["feast.feature_service"] == "fraud_v1"


def test_exporting_the_challenger_again_changes_nothing(served: Path, versions: dict[str, int]) -> None:
    before = snapshot(served)
    result = export_model(ExportRequest(uri(versions["challenger"]), served, keep_serving=True))
    assert [w.status for w in result.written] == ["unchanged"]
    assert snapshot(served) == before


def test_a_plain_export_of_the_challenger_promotes_it(
    served: Path, versions: dict[str, int], tmp_path: Path
) -> None:
    repo = tmp_path / "model_repo"
    shutil.copytree(served, repo)
    result = export_model(ExportRequest(uri(versions["challenger"]), repo))
    assert [w.status for w in result.written] == ["unchanged"]  # the same version folder, kept
    assert policy(repo) == "latest" and config(repo).version_policy.latest.num_versions == 1
    params = parameters(repo)
    assert "serving.champion_version" not in params
    challenger = metadata(repo, versions["challenger"])
    assert json.loads(params["drift.reference"]) == challenger["drift"]["reference"]


def test_a_newer_challenger_replaces_the_old_one_beside_the_same_champion(
    served: Path, versions: dict[str, int], tmp_path: Path
) -> None:
    repo = tmp_path / "model_repo"
    shutil.copytree(served, repo)
    champion, later = versions["champion"], versions["next-challenger"]
    export_model(ExportRequest(uri(later), repo, keep_serving=True))
    assert list(config(repo).version_policy.specific.versions) == [champion, later]
    params = parameters(repo)
    assert params["serving.champion_version"] == str(champion)  # the recorded one, not v2
    assert json.loads(params["drift.reference"]) == metadata(repo, champion)["drift"]["reference"]


def test_nothing_serving_is_refused_at_once(
    versions: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    repo = tmp_path / "model_repo"
    args = ["export", uri(versions["challenger"]), "--repo", str(repo), "--keep-serving"]
    code, lines = builder_cli(args, monkeypatch, capsys)
    error, hint = one_refusal(lines)
    assert code == 2, lines
    assert "--keep-serving" in error and f"{NAME} has no model in {repo}" in error
    assert "without --keep-serving" in hint
    assert not repo.exists()


def test_a_different_serving_contract_is_refused_with_nothing_written(
    served: Path, versions: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    repo = tmp_path / "model_repo"
    shutil.copytree(served, repo)
    before = snapshot(repo)
    args = ["export", uri(versions["other-contract"]), "--repo", str(repo), "--keep-serving"]
    code, lines = builder_cli(args, monkeypatch, capsys)
    error, hint = one_refusal(lines)
    assert code == RepositoryError.exit_code, lines
    assert "parameter feast.feature_service" in error
    assert f"version {versions['other-contract']} cannot serve beside version {versions['champion']}" in error
    assert f"--name {NAME}_challenger" in hint and "shadow that model" in hint
    assert snapshot(repo) == before


def test_an_older_challenger_is_refused(versions: dict[str, int], tmp_path: Path) -> None:
    repo = tmp_path / "model_repo"
    export_model(ExportRequest(uri(versions["challenger"]), repo))
    before = snapshot(repo)
    with pytest.raises(RepositoryError) as refused:
        export_model(ExportRequest(uri(versions["champion"]), repo, keep_serving=True))
    assert "which is newer" in refused.value.message and "\n" not in refused.value.message
    assert snapshot(repo) == before


@pytest.mark.parametrize(
    ("flags", "says"),
    [(["--ensemble"], "cannot be used with --ensemble"), (["--version-policy", "all"], "version policy")],
)
def test_options_keep_serving_cannot_go_with_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, flags: list[str], says: str
) -> None:
    repo = tmp_path / "model_repo"
    args = ["export", f"models:/{NAME}@champion", "--repo", str(repo), "--keep-serving", *flags]
    code, lines = builder_cli(args, monkeypatch, capsys)
    error, _ = one_refusal(lines)
    assert code == 2 and says in error, lines
    assert not repo.exists()


@pytest.fixture
def triton(served: Path, triton_runtime: Any, tmp_path: Path) -> Iterator[Any]:
    with servers.serving(served, triton_runtime, tmp_path / "tritonserver.log") as server:
        yield server


def test_triton_serves_both_versions(triton: Any, versions: dict[str, int]) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(triton.http_url)
    both = [str(versions["champion"]), str(versions["challenger"])]
    for version in both:  # GET /v2/models/NAME/versions/V/ready
        assert client.is_model_ready(NAME, version), version
    assert sorted(client.get_model_metadata(NAME)["versions"]) == sorted(both)
