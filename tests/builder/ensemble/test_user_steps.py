"""The run's own serving steps (``serving/steps/<step>/``): the format, the typed tensor
mapping checked at export, and what ``builder validate`` says about a broken step, without
servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from builder.ensemble.plan import WrappedModel
from builder.ensemble.spec import EnsembleSpec
from builder.ensemble.steps_mode import ensemble_artifacts
from builder.ensemble.user_step_models import StepModel
from builder.ensemble.user_steps import UserStep, read_step_dirs
from builder.errors import UsageError
from builder.repository.triton_config import (
    ServingOptions,
    onnx_model_config,
    parse_pbtxt,
    step_serving_options,
    to_pbtxt,
)
from builder.repository.validate import validate_repository
from builder.repository.write import ModelArtifact, write_models
from builder.tensors import TensorSpec, graph_tensors
from tests.builder.helpers import CAP, CLIP, CODE, port, step, tiny_classifier

SPEC = EnsembleSpec.from_dict({"preprocess": {"mean": [0, 0, 0], "scale": [1, 2, 4]}}, "test")


def build(steps: list[UserStep], spec: EnsembleSpec | None = SPEC, **options: Any) -> list[ModelArtifact]:
    model = tiny_classifier()
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    serving = ServingOptions(**options)
    main = ModelArtifact(
        name="tiny",
        config=onnx_model_config("tiny", inputs, outputs, serving),
        version_files={"model.onnx": model.SerializeToString()},
        metadata={"source": {"uri": "models:/tiny/1"}},
    )
    return [
        main,
        *ensemble_artifacts(
            WrappedModel("tiny", inputs, outputs, serving, version=1), spec, user_steps=steps
        ),
    ]


def by_name(artifacts: list[ModelArtifact]) -> dict[str, ModelArtifact]:
    return {a.name: a for a in artifacts}


def test_user_steps_wrap_the_generated_ones_and_validate(repo_dir: Path) -> None:
    arts = by_name(build([step("clip", CLIP), step("cap", CAP)]))
    ensemble = arts["tiny_ensemble"].config
    order = [s.model_name for s in ensemble.ensemble_scheduling.step]
    assert order == ["tiny_clip", "tiny_preprocess", "tiny", "tiny_postprocess", "tiny_cap"]
    maps = {s.model_name: (dict(s.input_map), dict(s.output_map)) for s in ensemble.ensemble_scheduling.step}
    # The request's `input` is clipped, then preprocessed; the generated score is capped.
    assert maps["tiny_clip"] == ({"in": "input"}, {"out": "input__tiny_clip"})
    assert maps["tiny_preprocess"][0] == {"input": "input__tiny_clip"}
    assert maps["tiny_postprocess"][1] == {"score": "score__tiny_postprocess", "label": "label"}
    assert maps["tiny_cap"] == ({"in": "score__tiny_postprocess"}, {"out": "score"})
    assert [t.name for t in ensemble.input] == ["input"]
    assert [t.name for t in ensemble.output] == ["probabilities", "score", "label"]
    cap = arts["tiny_cap"]
    assert cap.config.backend == "python" and cap.config.instance_group[0].count == 2
    assert cap.config.parameters["cap"].string_value == "0.8"
    # Only the model waits for a batch.
    assert cap.config.dynamic_batching.max_queue_delay_microseconds == 0
    assert set(cap.version_files) == {"model.py", "step.json"}
    assert parse_pbtxt(to_pbtxt(ensemble)) == ensemble
    write_models(repo_dir, 1, list(arts.values()))
    assert (repo_dir / "tiny_cap" / "1" / "model.py").read_bytes() == CODE
    entries, problems = validate_repository(repo_dir)
    assert problems == []
    assert {e.name for e in entries} >= {"tiny_clip", "tiny_cap", "tiny_ensemble"}


def test_without_a_spec_the_run_steps_wrap_the_model_alone() -> None:
    post = {"position": "post", "inputs": [port("in", dims=[2], **{"from": "probabilities"})]}
    post["outputs"] = [port("out", "TYPE_STRING", to="decision")]
    ensemble = by_name(build([step("decide", post)], spec=None))["tiny_ensemble"].config
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["tiny", "tiny_decide"]
    # The model's own outputs, and the post step's new tensor as a new ensemble output.
    assert [t.name for t in ensemble.output] == ["label", "probabilities", "decision"]


def test_steps_of_one_position_run_by_order_then_name(tmp_path: Path) -> None:
    for name, order in (("b", 0), ("a", 0), ("z", -1)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "step.json").write_text(json.dumps({**CAP, "order": order}))
        (folder / "model.py").write_bytes(CODE)
    (tmp_path / "clip").mkdir()
    (tmp_path / "clip" / "step.json").write_text(json.dumps(CLIP))
    (tmp_path / "clip" / "model.py").write_bytes(CODE)
    assert [s.name for s in read_step_dirs(tmp_path, "runs:/r/serving/steps")] == ["clip", "z", "a", "b"]


WIRING_ERRORS = {
    "wrong dtype": (
        {**CAP, "inputs": [port("in", "TYPE_INT64", **{"from": "score"})]},
        "post step 'cap': input 'in' is TYPE_INT64 [1], but the generated postprocess's 'score' is "
        "TYPE_FP32 [1]",
    ),
    "wrong dims": (
        {**CAP, "inputs": [port("in", dims=[2], **{"from": "score"})]},
        "post step 'cap': input 'in' is TYPE_FP32 [2], but the generated postprocess's 'score' is "
        "TYPE_FP32 [1]",
    ),
    "unknown tensor": (
        {**CAP, "inputs": [port("in", **{"from": "scroe"})]},
        "post step 'cap': input 'in' reads 'scroe', which no ensemble input or earlier step provides",
    ),
    "unread output": (
        {**CLIP, "outputs": [port("out", dims=[3], to="clipped")]},
        "pre step 'cap': output 'out' writes 'clipped', which no later step reads",
    ),
    "request input in a post step": (
        {**CAP, "inputs": [port("in", **{"from": "cap", "ensemble_input": True})]},
        "post step 'cap': input 'in': only a pre step can declare an ensemble input",
    ),
    "pre step meets the model's dtype": (
        {**CLIP, "outputs": [port("out", "TYPE_FP64", dims=[3], to="input")]},
        "the generated preprocess: input 'input' is TYPE_FP32 [3], but pre step 'cap''s 'input' is "
        "TYPE_FP64 [3]",
    ),
}


@pytest.mark.parametrize("case", sorted(WIRING_ERRORS))
def test_a_step_fed_wrongly_is_refused_naming_the_step_and_tensor(case: str) -> None:
    spec, message = WIRING_ERRORS[case]
    with pytest.raises(UsageError) as err:
        build([step("cap", spec)])
    assert message in err.value.message
    assert err.value.exit_code == 2 and err.value.hint


def test_a_new_request_input_is_declared_by_a_pre_step() -> None:
    rule = {
        "position": "pre",
        "inputs": [
            port("x", dims=[3], **{"from": "input"}),
            port("limit", **{"from": "limit", "ensemble_input": True}),
        ],
        "outputs": [port("y", dims=[3], to="input")],
    }
    ensemble = by_name(build([step("clip", rule)]))["tiny_ensemble"].config
    assert [(t.name, list(t.dims)) for t in ensemble.input] == [("input", [3]), ("limit", [1])]


FORMAT_ERRORS = {
    "no model.py": ({**CAP}, None, 'no model.py (a Triton Python-backend model) and no "model" URI'),
    "not Python": ({**CAP}, b"def (:\n", "model.py: does not parse: line 1"),
    "no model class": ({**CAP}, b"x = 1\n", "defines no class TritonPythonModel"),
    "Triton type": (
        {**CAP, "inputs": [port("in", "FP32")]},
        CODE,
        "input 'in': data_type 'FP32' is not a Triton type",
    ),
    "position": ({**CAP, "position": "middle"}, CODE, '"position" is "pre"'),
    "untyped": ({**CAP, "outputs": [{"name": "out"}]}, CODE, 'output \'out\' needs "data_type" and "dims"'),
    "config typo": ({**CAP, "config": {"instances": 2}}, CODE, '"config" takes'),
}


@pytest.mark.parametrize("case", sorted(FORMAT_ERRORS))
def test_a_malformed_step_is_refused_naming_it(case: str) -> None:
    spec, code, message = FORMAT_ERRORS[case]
    with pytest.raises(UsageError) as err:
        step("cap", spec, code)
    assert err.value.message.startswith("user step runs:/r/serving/steps/cap")
    assert message in err.value.message


def test_a_step_batching_less_than_the_ensemble_is_refused() -> None:
    with pytest.raises(UsageError, match=r"config\.max_batch_size 8 is below the ensemble's 64"):
        build([step("cap", {**CAP, "config": {"max_batch_size": 8}})])


def _broken(repo: Path, edit: str) -> list[str]:
    write_models(repo, 1, build([step("cap", CAP)]))
    config = repo / "tiny_cap" / "config.pbtxt"
    if edit == "name":
        config.write_text(config.read_text().replace('name: "in"', 'name: "inp"'))
    elif edit == "dtype":
        config.write_text(config.read_text().replace("TYPE_FP32", "TYPE_INT64", 1))
    elif edit == "missing":
        (repo / "tiny_cap" / "1" / "model.py").unlink()
    else:
        (repo / "tiny_cap" / "1" / "model.py").write_text("class TritonPythonModel(:\n")
    return validate_repository(repo)[1]


VALIDATE = {
    "name": "tiny_ensemble: step 4 (tiny_cap): input_map key 'in' is not an input of tiny_cap ['inp']",
    "dtype": "tiny_ensemble: step 4 (tiny_cap): 'score__tiny_postprocess' -> 'in': dtype TYPE_FP32 meets "
    "TYPE_INT64",
    "missing": "tiny_cap/1: missing model.py (needed by backend 'python')",
    "syntax": "tiny_cap/1: model.py does not parse: line 1",
}


@pytest.mark.parametrize("edit", sorted(VALIDATE))
def test_validate_names_the_broken_step_and_tensor(repo_dir: Path, edit: str) -> None:
    problems = _broken(repo_dir, edit)
    assert any(VALIDATE[edit] in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def risk_graph() -> onnx.ModelProto:
    """The graph a registered model exports as: prediction = probabilities @ W (a Ridge on the
    main model's probabilities, say)."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [2, 1], [0.25, 2.0])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["prediction"])],
        "risk",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [-1, 2])],
        [helper.make_tensor_value_info("prediction", TensorProto.FLOAT, [-1, 1])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


RISK = {
    "position": "post",
    "model": "models:/risk@champion",
    "inputs": [{"name": "input", "from": "probabilities"}],
    "outputs": [{"name": "prediction", "to": "risk"}],
}


def risk_model(extra_inputs: tuple[TensorSpec, ...] = (), export: bool = True) -> StepModel:
    """The registered step as builder.steps.StepModels leaves it: an ONNX artifact with its
    own source, and the export that wrote it (``export``: what validate's one-export check reads)."""
    graph = risk_graph()
    inputs, outputs = graph_tensors(graph.graph.input), graph_tensors(graph.graph.output)
    metadata: dict[str, Any] = {"source": {"registered_name": "risk", "version": 4, "run_id": "r2"}}
    if export:
        metadata["export"] = {"uri": "models:/tiny/1"}
    artifact = ModelArtifact(
        name="tiny_risk",
        config=onnx_model_config("tiny_risk", inputs, outputs, step_serving_options(ServingOptions())),
        version_files={"model.onnx": graph.SerializeToString()},
        metadata=metadata,
    )
    return StepModel(artifact, (*inputs, *extra_inputs), tuple(outputs))


def build_risk(spec: dict[str, Any], exported: StepModel | None = None) -> list[ModelArtifact]:
    model = tiny_classifier()
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    serving = ServingOptions()
    main = ModelArtifact(
        name="tiny",
        config=onnx_model_config("tiny", inputs, outputs, serving),
        version_files={"model.onnx": model.SerializeToString()},
        metadata={"source": {"uri": "models:/tiny/1"}},
    )
    steps = [step("risk", spec, code=None)]
    models = {"risk": exported or risk_model()}
    return [
        main,
        *ensemble_artifacts(
            WrappedModel("tiny", inputs, outputs, serving, version=1),
            SPEC,
            user_steps=steps,
            step_models=models,
        ),
    ]


def test_a_registered_model_step_is_typed_by_its_graph_wired_and_validates(repo_dir: Path) -> None:
    parsed = step("risk", RISK, code=None)
    assert parsed.model is not None and parsed.model.name == "risk" and parsed.files == {}
    arts = by_name(build_risk(RISK))
    ensemble = arts["tiny_ensemble"].config
    last = ensemble.ensemble_scheduling.step[-1]
    assert (last.model_name, last.model_version) == ("tiny_risk", 1)
    assert (dict(last.input_map), dict(last.output_map)) == (
        {"input": "probabilities"},
        {"prediction": "risk"},
    )
    # Its new tensor is a new ensemble output, typed by the graph (step.json gave no type).
    assert [(t.name, list(t.dims)) for t in ensemble.output][-1] == ("risk", [1])
    assert arts["tiny_risk"].config.backend == "onnxruntime"
    write_models(repo_dir, 1, list(arts.values()))
    assert validate_repository(repo_dir)[1] == []


def test_validate_reads_a_registered_step_by_the_export_that_wrote_it(repo_dir: Path) -> None:
    # Without ``export``, its source (risk v4) is another export's: what a mixed ensemble shows.
    write_models(repo_dir, 1, build_risk(RISK, risk_model(export=False)))
    problems = validate_repository(repo_dir)[1]
    assert any("a mixed ensemble" in p and "tiny_risk/1 from risk v4" in p for p in problems), problems


def test_validate_catches_a_broken_registered_step(repo_dir: Path) -> None:
    write_models(repo_dir, 1, build_risk(RISK))
    config = repo_dir / "tiny_risk" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "input"', 'name: "inp"'))
    problems = validate_repository(repo_dir)[1]
    assert any(
        "tiny_ensemble: step 4 (tiny_risk): input_map key 'input' is not an input of" in p for p in problems
    )
    assert any("tiny_risk: config input 'inp' is not in the ONNX graph" in p for p in problems), problems


REGISTERED_ERRORS = {
    "unknown tensor": (
        {**RISK, "inputs": [{"name": "x", "from": "probabilities"}]},
        "post step 'risk': input 'x' is not an input of models:/risk@champion (input)",
    ),
    "declared dtype": (
        {**RISK, "outputs": [{"name": "prediction", "to": "risk", "data_type": "TYPE_INT64"}]},
        "post step 'risk': output 'prediction' is declared TYPE_INT64 [1], but models:/risk@champion's "
        "exported graph has TYPE_FP32 [1]",
    ),
    "declared dims": (
        {**RISK, "inputs": [{"name": "input", "from": "probabilities", "dims": [3]}]},
        "post step 'risk': input 'input' is declared TYPE_FP32 [3], but models:/risk@champion's "
        "exported graph has TYPE_FP32 [2]",
    ),
    "fed wrongly": (
        {**RISK, "inputs": [{"name": "input", "from": "score"}]},
        "post step 'risk': input 'input' is TYPE_FP32 [2], but the generated postprocess's 'score' is "
        "TYPE_FP32 [1]",
    ),
}


@pytest.mark.parametrize("case", sorted(REGISTERED_ERRORS))
def test_a_registered_step_mapped_wrongly_is_refused(case: str) -> None:
    spec, message = REGISTERED_ERRORS[case]
    with pytest.raises(UsageError) as err:
        build_risk(spec)
    assert message in err.value.message, err.value.message
    assert err.value.exit_code == 2 and err.value.hint


def test_a_registered_step_must_feed_every_input_of_its_graph() -> None:
    with pytest.raises(UsageError, match=r"takes input\(s\) \['bias'\] that step.json does not map"):
        build_risk(RISK, risk_model(extra_inputs=(TensorSpec("bias", "float32", (-1, 1)),)))


def test_a_registered_step_is_one_thing_and_takes_no_parameters() -> None:
    with pytest.raises(UsageError, match="has both"):
        step("risk", RISK)
    with pytest.raises(UsageError, match=r"config\.parameters are read by a model\.py"):
        step("risk", {**RISK, "config": {"parameters": {"cap": "1"}}}, code=None)
