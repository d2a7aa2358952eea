"""The tensorrt_plan config: through the protobuf schema, round-tripped, and valid on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.repository.triton_config import ServingOptions, parse_pbtxt, to_pbtxt
from builder.repository.validate import validate_repository
from builder.repository.write import ModelArtifact, write_models
from builder.tensorrt.config import plan_model_config
from builder.tensorrt.profiles import BatchProfile, batch_profile
from builder.tensors import TensorSpec

X = TensorSpec("input", "float32", (-1, 5))
LABEL = TensorSpec("label", "int64", (-1, 1))
PROBS = TensorSpec("probabilities", "float32", (-1, 2))


def roundtrip(config):
    text = to_pbtxt(config)
    again = parse_pbtxt(text)
    assert again == config
    return text, again


def plan_config(options: ServingOptions, cc: str = "9.0", **kwargs):
    profile = batch_profile(options.max_batch_size, options.preferred_batch_sizes, kwargs.pop("opt", None))
    return plan_model_config(
        "fraud_trt",
        [X],
        [LABEL, PROBS],
        options,
        profile,
        compute_capability=cc,
        **kwargs,
    )


def test_plan_config_names_platform_gpu_and_the_built_capability():
    text, c = roundtrip(plan_config(ServingOptions(instances=2)))
    assert c.platform == "tensorrt_plan" and not c.backend
    assert c.max_batch_size == 64
    assert dict(c.cc_model_filenames) == {"9.0": "model.sm90.plan"}
    assert c.default_model_filename == "model.sm90.plan"
    assert c.instance_group[0].count == 2
    assert "kind: KIND_GPU" in text  # a plan cannot run on a CPU: say so, unlike the ONNX config
    assert list(c.input[0].dims) == [5] and [o.name for o in c.output] == ["label", "probabilities"]


def test_batcher_prefers_the_profile_opt_and_max():
    _, c = roundtrip(plan_config(ServingOptions(max_batch_size=64, max_queue_delay_us=200)))
    assert list(c.dynamic_batching.preferred_batch_size) == [32, 64]
    assert c.dynamic_batching.max_queue_delay_microseconds == 200
    _, c = roundtrip(plan_config(ServingOptions(max_batch_size=32, preferred_batch_sizes=(4, 8)), opt=16))
    assert list(c.dynamic_batching.preferred_batch_size) == [4, 8, 16, 32]


def test_no_dynamic_batching_keeps_the_profile_but_no_batcher():
    _, c = roundtrip(plan_config(ServingOptions(dynamic_batching=False)))
    assert not c.HasField("dynamic_batching") and c.max_batch_size == 64


def test_no_batching_is_written_explicitly():
    fixed = TensorSpec("input", "float32", (1, 5))
    config = plan_model_config(
        "m",
        [fixed],
        [PROBS],
        ServingOptions(max_batch_size=0),
        None,
        compute_capability="8.6",
    )
    text, c = roundtrip(config)
    assert "max_batch_size: 0" in text
    assert list(c.input[0].dims) == [1, 5] and not c.HasField("dynamic_batching")
    assert dict(c.cc_model_filenames) == {"8.6": "model.sm86.plan"}


def test_profile_must_end_at_max_batch_size():
    with pytest.raises(ValueError, match="does not end at max_batch_size"):
        plan_model_config(
            "m",
            [X],
            [PROBS],
            ServingOptions(max_batch_size=64),
            BatchProfile(1, 8, 16),
            compute_capability="9.0",
        )


def test_warmup_uses_the_model_level_files():
    _, c = roundtrip(plan_config(ServingOptions(), warmup_files={"input": "input"}))
    (warmup,) = c.model_warmup
    assert warmup.batch_size == 1 and warmup.inputs["input"].input_data_file == "input"


def test_written_plan_model_validates_and_a_missing_plan_is_reported(tmp_path: Path):
    repo = tmp_path / "repo"
    config = plan_config(ServingOptions(warmup=False))
    art = ModelArtifact("fraud_trt", config, {"model.sm90.plan": b"engine bytes", "build_engine.py": b"#"})
    write_models(repo, 1, [art])
    assert validate_repository(repo)[1] == []
    (repo / "fraud_trt" / "1" / "model.sm90.plan").unlink()
    problems = validate_repository(repo)[1]
    assert any("missing model.sm90.plan" in p for p in problems), problems
