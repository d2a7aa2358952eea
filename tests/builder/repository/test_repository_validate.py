"""Repository writes (atomic, idempotent) and `builder validate`, without servers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from builder.ensemble.plan import WrappedModel
from builder.ensemble.spec import EnsembleSpec
from builder.ensemble.steps_mode import ensemble_artifacts
from builder.errors import RepositoryError
from builder.repository.triton_config import ServingOptions, onnx_model_config, parse_pbtxt, to_pbtxt
from builder.repository.validate import validate_repository
from builder.repository.write import ModelArtifact, read_metadata, write_models
from builder.tensors import graph_tensors
from tests.builder.helpers import tiny_classifier


def artifacts(options: ServingOptions | None = None, ensemble: bool = True) -> list[ModelArtifact]:
    options = options or ServingOptions()
    model = tiny_classifier()
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    main = ModelArtifact(
        name="tiny",
        config=onnx_model_config("tiny", inputs, outputs, options),
        version_files={"model.onnx": model.SerializeToString()},
        metadata={"source": {"uri": "models:/tiny/1"}},
    )
    if not ensemble:
        return [main]
    spec = EnsembleSpec.from_dict(
        {"preprocess": {"mean": [0, 0, 0], "scale": [1, 2, 4]}, "postprocess": {"threshold": 0.7}}, "test"
    )
    return [main, *ensemble_artifacts(WrappedModel("tiny", inputs, outputs, options), spec)]


def tree_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_rank1_label_becomes_n_by_1():
    model = tiny_classifier()
    shapes = {t.name: t.shape for t in graph_tensors(model.graph.output)}
    assert shapes == {"label": (-1, 1), "probabilities": (-1, 2)}


def test_write_then_validate_clean(repo_dir):
    results = write_models(repo_dir, 3, artifacts())
    assert {r.name for r in results} == {"tiny", "tiny_preprocess", "tiny_postprocess", "tiny_ensemble"}
    assert all(r.status == "written" for r in results)
    assert (repo_dir / "tiny" / "3" / "model.onnx").is_file()
    assert (repo_dir / "tiny_preprocess" / "3" / "model.onnx").is_file()
    entries, problems = validate_repository(repo_dir)
    assert problems == []
    assert len(entries) == 4
    assert not list(repo_dir.rglob(".staging-*"))


def test_reexport_same_content_is_a_noop(repo_dir):
    write_models(repo_dir, 1, artifacts())
    before = tree_snapshot(repo_dir)
    again = write_models(repo_dir, 1, artifacts())
    assert {r.status for r in again} == {"unchanged"}
    assert tree_snapshot(repo_dir) == before


def test_different_content_under_same_version_is_refused_unless_forced(repo_dir):
    write_models(repo_dir, 1, artifacts(ensemble=False))
    before = tree_snapshot(repo_dir)
    changed = artifacts(ensemble=False)[0]
    changed = ModelArtifact(changed.name, changed.config, {"model.onnx": b"other bytes"}, metadata={})
    with pytest.raises(RepositoryError, match="already exists with different content"):
        write_models(repo_dir, 1, [changed])
    assert tree_snapshot(repo_dir) == before
    (result,) = write_models(repo_dir, 1, [changed], force=True)
    assert result.status == "replaced"
    assert (repo_dir / "tiny" / "1" / "model.onnx").read_bytes() == b"other bytes"


def test_failure_midway_leaves_repository_unchanged(repo_dir, monkeypatch):
    write_models(repo_dir, 1, artifacts())
    before = tree_snapshot(repo_dir)
    import builder.repository.write as repository

    calls = {"n": 0}
    real_stage = repository._stage

    def failing_stage(model_dir, art):
        calls["n"] += 1
        if calls["n"] == 3:  # the third model of four: two are already staged
            raise OSError(28, "No space left on device")
        return real_stage(model_dir, art)

    monkeypatch.setattr(repository, "_stage", failing_stage)
    with pytest.raises(RepositoryError, match="No space left"):
        write_models(repo_dir, 2, artifacts())
    assert tree_snapshot(repo_dir) == before
    assert not list(repo_dir.rglob(".staging-*"))


def test_metadata_records_digest(repo_dir):
    write_models(repo_dir, 1, artifacts(ensemble=False))
    meta = read_metadata(repo_dir / "tiny" / "1")
    assert meta and len(meta["content_sha256"]) == 64 and meta["source"]["uri"] == "models:/tiny/1"


def break_file(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def test_validate_lists_every_ensemble_problem(repo_dir):
    write_models(repo_dir, 1, artifacts())
    ens = repo_dir / "tiny_ensemble" / "config.pbtxt"
    config = parse_pbtxt(ens.read_text())
    steps = config.ensemble_scheduling.step
    steps[0].model_name = "tiny_preprocesss"  # a typo'd step model
    steps[1].input_map["inputs"] = steps[1].input_map.pop("input")  # not an input of tiny
    steps[2].output_map["scores"] = steps[2].output_map.pop("score")  # not an output
    ens.write_text(to_pbtxt(config))
    _, problems = validate_repository(repo_dir)
    text = "\n".join(problems)
    assert "no model 'tiny_preprocesss'" in text
    assert "input_map key 'inputs' is not an input of tiny" in text
    assert "output_map key 'scores' is not an output of tiny_postprocess" in text


def test_validate_catches_dtype_and_dims_mismatch(repo_dir):
    write_models(repo_dir, 1, artifacts())
    post = repo_dir / "tiny_postprocess" / "config.pbtxt"
    config = parse_pbtxt(post.read_text())
    config.input[0].dims[:] = [3]  # the model makes 2 class probabilities
    post.write_text(to_pbtxt(config))
    break_file(repo_dir / "tiny" / "config.pbtxt", "TYPE_INT64", "TYPE_INT32")
    _, problems = validate_repository(repo_dir)
    text = "\n".join(problems)
    assert "dims [2] meet [3]" in text
    assert "'label' is int64 in ONNX, int32 in config" in text


def test_validate_catches_missing_files_and_bad_config(repo_dir):
    write_models(repo_dir, 1, artifacts())
    (repo_dir / "tiny" / "1" / "model.onnx").unlink()
    (repo_dir / "tiny_preprocess" / "config.pbtxt").write_text("name: tiny_preprocess\nbackend: {")
    (repo_dir / "orphan").mkdir()
    _, problems = validate_repository(repo_dir)
    text = "\n".join(problems)
    assert "tiny/1: missing model.onnx" in text
    assert "tiny_preprocess: config.pbtxt does not parse" in text
    assert "orphan: no config.pbtxt" in text
    # the ensemble's first step now names a model that did not parse: reported, not crashed
    assert "no model 'tiny_preprocess'" in text


def test_validate_cli_exit_codes(repo_dir):
    write_models(repo_dir, 1, artifacts())
    ok = subprocess.run(
        [sys.executable, "-m", "builder", "validate", "--repo", str(repo_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    (repo_dir / "tiny_postprocess" / "1" / "model.onnx").unlink()
    bad = subprocess.run(
        [sys.executable, "-m", "builder", "validate", "--repo", str(repo_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 7
    assert "tiny_postprocess/1: missing model.onnx" in bad.stdout
    assert "error:" in bad.stderr
