"""Which runtime a command uses when ``--runtime-dir`` is not given (``default_runtime_dir``):
the one ``make`` installed in the project's ``.runtime/`` is found from a shell in the project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.runtime.paths import STAMP_NAME, default_runtime_dir

HOME_RUNTIME = Path.home() / ".cache" / "triton-stack" / "runtime"


def project(tmp_path: Path, *, installed: bool) -> Path:
    root = tmp_path / "triton-stack"
    (root / "model_repo").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "triton-stack"\n')
    (root / ".runtime").mkdir()
    if installed:
        (root / ".runtime" / STAMP_NAME).write_text(json.dumps({"stamp_format": 1}))
    return root


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BUILDER_RUNTIME_DIR", raising=False)


def test_found_from_the_project_root_and_below(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, installed=True)
    assert default_runtime_dir(root) == root / ".runtime"
    assert default_runtime_dir(root / "model_repo") == root / ".runtime"
    monkeypatch.chdir(root / "model_repo")  # what a user typing `builder serve` gets
    assert default_runtime_dir().absolute() == (root / ".runtime").absolute()


def test_an_unfinished_project_install_is_not_used(tmp_path: Path) -> None:
    root = project(tmp_path, installed=False)
    assert default_runtime_dir(root) == HOME_RUNTIME


def test_outside_the_project_the_user_cache(tmp_path: Path) -> None:
    project(tmp_path, installed=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert default_runtime_dir(elsewhere) == HOME_RUNTIME


def test_the_search_stops_at_the_project_root(tmp_path: Path) -> None:
    # An installed .runtime above another project belongs to that outer folder, not this one.
    outer = project(tmp_path, installed=True)
    inner = outer / "vendor" / "other"
    inner.mkdir(parents=True)
    (inner / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert default_runtime_dir(inner) == HOME_RUNTIME


def test_the_environment_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, installed=True)
    monkeypatch.setenv("BUILDER_RUNTIME_DIR", str(tmp_path / "rt"))
    assert default_runtime_dir(root) == tmp_path / "rt"
