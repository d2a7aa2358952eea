"""The reproduce script (build_engine.py): rendered text, argument parsing, and its build and
run logic driven against a stand-in TensorRT module and CUDA driver.

TensorRT and a GPU are not here, so the stand-ins below play TensorRT's Python API as the
script uses it (the names are TensorRT 10's) and record what the script asked of it. What the
real library does with those calls is left to tests/builder/tensorrt/test_tensorrt_gpu.py.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.tensorrt.profiles import BatchProfile, InputShapes, input_shapes
from builder.tensorrt.script import ScriptSpec, render_script
from builder.tensors import TensorSpec

X = TensorSpec("input", "float32", (-1, 5))


def spec(**overrides: Any) -> ScriptSpec:
    fields: dict[str, Any] = {
        "model": "models:/fraud/3",
        "plan": "model.sm90.plan",
        "precision": "fp16",
        "shapes": input_shapes(BatchProfile(1, 32, 64), [X]),
        "workspace_mb": 2048,
        "timing_cache": Path("/cache/timing-sm90.cache"),
        "calibration": False,
    }
    fields.update(overrides)
    return ScriptSpec(**fields)


def load(text: str) -> dict[str, Any]:
    """Execute the script's text as a module that is not __main__ (so nothing runs)."""
    namespace: dict[str, Any] = {"__name__": "build_engine"}
    exec(compile(text, "build_engine.py", "exec"), namespace)
    return namespace


# --- text and arguments -------------------------------------------------------------------------


def test_rendered_script_compiles_and_carries_the_export_settings():
    text = render_script(spec())
    compile(text, "build_engine.py", "exec")
    assert text.startswith("# Written by `builder export` for models:/fraud/3: rebuilds model.sm90.plan.")
    for expected in ("'min_shapes': 'input:1x5'", "'opt_shapes': 'input:32x5'", "'max_shapes': 'input:64x5'"):
        assert expected in text
    assert "'precision': 'fp16'" in text and "'workspace_mb': 2048" in text
    # Standalone: the builder is not importable where a user reruns it.
    assert "import builder" not in text and "from builder" not in text
    script = load(text)
    assert script["DEFAULTS"] == spec().defaults()
    args = script["parse_args"](["build"])
    assert args.min_shapes == {"input": (1, 5)}
    assert args.opt_shapes == {"input": (32, 5)}
    assert args.max_shapes == {"input": (64, 5)}
    assert (args.precision, args.workspace_mb, args.plan, args.onnx) == (
        "fp16",
        2048,
        "model.sm90.plan",
        "model.onnx",
    )
    assert args.timing_cache == "/cache/timing-sm90.cache" and args.calibration == ""


def test_the_recorded_command_means_what_the_defaults_mean():
    s = spec(precision="int8", calibration=True)
    script = load(render_script(s))
    assert vars(script["parse_args"](s.build_args())) == vars(script["parse_args"](["build"]))
    assert "--calibration" in s.build_args() and "calibration.npz" in s.build_args()


def test_flags_override_the_defaults():
    script = load(render_script(spec()))
    args = script["parse_args"](
        ["build", "--precision", "tf32", "--opt-shapes", "input:16x5", "--timing-cache", ""]
    )
    assert args.precision == "tf32" and args.opt_shapes == {"input": (16, 5)} and args.timing_cache == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--opt-shapes", "input:65x5"],  # opt > max
        ["build", "--min-shapes", "input:0x5"],  # min < 1
        ["build", "--max-shapes", "input:64x5x1"],  # ranks differ
        ["build", "--opt-shapes", "other:32x5"],  # names differ
        ["build", "--opt-shapes", "input:axb"],  # not integers
        ["build", "--precision", "int8"],  # no calibration rows
        ["build", "--precision", "bf16"],
        ["build", "--workspace-mb", "0"],
        ["infer"],  # --inputs/--outputs required
    ],
)
def test_bad_arguments_exit_2(argv: list[str]):
    script = load(render_script(spec()))
    with pytest.raises(SystemExit) as info:
        script["parse_args"](argv)
    assert info.value.code == 2


