"""An export killed at any filesystem step of its repository write leaves Triton, for every
model, the old version whole or the new one whole; the next export completes it.

Every layout the builder writes (the bare model, the fused ``NAME_ensemble``, the steps
ensemble and its step models, the run's own Python steps) under every version policy: the
write is first run once to list its steps (the ``_fault`` hook of builder/repository/write.py is
called at each: temp file written, file replaced, folder renamed), then, for each step k, run
in a child process that exits at step k (``os._exit``: no cleanup runs, as under SIGKILL). What
Triton would load from the repository left behind is worked out by a pure function, as Triton
does it (version_policy, pinned ensemble steps), in poll mode (it reads whatever is on disk at
any instant; an explicit load reads the same). tests/builder/repository/test_export_crash.py kills
the real CLI and serves the result with the real Triton.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.repository import write as repository
from builder.repository.triton_config import parse_pbtxt
from builder.repository.validate import validate_repository
from builder.repository.write import (
    ModelArtifact,
    config_identity,
    loaded_versions,
    model_versions,
    read_metadata,
    write_models,
)
from tests.builder.repository.helpers import export_artifacts

POLICIES = ("latest:1", "latest:2", "all", "specific:1,2")
# Every layout under every policy the builder writes where the policy decides the write (a
# steps ensemble's own config is always ``specific``; its steps and the run's own steps take
# the export's policy, written through the same code), a few seconds each.
CASES = [
    *((layout, policy) for layout in ("bare", "fused") for policy in POLICIES),
    ("steps", "latest:1"),
    ("steps", "specific:1,2"),
    ("user_steps", "latest:1"),
]


@dataclass(frozen=True)
class Served:
    version: int
    export: int  # the registry version the served version folder (and its config) came from


def triton_view(repo: Path) -> dict[str, Served | None]:
    """What a Triton reading ``repo`` now serves, per model (None: nothing loadable), checking
    that each served version runs under its own export's config and, for an ensemble, that
    the step versions it pins are loaded and from the ensemble's export: else AssertionError."""
    view: dict[str, Served | None] = {}
    configs = {}
    for model_dir in sorted(p for p in repo.iterdir() if p.is_dir()):
        versions = model_versions(model_dir)
        if not (model_dir / "config.pbtxt").exists():
            # Triton would auto-complete a config for a version folder without one.
            assert not versions, f"{model_dir.name}: version folders {versions} without a config"
            continue
        config = configs[model_dir.name] = parse_pbtxt((model_dir / "config.pbtxt").read_text())
        loaded = loaded_versions(config, versions)
        if not loaded:
            view[model_dir.name] = None
            continue
        metadata = read_metadata(model_dir / str(loaded[-1])) or {}
        export = metadata["source"]["version"]
        where = f"{model_dir.name}/{loaded[-1]} from export {export}"
        assert metadata["identity"] == config_identity(config), f"{where} under another export's config"
        if "test.export" in config.parameters:
            assert config.parameters["test.export"].string_value == str(export), f"{where}: mixed config"
        view[model_dir.name] = Served(loaded[-1], export)
    for name, served in view.items():
        for s in configs[name].ensemble_scheduling.step:
            assert served is not None
            target = configs[s.model_name]
            assert s.model_version in loaded_versions(target, model_versions(repo / s.model_name)), (
                f"{name} pins {s.model_name}/{s.model_version}, which is not loaded"
            )
            metadata = read_metadata(repo / s.model_name / str(s.model_version)) or {}
            assert metadata["source"]["version"] == served.export, f"{name}: a mixed ensemble"
    return view


