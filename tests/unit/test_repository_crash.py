"""An ensemble export killed (SIGKILL) at each point of its repository write leaves Triton
either the old set of models or the new one, never a mix; the next export completes it.

Each write runs in a subprocess with the ``BUILDER_FAULT_AT`` test hook of builder/repository.py;
what Triton would load is worked out from the configs and version folders on disk, as Triton
does (version_policy, pinned ensemble steps). The same states are served by the real Triton in
tests/integration/test_export_crash.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from builder.config import ServingOptions, onnx_model_config, parse_pbtxt
from builder.convert.base import graph_tensors
from builder.ensemble import EnsembleSpec, ensemble_artifacts
from builder.repository import ModelArtifact, read_metadata, write_models
from builder.validate import loaded_versions, validate_repository
from tests.unit.test_repository_validate import tiny_classifier

ROOT = Path(__file__).resolve().parents[2]
THRESHOLDS = {1: 0.3, 2: 0.7}  # what a user notices: the decision threshold of each export
STEPS = ("tiny", "tiny_preprocess", "tiny_postprocess")
POINTS = [
    "staged",
    *(f"{kind}:{name}" for name in STEPS for kind in ("hold", "version")),
    "version:tiny_ensemble",
    "config:tiny_ensemble",
    *(f"release:{name}" for name in STEPS),
]


def export_artifacts(version: int) -> list[ModelArtifact]:
    """Registry version ``version`` of "tiny" as builder export --ensemble describes it."""
    options = ServingOptions()
    model = tiny_classifier()
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    source = {"registered_name": "tiny", "version": version, "run_id": f"run-{version}"}
    main = ModelArtifact(
        name="tiny",
        config=onnx_model_config("tiny", inputs, outputs, options),
        version_files={"model.onnx": model.SerializeToString()},
        metadata={"source": source},
    )
    spec = EnsembleSpec.from_dict(
        {
            "preprocess": {"mean": [0, 0, 0], "scale": [1, 2, 4]},
            "postprocess": {"threshold": THRESHOLDS[version]},
        },
        "test",
    )
    extra = ensemble_artifacts("tiny", inputs, outputs, spec, options, version=version)
    for art in extra:
        art.metadata["source"] = source
    return [main, *extra]


def export(repo: Path, version: int, fault: str | None = None) -> int:
    """Write ``version`` into ``repo`` in a fresh process, as ``builder export`` does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BUILDER_FAULT_AT", None)
    if fault:
        env["BUILDER_FAULT_AT"] = fault
    code = (
        "import sys; from pathlib import Path; from builder.repository import write_models; "
        "from tests.unit.test_repository_crash import export_artifacts; "
        "v = int(sys.argv[2]); write_models(Path(sys.argv[1]), v, export_artifacts(v))"
    )
    return subprocess.run([sys.executable, "-c", code, str(repo), str(version)], env=env, cwd=ROOT).returncode


def served_export(repo: Path) -> int:
    """The export whose models Triton serves through the ensemble, checking it is exactly one:
    the ensemble version Triton loads, each step version it runs (loaded by the step's own
    config), and the behaviour (the threshold the postprocess version applies)."""
    ensemble = parse_pbtxt((repo / "tiny_ensemble" / "config.pbtxt").read_text())
    ens_versions = sorted(int(p.name) for p in (repo / "tiny_ensemble").iterdir() if p.name.isdigit())
    (served,) = loaded_versions(ensemble, ens_versions)
    exports = {(read_metadata(repo / "tiny_ensemble" / str(served)) or {})["source"]["version"]}
    for step in ensemble.ensemble_scheduling.step:
        model_dir = repo / step.model_name
        config = parse_pbtxt((model_dir / "config.pbtxt").read_text())
        versions = sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit())
        assert step.model_version in loaded_versions(config, versions), (step.model_name, versions)
        exports.add((read_metadata(model_dir / str(step.model_version)) or {})["source"]["version"])
        if step.model_name == "tiny_postprocess":
            spec = json.loads((model_dir / str(step.model_version) / "spec.json").read_text())
            exports.add(next(v for v, t in THRESHOLDS.items() if t == spec["threshold"]))
    assert len(exports) == 1, f"a mixed ensemble: {exports}"
    return exports.pop()


@pytest.mark.parametrize("point", POINTS)
def test_killed_export_leaves_one_export_served_and_the_next_completes(tmp_path: Path, point: str) -> None:
    repo = tmp_path / "repo"
    write_models(repo, 1, export_artifacts(1))
    assert export(repo, 2, fault=point) == -signal.SIGKILL

    committed = POINTS.index(point) >= POINTS.index("config:tiny_ensemble")
    assert served_export(repo) == (2 if committed else 1)
    _, problems = validate_repository(repo)
    assert all("mixed ensemble" in p or "interrupted" in p for p in problems), problems

    write_models(repo, 2, export_artifacts(2))  # the next export
    assert served_export(repo) == 2
    assert validate_repository(repo)[1] == []
    assert not list(repo.glob("*/.staging-*"))
    for name in STEPS:  # the old versions are let go once the ensemble runs the new ones
        config = parse_pbtxt((repo / name / "config.pbtxt").read_text())
        assert loaded_versions(config, [1, 2]) == [2]


def test_a_step_newer_than_the_ensemble_pins_is_named_a_mix(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_models(repo, 1, export_artifacts(1))
    # What an export of the step model alone (or a hand copy) does behind the ensemble's back.
    write_models(repo, 2, export_artifacts(2)[:1])
    _, problems = validate_repository(repo)
    assert any("tiny_ensemble: step tiny pins version 1, but its latest version is 2" in p for p in problems)
