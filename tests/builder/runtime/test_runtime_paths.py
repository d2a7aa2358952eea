"""The runtime's paths and the CLI's error paths: no server, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builder.errors import RepositoryError, RuntimeSetupError
from builder.runtime.install import MODEL_ENV_REQUIREMENTS
from builder.runtime.paths import STAMP_NAME, RuntimePaths, default_runtime_dir, locate_runtime

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_locate_runtime_on_missing_dir_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(RuntimeSetupError) as caught:
        locate_runtime(tmp_path / "nothing-here")
    assert "embedded Triton runtime not installed at" in caught.value.message
    assert str(tmp_path / "nothing-here") in caught.value.message
    assert caught.value.hint == "run `builder runtime install`"
    assert caught.value.exit_code == 8


def test_locate_runtime_rejects_a_stamp_without_files(tmp_path: Path) -> None:
    (tmp_path / STAMP_NAME).write_text(json.dumps({"python_libdir": "/usr/lib"}))
    with pytest.raises(RuntimeSetupError, match="incomplete"):
        locate_runtime(tmp_path)


def test_locate_runtime_finds_a_complete_install(tmp_path: Path) -> None:
    paths = RuntimePaths(tmp_path)
    for required in paths.required_files():
        required.parent.mkdir(parents=True, exist_ok=True)
        required.touch()
    (tmp_path / STAMP_NAME).write_text(json.dumps({"python_libdir": "/opt/lib"}))
    found = locate_runtime(tmp_path)
    assert found.root == tmp_path
    assert found.python_libdir == Path("/opt/lib")
    assert found.tritonserver == tmp_path / "pytriton/pytriton/tritonserver/bin/tritonserver"


def test_default_runtime_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUILDER_RUNTIME_DIR", str(tmp_path / "rt"))
    assert default_runtime_dir() == tmp_path / "rt"
    monkeypatch.delenv("BUILDER_RUNTIME_DIR")
    monkeypatch.chdir(tmp_path)  # outside any project with an installed .runtime/
    assert default_runtime_dir() == Path.home() / ".cache" / "triton-stack" / "runtime"


def test_model_env_requirements_file_mirrors_the_installer() -> None:
    text = (REPO_ROOT / "requirements" / "model-env.txt").read_text()
    pins = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert tuple(pins) == MODEL_ENV_REQUIREMENTS


def test_cli_runtime_info_without_runtime_fails_with_setup_error(tmp_path: Path) -> None:
    from builder.cli import serve  # noqa: F401 - registers the commands
    from builder.cli.main import app

    result = CliRunner().invoke(app, ["runtime", "info", "--runtime-dir", str(tmp_path)])
    assert isinstance(result.exception, RuntimeSetupError)


def test_cli_serve_with_missing_repo_is_a_repository_error(tmp_path: Path) -> None:
    from builder.cli import serve  # noqa: F401 - registers the commands
    from builder.cli.main import app

    result = CliRunner().invoke(app, ["serve", "--repo", str(tmp_path / "missing")])
    assert isinstance(result.exception, RepositoryError)
    assert "does not exist" in result.exception.message