def test_shapes_round_trip_and_names_may_hold_colons():
    script = load(render_script(spec()))
    shapes = {"input:0": (1, 5), "mask": (1,), "scalar": ()}
    assert script["parse_shapes"](script["format_shapes"](shapes)) == shapes


def test_fixed_shape_spec_has_equal_min_opt_max():
    fixed = spec(shapes=(InputShapes("input", (1, 5), (1, 5), (1, 5)),))
    args = load(render_script(fixed))["parse_args"](["build"])
    assert args.min_shapes == args.opt_shapes == args.max_shapes == {"input": (1, 5)}


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="tensorrt is installed here")
def test_script_runs_standalone_and_says_tensorrt_is_missing(tmp_path: Path):
    (tmp_path / "build_engine.py").write_text(render_script(spec()))
    help_run = subprocess.run(
        [sys.executable, "build_engine.py", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert help_run.returncode == 0 and "build" in help_run.stdout and "infer" in help_run.stdout
    run = subprocess.run(
        [sys.executable, "build_engine.py", "build"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 3, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("error: cannot import tensorrt")


# --- a stand-in TensorRT ------------------------------------------------------------------------


class FakeCuda:
    """Device memory as a dict: what the script copies in is what the fake engine computes on."""

    def __init__(self) -> None:
        self.memory: dict[int, np.ndarray | None] = {}
        self.next = 1
        self.freed: list[int] = []

    def alloc(self, nbytes: int) -> int:
        ptr, self.next = self.next, self.next + 1
        self.memory[ptr] = None
        return ptr

    def free(self, ptr: int) -> None:
        self.freed.append(ptr)
        del self.memory[ptr]

    def to_device(self, ptr: int, array: np.ndarray) -> None:
        self.memory[ptr] = array.copy()

    def to_host(self, array: np.ndarray, ptr: int) -> None:
        array[...] = self.memory[ptr]

    def stream(self) -> int:
        return 7

    def synchronize(self, stream: int) -> None:
        assert stream == 7

    def name(self) -> str:
        return "Fake H200"

    def compute_capability(self) -> str:
        return "9.0"


IO = {"inputs": {"x": ("float32", (-1, 3))}, "outputs": {"y": ("float32", (-1, 3))}}


def fake_tensorrt(
    cuda: FakeCuda, *, parse_ok: bool = True, cache_fits: bool = True, profile_max: int = 4
) -> Any:
    """A module that answers the TensorRT 10 calls build_engine.py makes, and records them."""
    trt: Any = types.ModuleType("tensorrt")
    trt.__version__ = "10.5.0"
    trt.calls = {"set_shape": [], "input_shapes": [], "calibration_batches": [], "pool": []}
    trt.Logger = type("Logger", (), {"WARNING": 2, "VERBOSE": 4, "__init__": lambda self, severity: None})
    trt.BuilderFlag = types.SimpleNamespace(TF32="TF32", FP16="FP16", INT8="INT8")
    trt.MemoryPoolType = types.SimpleNamespace(WORKSPACE="WORKSPACE")
    trt.TensorIOMode = types.SimpleNamespace(INPUT="INPUT", OUTPUT="OUTPUT")
    trt.nptype = lambda dtype: np.dtype(dtype).type

    class IInt8EntropyCalibrator2:
        def __init__(self) -> None:
            pass

    trt.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2

    class Network:
        def __init__(self) -> None:
            self.inputs = [
                types.SimpleNamespace(name=n, dtype=d, shape=s) for n, (d, s) in IO["inputs"].items()
            ]
            self.num_inputs = len(self.inputs)

        def get_input(self, i: int) -> Any:
            return self.inputs[i]

    class Parser:
        def __init__(self, network: Network, logger: Any) -> None:
            self.num_errors = 0 if parse_ok else 1

        def parse_from_file(self, path: str) -> bool:
            return parse_ok

        def get_error(self, i: int) -> str:
            return "In node 0 (parseGraph): UNSUPPORTED_NODE: no importer for op: TreeEnsembleClassifier"

    trt.OnnxParser = Parser

    class Cache:
        def __init__(self, data: bytes) -> None:
            if data == b"garbage":
                raise RuntimeError("not a timing cache")
            self.data = data

        def serialize(self) -> bytes:
            return b"timings"

    class Profile:
        def set_shape(self, name: str, low: Any, opt: Any, high: Any) -> None:
            trt.calls["set_shape"].append((name, tuple(low), tuple(opt), tuple(high)))

    class Config:
        def __init__(self) -> None:
            self.flags = {"TF32"}  # TensorRT's default
            self.int8_calibrator = None
            self.calibration_profile = None
            self.profiles: list[Profile] = []
            self.cache: Cache | None = None

        def set_flag(self, flag: str) -> None:
            self.flags.add(flag)

        def clear_flag(self, flag: str) -> None:
            self.flags.discard(flag)

        def get_flag(self, flag: str) -> bool:
            return flag in self.flags

        def set_memory_pool_limit(self, pool: str, size: int) -> None:
            trt.calls["pool"].append((pool, size))

        def add_optimization_profile(self, profile: Profile) -> int:
            self.profiles.append(profile)
            return len(self.profiles) - 1

        def set_calibration_profile(self, profile: Profile) -> None:
            self.calibration_profile = profile

        def create_timing_cache(self, data: bytes) -> Cache:
            return Cache(data)

        def set_timing_cache(self, cache: Cache, ignore_mismatch: bool) -> bool:
            self.cache = cache
            return cache_fits or not cache.data

        def get_timing_cache(self) -> Cache | None:
            return self.cache

    class Builder:
        def __init__(self, logger: Any) -> None:
            pass

        def create_network(self, flags: int) -> Network:
            assert flags == 0  # TensorRT 10: explicit batch is the only mode
            return Network()

        def create_builder_config(self) -> Config:
            trt.config = Config()
            return trt.config

        def create_optimization_profile(self) -> Profile:
            return Profile()

        def build_serialized_network(self, network: Network, config: Config) -> bytes:
            if "INT8" in config.flags:  # calibration runs inside the build, as in TensorRT
                names = [t.name for t in network.inputs]
                while (pointers := config.int8_calibrator.get_batch(names)) is not None:
                    trt.calls["calibration_batches"].append(cuda.memory[pointers[0]].shape)
            return b"PLAN"

    trt.Builder = Builder

    class Context:
        def __init__(self) -> None:
            self.addresses: dict[str, int] = {}
            self.shapes: dict[str, tuple[int, ...]] = {}

        def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
            trt.calls["input_shapes"].append(tuple(shape))
            self.shapes[name] = tuple(shape)
            return shape[0] <= profile_max

        def set_tensor_address(self, name: str, ptr: int) -> None:
            self.addresses[name] = ptr

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            return (self.shapes["x"][0], 3)

        def execute_async_v3(self, stream: int) -> bool:
            cuda.memory[self.addresses["y"]] = cuda.memory[self.addresses["x"]] * 2
            return True

    class Engine:
        def __init__(self) -> None:
            self.names = [*IO["inputs"], *IO["outputs"]]
            self.num_io_tensors = len(self.names)

        def get_tensor_name(self, i: int) -> str:
            return self.names[i]

        def get_tensor_mode(self, name: str) -> str:
            return "INPUT" if name in IO["inputs"] else "OUTPUT"

        def get_tensor_dtype(self, name: str) -> str:
            return {**IO["inputs"], **IO["outputs"]}[name][0]

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            return {**IO["inputs"], **IO["outputs"]}[name][1]

        def get_tensor_profile_shape(self, name: str, index: int) -> list[tuple[int, ...]]:
            return [(1, 3), (2, 3), (profile_max, 3)]

        def create_execution_context(self) -> Context:
            return Context()

    class Runtime:
        def __init__(self, logger: Any) -> None:
            pass

        def deserialize_cuda_engine(self, data: bytes) -> Engine | None:
            return Engine() if bytes(data) == b"PLAN" else None

    trt.Runtime = Runtime
    return trt


def xspec(tmp_path: Path, **overrides: Any) -> ScriptSpec:
    x = TensorSpec("x", "float32", (-1, 3))
    fields = {
        "shapes": input_shapes(BatchProfile(1, 2, 4), [x]),
        "timing_cache": tmp_path / "cache" / "timing.cache",
        **overrides,
    }
    return spec(**fields)


def build_args(tmp_path: Path, s: ScriptSpec) -> list[str]:
    """The recorded command's flags, with the files placed under tmp_path."""
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    args = s.build_args()
    for flag, name in (("--onnx", "model.onnx"), ("--plan", s.plan), ("--result", "build.json")):
        args[args.index(flag) + 1] = str(tmp_path / name)
    if "--calibration" in args:
        args[args.index("--calibration") + 1] = str(tmp_path / "calibration.npz")
    return args


@pytest.mark.parametrize(
    "precision, flags",
    [("fp32", []), ("tf32", ["TF32"]), ("fp16", ["TF32", "FP16"]), ("int8", ["TF32", "FP16", "INT8"])],
)
def test_precision_flags(precision: str, flags: list[str]):
    script = load(render_script(spec()))
    trt = fake_tensorrt(FakeCuda())
    config = trt.Builder(None).create_builder_config()
    calibrator, profile = object(), object()
    assert script["set_precision"](trt, config, precision, calibrator, profile) == flags
    if precision == "int8":
        assert config.int8_calibrator is calibrator and config.calibration_profile is profile
    else:
        assert config.int8_calibrator is None


def test_build_sets_profile_workspace_and_writes_plan_and_cache(tmp_path: Path):
    s = xspec(tmp_path)
    script = load(render_script(s))
    cuda = FakeCuda()
    trt = fake_tensorrt(cuda)
    result = script["build"](script["parse_args"](build_args(tmp_path, s)), trt, cuda)
    assert trt.calls["set_shape"] == [("x", (1, 3), (2, 3), (4, 3))]
    assert trt.calls["pool"] == [("WORKSPACE", 2048 << 20)]
    assert len(trt.config.profiles) == 1
    assert (tmp_path / "model.sm90.plan").read_bytes() == b"PLAN"
    assert (tmp_path / "cache" / "timing.cache").read_bytes() == b"timings"
    assert result["device"] == {"name": "Fake H200", "compute_capability": "9.0"}
    assert result["tensorrt_version"] == "10.5.0" and result["flags"] == ["TF32", "FP16"]
    assert result["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 3]}]
    assert result["timing_cache"] == {
        "path": str(tmp_path / "cache" / "timing.cache"),
        "reused": False,
        "saved": True,
    }
    assert result["profile"] == {"x": {"min": [1, 3], "opt": [2, 3], "max": [4, 3]}}


def test_timing_cache_is_reused_and_a_foreign_one_set_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    s = xspec(tmp_path)
    script = load(render_script(s))
    argv = build_args(tmp_path, s)
    cuda = FakeCuda()
    script["build"](script["parse_args"](argv), fake_tensorrt(cuda), cuda)
    again = script["build"](script["parse_args"](argv), fake_tensorrt(cuda), cuda)
    assert again["timing_cache"]["reused"] is True
    other_gpu = script["build"](script["parse_args"](argv), fake_tensorrt(cuda, cache_fits=False), cuda)
    assert other_gpu["timing_cache"]["reused"] is False
    assert "does not fit this GPU or TensorRT version" in capsys.readouterr().err
    (tmp_path / "cache" / "timing.cache").write_bytes(b"garbage")
    assert script["build"](script["parse_args"](argv), fake_tensorrt(cuda), cuda)["timing_cache"]["saved"]


def test_no_timing_cache_when_asked_for_none(tmp_path: Path):
    s = xspec(tmp_path, timing_cache=None)
    script = load(render_script(s))
    cuda = FakeCuda()
    result = script["build"](script["parse_args"](build_args(tmp_path, s)), fake_tensorrt(cuda), cuda)
    assert result["timing_cache"] == {"path": None, "reused": False, "saved": False}


def test_int8_calibrates_on_full_batches_of_the_opt_shape(tmp_path: Path):
    s = xspec(tmp_path, precision="int8", calibration=True)
    np.savez(tmp_path / "calibration.npz", x=np.arange(15, dtype=np.float64).reshape(5, 3))
    script = load(render_script(s))
    cuda = FakeCuda()
    trt = fake_tensorrt(cuda)
    result = script["build"](script["parse_args"](build_args(tmp_path, s)), trt, cuda)
    # 5 rows at opt 2: three full batches (the last wraps around), as TensorRT calibrates at opt.
    assert trt.calls["calibration_batches"] == [(2, 3), (2, 3), (2, 3)]
    assert result["calibration"]["batches"] == 3 and result["flags"] == ["TF32", "FP16", "INT8"]


def test_calibration_batches_wrap_and_cover_every_row():
    script = load(render_script(spec()))
    rows = np.arange(5)[:, None].astype(np.float32)
    batches = script["calibration_batches"]({"x": rows}, 4)
    assert [b["x"][:, 0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 0, 1, 2]]
    assert len(script["calibration_batches"]({"x": rows}, 8)) == 1  # fewer rows than opt: tiled


def test_parse_failure_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    s = xspec(tmp_path)
    script = load(render_script(s))
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt(cuda, parse_ok=False))
    script["CudaDriver"] = lambda: cuda
    assert script["main"](build_args(tmp_path, s)) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: TensorRT cannot parse") and "TreeEnsembleClassifier" in last
    assert not (tmp_path / "model.sm90.plan").exists()


def test_main_writes_the_result_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    s = xspec(tmp_path)
    script = load(render_script(s))
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt(cuda))
    script["CudaDriver"] = lambda: cuda
    assert script["main"](build_args(tmp_path, s)) == 0
    import json

    assert json.loads((tmp_path / "build.json").read_text())["plan_bytes"] == 4


def test_infer_runs_every_row_in_batches_the_profile_allows(tmp_path: Path):
    script = load(render_script(spec()))
    cuda = FakeCuda()
    trt = fake_tensorrt(cuda, profile_max=4)
    (tmp_path / "model.plan").write_bytes(b"PLAN")
    rows = np.arange(30, dtype=np.float64).reshape(10, 3)
    np.savez(tmp_path / "in.npz", x=rows)
    argv = ["infer", "--plan", str(tmp_path / "model.plan"), "--inputs", str(tmp_path / "in.npz")]
    args = script["parse_args"]([*argv, "--outputs", str(tmp_path / "out.npz")])
    result = script["infer"](args, trt, cuda)
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["y"], (rows * 2).astype(np.float32))
        assert out["y"].dtype == np.float32  # inputs were cast to the engine's dtype
    assert trt.calls["input_shapes"] == [(4, 3), (4, 3), (2, 3)]
    assert result["rows"] == 10 and result["batches"] == 3
    assert not cuda.memory, "every device buffer is freed"


def test_infer_refuses_a_plan_that_does_not_deserialize(tmp_path: Path):
    script = load(render_script(spec()))
    cuda = FakeCuda()
    (tmp_path / "model.plan").write_bytes(b"another GPU's plan")
    np.savez(tmp_path / "in.npz", x=np.zeros((2, 3)))
    args = script["parse_args"](
        [
            "infer",
            "--plan",
            str(tmp_path / "model.plan"),
            "--inputs",
            str(tmp_path / "in.npz"),
            "--outputs",
            "o.npz",
        ]
    )
    with pytest.raises(script["Failure"], match="does not deserialize"):
        script["infer"](args, fake_tensorrt(cuda), cuda)


# --- bench ----------------------------------------------------------------------------------------


def bench_args(script: dict[str, Any], tmp_path: Path, *extra: str) -> Any:
    (tmp_path / "model.plan").write_bytes(b"PLAN")
    argv = ["bench", "--plan", str(tmp_path / "model.plan"), "--seconds", "0.05", "--warmup", "0.01"]
    return script["parse_args"]([*argv, *extra])


def test_bench_times_each_profile_batch_size_and_frees_its_buffers(tmp_path: Path):
    script = load(render_script(spec()))
    cuda = FakeCuda()
    trt = fake_tensorrt(cuda, profile_max=4)
    latencies = tmp_path / "latencies.npz"
    result = script["bench"](bench_args(script, tmp_path, "--latencies", str(latencies)), trt, cuda)
    # Without --batch-sizes: the profile's min, opt and max (1, 2, 4 in the stand-in).
    assert [p["batch_size"] for p in result["points"]] == [1, 2, 4]
    for point in result["points"]:
        assert point["calls"] > 0 and 0 < point["p50_ms"] <= point["p99_ms"]
        assert point["rows_per_s"] > 0
    with np.load(latencies) as saved:
        assert sorted(saved.files) == ["batch1", "batch2", "batch4"]
        assert [len(saved[f"batch{p['batch_size']}"]) for p in result["points"]] == [
            p["calls"] for p in result["points"]
        ]
    # One set of buffers per batch size, bound once: every call after it reuses them.
    assert trt.calls["input_shapes"] == [(1, 3), (2, 3), (4, 3)]
    assert not cuda.memory, "every device buffer is freed"
    assert result["device"]["compute_capability"] == "9.0"


def test_bench_tiles_the_given_rows_and_computes_on_them(tmp_path: Path):
    script = load(render_script(spec()))
    cuda = FakeCuda()
    trt = fake_tensorrt(cuda, profile_max=4)
    np.savez(tmp_path / "rows.npz", x=np.arange(6, dtype=np.float64).reshape(2, 3))
    args = bench_args(script, tmp_path, "--batch-sizes", "3", "--inputs", str(tmp_path / "rows.npz"))
    engine = script["Engine"](trt, args.plan)
    rows = script["bench_rows"](engine, args, 3)
    np.testing.assert_array_equal(rows["x"], [[0, 1, 2], [3, 4, 5], [0, 1, 2]])
    assert rows["x"].dtype == np.float32
    bound = script["Bound"](engine, cuda, {"x": (3, 3)})
    np.testing.assert_array_equal(bound.run(7, rows)["y"], rows["x"] * 2)
    bound.close()
    result = script["bench"](args, trt, cuda)
    assert [p["batch_size"] for p in result["points"]] == [3]


def test_bench_refuses_batch_sizes_outside_the_profile(tmp_path: Path):
    script = load(render_script(spec()))
    cuda = FakeCuda()
    args = bench_args(script, tmp_path, "--batch-sizes", "2,8")
    with pytest.raises(script["Failure"], match=r"\[8\] are outside the engine's profile 1\.\.4"):
        script["bench"](args, fake_tensorrt(cuda, profile_max=4), cuda)
    assert not cuda.memory


def test_buffers_are_freed_when_binding_fails(tmp_path: Path):
    script = load(render_script(spec()))
    cuda = FakeCuda()
    (tmp_path / "model.plan").write_bytes(b"PLAN")
    engine = script["Engine"](fake_tensorrt(cuda, profile_max=4), str(tmp_path / "model.plan"))
    # The input's buffer is allocated before the output's shape turns out data-dependent.
    engine.context.get_tensor_shape = lambda name: (-1, 3)
    with pytest.raises(script["Failure"], match="data-dependent shape"):
        script["Bound"](engine, cuda, {"x": (2, 3)})
    assert cuda.freed and not cuda.memory


@pytest.mark.parametrize(
    "extra", [["--seconds", "0"], ["--warmup", "-1"], ["--batch-sizes", "0"], ["--batch-sizes", "a,b"]]
)
def test_bad_bench_arguments_exit_2(extra: list[str]):
    script = load(render_script(spec()))
    with pytest.raises(SystemExit) as info:
        script["parse_args"](["bench", *extra])
    assert info.value.code == 2
