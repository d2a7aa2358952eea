"""``builder export --format tensorrt|all`` wired end to end, with a stand-in engine script.

There is no GPU here, so the engine script is replaced by a stand-in that accepts the same
command line and answers with ONNX Runtime (``plan`` bytes are a marker). Everything around it
is real: the MLflow registry on SQLite, the ONNX export and parity, the subprocess, the plan's
parity check, config generation, metadata and the atomic write. What TensorRT itself does is
tested where a GPU is: tests/builder/tensorrt/test_tensorrt_gpu.py.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builder.errors import ConversionError, GpuUnavailableError, ParityError, RepositoryError, UsageError
from builder.export import ExportRequest, export_model
from builder.repository.triton_config import ServingOptions, parse_pbtxt
from builder.repository.validate import validate_repository
from builder.tensorrt import build as trt_build
from builder.tensorrt import gpu
from builder.tensorrt.build import build_plan
from builder.tensorrt.options import PlanOptions
from builder.tensorrt.plan import check_engine_input
from builder.tensorrt.profiles import BatchProfile, input_shapes
from builder.tensorrt.script import ScriptSpec
from builder.tensors import TensorSpec

pytestmark = pytest.mark.integration  # a real MLflow registry (SQLite) or real servers

# The stand-in engine script: same flags as build_engine.py; MODE picks a behaviour to test.
STAND_IN = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import onnxruntime as ort

MODE = __MODE__
DTYPES = {"tensor(float)": "float32", "tensor(int64)": "int64"}


def flag(name):
    return sys.argv[sys.argv.index(name) + 1]


if MODE == "missing":
    print("error: cannot import tensorrt (No module named 'tensorrt')", file=sys.stderr)
    sys.exit(3)
if MODE == "hang":
    time.sleep(30)
session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
if sys.argv[1] == "build":
    print("[TRT] [W] stand-in builder log line", file=sys.stderr)
    if MODE == "parse-error":
        print("[TRT] [E] ModelImporter.cpp:949: While parsing node number 3 [TopK]", file=sys.stderr)
        print("error: TensorRT cannot parse model.onnx: In node 3 (TopK): UNSUPPORTED_NODE", file=sys.stderr)
        sys.exit(1)
    Path(flag("--plan")).write_bytes(b"stand-in plan")
    io = {
        kind: [{"name": t.name, "dtype": DTYPES[t.type], "shape": [-1, *t.shape[1:]]} for t in tensors]
        for kind, tensors in (("inputs", session.get_inputs()), ("outputs", session.get_outputs()))
    }
    result = {
        "tensorrt_version": "10.5.0",
        "device": {"name": "Stand-in GPU", "compute_capability": "8.0" if MODE == "other-gpu" else "9.0"},
        "flags": ["TF32", "FP16"],
        "build_seconds": 0.01,
        "timing_cache": {"path": flag("--timing-cache"), "reused": False, "saved": True},
        "argv": sys.argv[1:],
        **io,
    }
    Path(flag("--result")).write_text(json.dumps(result))
    sys.exit(0)
with np.load(flag("--inputs")) as data:
    feeds = {k: data[k] for k in data.files}
names = [o.name for o in session.get_outputs()]
outputs = dict(zip(names, session.run(names, feeds)))
if MODE == "drift":  # an engine whose float outputs are off by 0.05
    outputs = {k: v + 0.05 if v.dtype.kind == "f" else v for k, v in outputs.items()}
np.savez(flag("--outputs"), **outputs)
"""


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``stand_in(mode)``: the engine script is the stand-in; the GPU checks pass as on a 9.0 GPU."""
    monkeypatch.setattr(gpu, "require_tensorrt", lambda: None)
    monkeypatch.setattr(gpu, "compute_capability", lambda: "9.0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # the default timing cache
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # failed builds' kept folders go here too

    def use(mode: str = "ok") -> None:
        monkeypatch.setattr(trt_build, "render_script", lambda spec: STAND_IN.replace("__MODE__", repr(mode)))

    use()
    return use


def tiny_mlp() -> onnx.ModelProto:
    """probabilities = softmax(input @ W + b), label = argmax: a graph TensorRT can build."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("W", TensorProto.FLOAT, [5, 2], rng.normal(size=10).astype(np.float32).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [2], [0.1, -0.1])
    nodes = [
        helper.make_node("MatMul", ["input", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
        helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 5])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N", 1]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 2]),
        ],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def registered(mlflow_registry: str) -> dict[str, str]:
    """Two ONNX-flavor models in the registry: with an input example, and with none."""
    import mlflow
    from mlflow.models import infer_signature

    rows = np.random.default_rng(1).normal(size=(5, 5)).astype(np.float32)
    signature = infer_signature({"input": rows})
    client = mlflow.MlflowClient()
    for name, example in (("trt-mlp", {"input": rows}), ("trt-noex", None)):
        with mlflow.start_run():
            mlflow.onnx.log_model(
                tiny_mlp(),
                name="model",
                signature=signature,
                input_example=example,
                registered_model_name=name,
                pip_requirements=["onnxruntime"],  # given: inferring them takes seconds
            )
        client.set_registered_model_alias(name, "champion", "1")
    return {"with_example": "models:/trt-mlp@champion", "no_example": "models:/trt-noex@champion"}


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def request(
    uri: str, repo: Path, formats: tuple[str, ...] = ("onnx", "tensorrt"), **plan: Any
) -> ExportRequest:
    return ExportRequest(uri, repo, formats=formats, tensorrt=PlanOptions(**plan))