def write_steps(repo: Path, arts: list[ModelArtifact], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The write's filesystem steps, in order (run on a copy of ``repo``)."""
    copy = repo.with_name("count")
    shutil.copytree(repo, copy)
    points: list[str] = []
    with monkeypatch.context() as m:
        m.setattr(repository, "_fault", points.append)
        write_models(copy, 2, arts)
    shutil.rmtree(copy)
    return points


def _write_until(repo: Path, layout: str, policy: str, at: int) -> None:
    """The child's work: write version 2 and exit at the ``at``-th step, as SIGKILL would. It
    builds the artifacts itself (the same as the parent's: nothing in them is random), as the
    Triton config protobufs do not pickle."""
    arts = export_artifacts(2, layout, policy)
    steps = iter(range(at))

    def fault(point: str) -> None:
        if next(steps, None) is None:
            os._exit(9)

    try:
        repository._fault = fault  # type: ignore[assignment]  # the child's copy only
        write_models(repo, 2, arts)
    finally:
        os._exit(0)


# The children are forked from a fork server, a fresh single-threaded process: a test worker
# that ran other tests first has threads (MLflow's artifact upload pools), and a child forked
# from a threaded process can block forever on a lock one of them held at the fork.
_CHILDREN = multiprocessing.get_context("forkserver")
_CHILDREN.set_forkserver_preload([__name__])


def killed_write(repo: Path, layout: str, policy: str, at: int) -> None:
    """Write version 2 in a child process that exits at the ``at``-th step, as SIGKILL would."""
    child = _CHILDREN.Process(target=_write_until, args=(repo, layout, policy, at))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 9, f"the child did not reach step {at} (exit code {child.exitcode})"


@pytest.mark.parametrize(("layout", "policy"), CASES)
def test_killed_at_every_step_triton_serves_one_export_whole(
    tmp_path: Path, layout: str, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base"
    write_models(base, 1, export_artifacts(1, layout, policy))
    old = triton_view(base)
    assert old and all(s is not None and s.export == 1 for s in old.values())
    new_arts = export_artifacts(2, layout, policy)
    points = write_steps(base, new_arts, monkeypatch)
    assert len(points) >= 2 * len(new_arts)

    history: dict[str, list[int]] = {name: [] for name in old}
    for k, point in enumerate(points):
        repo = tmp_path / f"k{k}"
        shutil.copytree(base, repo)
        killed_write(repo, layout, policy, k)
        view = triton_view(repo)  # every model: one export whole (asserted inside)
        assert set(view) == set(old), point
        for name, served in view.items():
            assert served is not None, f"killed after {point}: {name} serves nothing"
            history[name].append(served.export)
        _, problems = validate_repository(repo)
        assert not [p for p in problems if "Triton would serve" in p], (point, problems)

        write_models(repo, 2, new_arts)  # the next export rolls forward
        assert all(s is not None and s.export == 2 for s in triton_view(repo).values()), point
        assert validate_repository(repo)[1] == [], point
        assert not list(repo.glob("*/.staging-*")) and not list(repo.glob("*/**/.*.*")), point
        shutil.rmtree(repo)
    for name, exports in history.items():
        # Old until its commit, new after: a model never goes back to the old export.
        assert exports == sorted(exports), (name, list(zip(points, exports, strict=True)))
    assert any(2 in e for e in history.values())  # the kills reached past a commit


def test_a_step_newer_than_the_ensemble_pins_is_named_a_mix(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_models(repo, 1, export_artifacts(1))
    # What an export of the step model alone (or a hand copy) does behind the ensemble's back.
    write_models(repo, 2, export_artifacts(2)[:1])
    _, problems = validate_repository(repo)
    assert any("tiny_ensemble: step tiny pins version 1, but its latest version is 2" in p for p in problems)


def hand_made_mixes(tmp_path: Path, layout: str) -> list[tuple[str, Path]]:
    """For each model of ``layout`` Triton serves on its own: export 1's repository with export
    2's version folder of that model copied in beside export 1's config (what an interrupted
    export of an older builder left), and the reverse (export 2's config over export 1's
    version): (model, repository)."""
    done = tmp_path / f"{layout}-2"
    write_models(done, 2, export_artifacts(2, layout))
    mixes = []
    for name in sorted(p.name for p in done.iterdir()):
        if parse_pbtxt((done / name / "config.pbtxt").read_text()).platform == "ensemble":
            continue  # its new folder is inert under the old config (``specific``)
        new_folder = tmp_path / f"{layout}-{name}-folder"
        write_models(new_folder, 1, export_artifacts(1, layout))
        shutil.copytree(done / name / "2", new_folder / name / "2")
        new_config = tmp_path / f"{layout}-{name}-config"
        write_models(new_config, 1, export_artifacts(1, layout))
        shutil.copy(done / name / "config.pbtxt", new_config / name / "config.pbtxt")
        mixes += [(name, new_folder), (name, new_config)]
    return mixes


@pytest.mark.parametrize("layout", ["bare", "fused", "steps", "user_steps"])
def test_validate_fails_on_each_hand_made_mix(tmp_path: Path, layout: str) -> None:
    from typer.testing import CliRunner

    from builder.cli import validate  # noqa: F401 - registers the command
    from builder.cli.main import app
    from builder.errors import ValidationError

    mixes = hand_made_mixes(tmp_path, layout)
    assert {name for name, _ in mixes} >= {"tiny"}
    for name, repo in mixes:
        _, problems = validate_repository(repo)
        mix = [p for p in problems if p.startswith(f"{name}: Triton would serve version")]
        folder = repo.name.endswith("-folder")
        # Where the two exports' version folders hold the same bytes (a generated preprocess, a
        # user step's code), the export's identity is the content and there is no mix to name.
        same = (read_metadata(repo / name / "1") or {}).get("identity") == (
            read_metadata(tmp_path / f"{layout}-2" / name / "2") or {}
        ).get("identity")
        if same:
            continue
        assert len(mix) == 1, (repo.name, problems)
        old, new = "tiny v1 (run run-1)", "tiny v2 (run run-2)"
        version_from, config_from = (new, old) if folder else (old, new)
        assert (
            f"exported from {version_from}) with a config.pbtxt written by another export ({config_from})"
            in mix[0]
        )
        assert "re-run that `builder export`, which rolls forward" in mix[0]
    name, repo = mixes[0]
    result = CliRunner().invoke(app, ["validate", "--repo", str(repo)])
    assert isinstance(result.exception, ValidationError) and result.exception.exit_code == 7
    assert any(p.startswith(f"{name}: Triton would serve") for p in result.exception.problems)


def test_stray_temp_files_are_reported_and_removed_by_the_next_export(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_models(repo, 1, export_artifacts(1, "fused"))
    strays = [repo / "tiny" / ".config.pbtxt.k2j_x9a1", repo / "tiny_ensemble" / "warmup" / ".input.0abc_def"]
    for stray in strays:
        stray.write_bytes(b"half")
    _, problems = validate_repository(repo)
    assert "tiny: leftover temp file(s) from an interrupted write: .config.pbtxt.k2j_x9a1" in problems[0]
    assert (
        "tiny_ensemble: leftover temp file(s) from an interrupted write: warmup/.input.0abc_def"
        in problems[1]
    )
    write_models(repo, 2, export_artifacts(2, "fused"))
    assert not any(s.exists() for s in strays)
    assert validate_repository(repo)[1] == []
