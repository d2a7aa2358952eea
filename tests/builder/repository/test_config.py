"""Config generation through the protobuf schema, round-tripped through text_format."""

import pytest
from google.protobuf import json_format

from builder.errors import UsageError
from builder.repository.triton_config import (
    EnsembleStep,
    ServingOptions,
    VersionPolicy,
    ensemble_config,
    onnx_model_config,
    parse_pbtxt,
    to_pbtxt,
)
from builder.tensors import TensorSpec

X = TensorSpec("input", "float32", (-1, 5))
LABEL = TensorSpec("label", "int64", (-1, 1))
PROBS = TensorSpec("probabilities", "float32", (-1, 2))


def roundtrip(config):
    text = to_pbtxt(config)
    again = parse_pbtxt(text)
    assert again == config
    return text, again


def test_defaults_batch_and_load_anywhere():
    config = onnx_model_config("fraud", [X], [LABEL, PROBS], ServingOptions())
    text, parsed = roundtrip(config)
    assert parsed.backend == "onnxruntime"
    assert parsed.max_batch_size == 64
    # batching on, a lone request never waiting (Triton's own default delay)
    assert parsed.HasField("dynamic_batching") and "dynamic_batching {" in text
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 0
    # per-row dims: the batch axis is implied by max_batch_size
    assert list(parsed.input[0].dims) == [5]
    assert [o.name for o in parsed.output] == ["label", "probabilities"]
    assert "data_type: TYPE_INT64" in text
    # no instance kind: loads on a CPU-only server and picks the GPU where there is one
    assert parsed.instance_group[0].count == 1
    assert "KIND_GPU" not in text and "kind" not in text
    assert parsed.version_policy.latest.num_versions == 1


def test_every_cli_setting_lands_in_the_config():
    options = ServingOptions(
        max_batch_size=32,
        max_queue_delay_us=250,
        preferred_batch_sizes=(8, 16),
        max_queue_size=100,
        queue_timeout_us=5000,
        instances=3,
        version_policy=VersionPolicy.parse("specific:2,3"),
        gpu_accelerator="tensorrt",
        trt_precision="FP16",
    )
    _, c = roundtrip(onnx_model_config("m", [X], [PROBS], options, warmup_files={"input": "input"}))
    assert c.max_batch_size == 32
    assert list(c.dynamic_batching.preferred_batch_size) == [8, 16]
    policy = c.dynamic_batching.default_queue_policy
    assert (policy.max_queue_size, policy.default_timeout_microseconds) == (100, 5000)
    assert c.instance_group[0].count == 3
    assert list(c.version_policy.specific.versions) == [2, 3]
    (acc,) = c.optimization.execution_accelerators.gpu_execution_accelerator
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "FP16"
    (warm,) = c.model_warmup
    assert warm.batch_size == 1 and warm.inputs["input"].input_data_file == "input"


def test_no_batching_writes_max_batch_size_zero_and_full_dims():
    options = ServingOptions(max_batch_size=0)
    config = onnx_model_config(
        "m", [TensorSpec("x", "float32", (1, 3))], [TensorSpec("y", "float32", (1, 1))], options
    )
    text, parsed = roundtrip(config)
    assert "max_batch_size: 0" in text  # proto3 would omit it; Triton readers must see it
    assert not parsed.HasField("dynamic_batching")
    assert list(parsed.input[0].dims) == [1, 3]


def test_ensemble_steps_round_trip():
    steps = [
        EnsembleStep("pre", {"input": "input"}, {"features": "features"}),
        EnsembleStep("m", {"input": "features"}, {"probabilities": "probabilities"}),
    ]
    config = ensemble_config("ens", [X], [PROBS], steps, max_batch_size=64, options=ServingOptions())
    _, parsed = roundtrip(config)
    assert parsed.platform == "ensemble"
    assert [s.model_name for s in parsed.ensemble_scheduling.step] == ["pre", "m"]
    assert parsed.ensemble_scheduling.step[1].input_map["input"] == "features"
    assert parsed.ensemble_scheduling.step[0].model_version == -1


def test_schema_rejects_unknown_fields():
    with pytest.raises(json_format.ParseError):
        json_format.ParseDict(
            {"name": "m", "max_batch_sise": 4},
            onnx_model_config("m", [X], [PROBS], ServingOptions()).__class__(),
        )


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"max_batch_size": -1}, "max-batch-size"),
        ({"instances": 0}, "instances"),
        ({"preferred_batch_sizes": (128,)}, "outside 1..max_batch_size"),
        ({"gpu_accelerator": "cuda"}, "gpu-accelerator"),
        ({"trt_precision": "INT4"}, "trt-precision"),
    ],
)
def test_bad_options_are_usage_errors(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment):
        ServingOptions(**kwargs)


@pytest.mark.parametrize("text", ["latest:0", "specific:", "newest", "all:2", "specific:a"])
def test_bad_version_policy(text):
    with pytest.raises(UsageError, match="bad version policy"):
        VersionPolicy.parse(text)