# --- export_model ------------------------------------------------------------------------------


def test_format_all_writes_the_onnx_model_and_the_plan(stand_in, registered, repo_dir: Path):
    result = export_model(request(registered["with_example"], repo_dir))
    assert [(w.name, w.status) for w in result.written] == [
        ("trt-mlp", "written"),
        ("trt-mlp_trt", "written"),
    ]
    assert parse_pbtxt((repo_dir / "trt-mlp" / "config.pbtxt").read_text()).backend == "onnxruntime"

    config = parse_pbtxt((repo_dir / "trt-mlp_trt" / "config.pbtxt").read_text())
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 64
    assert dict(config.cc_model_filenames) == {"9.0": "model.sm90.plan"}
    assert list(config.dynamic_batching.preferred_batch_size) == [32, 64]
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    version = repo_dir / "trt-mlp_trt" / "1"
    assert sorted(p.name for p in version.iterdir()) == [
        "build.log",
        "build_command.txt",
        "build_engine.py",
        "metadata.json",
        "model.onnx",
        "model.sm90.plan",
    ]
    assert (version / "model.sm90.plan").read_bytes() == b"stand-in plan"
    assert (repo_dir / "trt-mlp_trt" / "warmup" / "input").is_file()
    command = (version / "build_command.txt").read_text().splitlines()[-1]
    assert "build_engine.py build --onnx model.onnx --plan model.sm90.plan --precision fp16" in command
    assert "--min-shapes input:1x5 --opt-shapes input:32x5 --max-shapes input:64x5" in command
    assert "stand-in builder log line" in (version / "build.log").read_text()

    meta = json.loads((version / "metadata.json").read_text())
    trt = meta["tensorrt"]
    assert meta["format"] == "tensorrt_plan" and meta["source"]["uri"] == registered["with_example"]
    assert (trt["precision"], trt["compute_capability"], trt["tensorrt_version"]) == ("fp16", "9.0", "10.5.0")
    assert trt["profile"]["batch"] == {"min": 1, "opt": 32, "max": 64}
    assert trt["parity"]["passed"] and trt["parity"]["atol"] == 1e-2 and trt["parity"]["rows"] == 69
    assert trt["timing_cache"]["path"].endswith("triton-stack/tensorrt/timing-sm90.cache")
    assert result.to_dict()["tensorrt_parity"]["passed"] is True
    assert validate_repository(repo_dir)[1] == []

    before = snapshot(repo_dir)
    again = export_model(request(registered["with_example"], repo_dir))
    assert [w.status for w in again.written] == ["unchanged", "unchanged"]
    assert snapshot(repo_dir) == before


def test_format_tensorrt_makes_the_model_name_the_plan(stand_in, registered, repo_dir: Path):
    result = export_model(
        request(registered["with_example"], repo_dir, formats=("tensorrt",), precision="tf32")
    )
    assert [w.name for w in result.written] == ["trt-mlp"]
    config = parse_pbtxt((repo_dir / "trt-mlp" / "config.pbtxt").read_text())
    assert config.platform == "tensorrt_plan"
    # clients (the gateway) read the same serving contract from a plan as from the ONNX model
    assert config.parameters["serving.layout"].string_value == "tensors"
    assert config.parameters["serving.kind"].string_value == "other"
    meta = json.loads((repo_dir / "trt-mlp" / "1" / "metadata.json").read_text())
    assert meta["tensorrt"]["parity"]["atol"] == 1e-3  # tf32's tolerance
    assert validate_repository(repo_dir)[1] == []


def test_the_plan_beside_an_onnx_only_export_leaves_that_export_unchanged(
    stand_in, registered, repo_dir: Path
):
    export_model(ExportRequest(registered["with_example"], repo_dir))
    onnx_before = snapshot(repo_dir / "trt-mlp")
    result = export_model(request(registered["with_example"], repo_dir))
    assert [(w.name, w.status) for w in result.written] == [
        ("trt-mlp", "unchanged"),
        ("trt-mlp_trt", "written"),
    ]
    assert snapshot(repo_dir / "trt-mlp") == onnx_before


def test_other_plan_settings_under_the_same_version_are_refused(stand_in, registered, repo_dir: Path):
    export_model(request(registered["with_example"], repo_dir))
    before = snapshot(repo_dir)
    with pytest.raises(RepositoryError, match="already exists with different content"):
        export_model(request(registered["with_example"], repo_dir, precision="fp32"))
    assert snapshot(repo_dir) == before


def test_engine_parity_miss_writes_nothing(stand_in, registered, repo_dir: Path):
    stand_in("drift")
    with pytest.raises(ParityError, match="TensorRT fp16 output differs from ONNX Runtime") as info:
        export_model(request(registered["with_example"], repo_dir))
    assert "probabilities" in info.value.message and "--plan-precision tf32" in (info.value.hint or "")
    assert not repo_dir.exists() or snapshot(repo_dir) == {}


def test_engine_parity_tolerance_can_be_loosened(stand_in, registered, repo_dir: Path):
    stand_in("drift")
    result = export_model(request(registered["with_example"], repo_dir, atol=0.1, rtol=0.0))
    assert result.plan_parity is not None and result.plan_parity.passed


def test_build_failure_reports_the_script_log_and_keeps_the_folder(stand_in, registered, repo_dir: Path):
    stand_in("parse-error")
    with pytest.raises(
        ConversionError, match="TensorRT build failed \\(exit 1\\): TensorRT cannot parse"
    ) as info:
        export_model(request(registered["with_example"], repo_dir))
    assert "While parsing node number 3 [TopK]" in info.value.message  # the log's last lines
    kept = Path((info.value.hint or "").split(" are in ")[1].split(";")[0])
    assert kept.parent == Path(tempfile.gettempdir())
    assert (kept / "build_engine.py").is_file() and (kept / "model.onnx").is_file()
    assert "cannot parse" in (kept / "build.log").read_text()
    assert not repo_dir.exists() or snapshot(repo_dir) == {}


def test_int8_calibrates_on_the_input_example(stand_in, registered, repo_dir: Path):
    export_model(request(registered["with_example"], repo_dir, formats=("tensorrt",), precision="int8"))
    version = repo_dir / "trt-mlp" / "1"
    with np.load(version / "calibration.npz") as data:
        assert data["input"].shape == (5, 5)
    meta = json.loads((version / "metadata.json").read_text())["tensorrt"]
    assert meta["calibration"]["source"] == "input_example" and meta["calibration"]["rows"] == 5
    assert "--calibration calibration.npz" in (version / "build_command.txt").read_text()


def test_int8_without_calibration_rows_is_refused(stand_in, registered, repo_dir: Path):
    with pytest.raises(UsageError, match="int8 needs rows to calibrate on"):
        export_model(request(registered["no_example"], repo_dir, precision="int8"))
    assert not repo_dir.exists() or snapshot(repo_dir) == {}


def test_no_gpu_stops_before_the_download(monkeypatch: pytest.MonkeyPatch, repo_dir: Path):
    monkeypatch.setattr(gpu, "gpu_names", lambda: [])
    # An unknown model: reaching the registry would be a RegistryError, so exit 9 proves the order.
    with pytest.raises(GpuUnavailableError, match="needs an NVIDIA GPU"):
        export_model(request("models:/nobody@champion", repo_dir))
    assert not repo_dir.exists()


def test_bad_plan_options_stop_before_the_download(repo_dir: Path):
    with pytest.raises(UsageError, match="--opt-batch-size 100 is outside"):
        export_model(request("models:/nobody@champion", repo_dir, opt_batch_size=100))
    with pytest.raises(UsageError, match="--format tflite"):
        export_model(ExportRequest("models:/nobody@champion", repo_dir, formats=("tflite",)))


# --- the pieces ----------------------------------------------------------------------------------


def test_classic_ml_graphs_are_refused_before_a_build():
    graph = helper.make_graph(
        [helper.make_node("LinearRegressor", ["input"], ["variable"], domain="ai.onnx.ml")],
        "ridge",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, ["N", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(
        ConversionError, match=r"no kernels for the operators ai\.onnx\.ml\.LinearRegressor"
    ) as info:
        check_engine_input(model, "models:/ridge/1")
    assert "--format onnx" in (info.value.hint or "")


def test_double_tensors_are_refused_before_a_build():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "f64",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["N", 2])],
    )
    with pytest.raises(ConversionError, match="'x' is float64"):
        check_engine_input(helper.make_model(graph), "m")


def plain_spec(tmp_path: Path) -> ScriptSpec:
    x = TensorSpec("input", "float32", (-1, 5))
    return ScriptSpec(
        model="m",
        plan="model.sm90.plan",
        precision="fp16",
        shapes=input_shapes(BatchProfile(1, 2, 4), [x]),
        workspace_mb=64,
        timing_cache=tmp_path / "timing.cache",
        calibration=False,
    )


def run_stand_in(stand_in, tmp_path: Path, mode: str, **kwargs: Any):
    stand_in(mode)
    feeds = {"input": np.zeros((3, 5), np.float32)}
    model = tiny_mlp().SerializeToString()
    return build_plan(plain_spec(tmp_path), model, feeds, tmp_path / "work", expected_cc="9.0", **kwargs)


def test_build_plan_returns_plan_outputs_and_the_files_to_keep(stand_in, tmp_path: Path):
    built = run_stand_in(stand_in, tmp_path, "ok")
    assert built.plan == b"stand-in plan" and built.compute_capability == "9.0"
    assert built.outputs["probabilities"].shape == (3, 2)
    assert set(built.files) == {"build_engine.py", "build_command.txt", "build.log", "model.onnx"}
    # The recorded command is the one that ran, relative to the folder: it reruns in the version dir.
    assert built.result["argv"] == list(built.command[2:])
    assert built.command[1] == "build_engine.py"


def test_missing_tensorrt_in_the_subprocess_is_exit_9(stand_in, tmp_path: Path):
    with pytest.raises(GpuUnavailableError, match="found no usable TensorRT or GPU: cannot import tensorrt"):
        run_stand_in(stand_in, tmp_path, "missing")


def test_engine_built_for_another_gpu_than_nvidia_smi_named_is_refused(stand_in, tmp_path: Path):
    with pytest.raises(ConversionError, match=r"compute capability 8\.0, but nvidia-smi named 9\.0") as info:
        run_stand_in(stand_in, tmp_path, "other-gpu")
    assert "CUDA_VISIBLE_DEVICES" in (info.value.hint or "")


def test_a_hung_build_is_stopped(stand_in, tmp_path: Path):
    with pytest.raises(ConversionError, match="did not finish within 1s"):
        run_stand_in(stand_in, tmp_path, "hang", timeout_s=1)


def test_serving_options_without_batching_need_fixed_shapes(stand_in, registered, repo_dir: Path):
    req = ExportRequest(
        registered["with_example"],
        repo_dir,
        formats=("tensorrt",),
        serving=ServingOptions(max_batch_size=0),
    )
    with pytest.raises(UsageError, match="needs fixed shapes"):
        export_model(req)
