"""Build a TensorRT engine from an ONNX model, or run a built engine on saved inputs.

``builder export --format tensorrt`` writes this file beside the plan as ``build_engine.py`` and
runs it in a subprocess, so the builder never imports TensorRT and a failed or crashed build
cannot take the builder down. The settings of that export are the defaults below (DEFAULTS),
and ``build_command.txt`` next to this file holds the exact command that was run: rerun it in
this folder to rebuild the plan by hand. Needs Python 3.10+, numpy, tensorrt and an NVIDIA
driver; CUDA memory is reached through the driver library (libcuda.so.1) with ctypes, so no
CUDA Python package is needed. It is one file, longer than this project's modules, by design:
it is copied beside the plan and must run there alone.

    python build_engine.py build [--precision fp16 --opt-shapes input:32x5 ...]
    python build_engine.py infer --inputs rows.npz --outputs out.npz
    python build_engine.py bench [--batch-sizes 1,8,64 --seconds 2]

Exit codes: 0 done; 1 the build or the run failed (the reason is the last line on stderr);
2 bad arguments; 3 tensorrt, the NVIDIA driver or a GPU is missing.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# render_script() replaces the next line with the settings of one export.
DEFAULTS: dict[str, Any] = {}

PRECISIONS = ("fp32", "tf32", "fp16", "int8")
EXIT_FAILED, EXIT_MISSING = 1, 3  # 2, bad arguments, is argparse's own


class Failure(Exception):
    """A build or run that cannot go on; its message is the script's last stderr line."""


class Missing(Exception):
    """tensorrt, the driver or a GPU is not there."""


def log(message: str) -> None:
    print(f"build_engine: {message}", file=sys.stderr, flush=True)


# --- arguments -------------------------------------------------------------------------------


def parse_shapes(text: str | None) -> dict[str, tuple[int, ...]]:
    """``input:1x5,mask:1x5`` (trtexec's form) -> {"input": (1, 5), "mask": (1, 5)}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, dims = item.strip().rpartition(":")  # rpartition: names may hold ':'
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"{item!r}: expected NAME:DxDx...")
        try:
            shapes[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: dimensions must be integers") from None
    return shapes


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1,8,64`` -> (1, 8, 64); every size >= 1."""
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: batch sizes must be >= 1")
    return sizes


def format_shapes(shapes: dict[str, Any]) -> str:
    """The inverse of parse_shapes."""
    return ",".join(f"{name}:{'x'.join(str(int(d)) for d in dims)}" for name, dims in shapes.items())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = DEFAULTS
    parser = argparse.ArgumentParser(prog="build_engine.py", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the engine (defaults: this export's settings)")
    b.add_argument("--onnx", default=d.get("onnx", "model.onnx"), help="ONNX model to build from")
    b.add_argument("--plan", default=d.get("plan", "model.plan"), help="where to write the engine")
    b.add_argument("--precision", choices=PRECISIONS, default=d.get("precision", "fp16"))
    for edge in ("min", "opt", "max"):
        b.add_argument(
            f"--{edge}-shapes",
            type=parse_shapes,
            default=d.get(f"{edge}_shapes", ""),
            help=f"the profile's {edge} shape per input, NAME:DxD,...",
        )
    b.add_argument("--workspace-mb", type=int, default=d.get("workspace_mb", 1024))
    b.add_argument(
        "--timing-cache",
        default=d.get("timing_cache", ""),
        help="timing cache file, read if present and written back ('' for none)",
    )
    b.add_argument(
        "--calibration", default=d.get("calibration", ""), help="INT8 calibration rows, .npz keyed by input"
    )
    b.add_argument("--result", default=d.get("result", "build.json"), help="JSON summary of the build")
    b.add_argument("--verbose", action="store_true", help="TensorRT's verbose log")
    r = sub.add_parser("infer", help="run the engine on saved inputs")
    r.add_argument("--plan", default=d.get("plan", "model.plan"))
    r.add_argument("--inputs", required=True, help=".npz of input arrays keyed by name")
    r.add_argument("--outputs", required=True, help=".npz to write the outputs into")
    r.add_argument("--result", default="", help="JSON summary of the run")
    m = sub.add_parser("bench", help="time the engine, host to host, at each batch size")
    m.add_argument("--plan", default=d.get("plan", "model.plan"))
    m.add_argument(
        "--batch-sizes",
        type=parse_sizes,
        default=(),
        help="comma-separated batch sizes (default: the profile's min, opt and max)",
    )
    m.add_argument("--seconds", type=float, default=2.0, help="measured seconds per batch size")
    m.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each")
    m.add_argument("--inputs", default="", help=".npz of rows to tile into batches (default: random)")
    m.add_argument("--latencies", default="", help=".npz to write every call's latency (ns) into")
    m.add_argument("--result", default="", help="JSON summary of the run")
    args = parser.parse_args(argv)
    if args.command == "bench" and (args.seconds <= 0 or args.warmup < 0):
        parser.error("--seconds must be > 0 and --warmup >= 0")
    if args.command == "build":
        problem = check_profile(args.min_shapes, args.opt_shapes, args.max_shapes)
        if problem:
            parser.error(problem)
        if args.workspace_mb < 1:
            parser.error("--workspace-mb must be >= 1")
        if args.precision == "int8" and not args.calibration:
            parser.error("--precision int8 needs --calibration (rows to calibrate the INT8 ranges on)")
    return args


def check_profile(
    low: dict[str, tuple[int, ...]], opt: dict[str, tuple[int, ...]], high: dict[str, tuple[int, ...]]
) -> str | None:
    """Why the three shape sets cannot form a profile, or None."""
    if not (set(low) == set(opt) == set(high)):
        return "--min-shapes, --opt-shapes and --max-shapes must name the same inputs"
    for name in low:
        a, b, c = low[name], opt[name], high[name]
        if not (len(a) == len(b) == len(c)):
            return f"input {name!r}: min, opt and max shapes differ in rank"
        if not all(1 <= x <= y <= z for x, y, z in zip(a, b, c, strict=True)):
            return f"input {name!r}: need 1 <= min <= opt <= max in every dimension"
    return None


# --- CUDA through the driver library ----------------------------------------------------------

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CudaDriver:
    """The few CUDA calls the script needs, on device 0's primary context (the one TensorRT's
    runtime API uses too, so pointers allocated here are valid for TensorRT)."""

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise Missing(f"the NVIDIA driver library libcuda.so.1 cannot be loaded ({exc})") from None
        self.lib = lib
        c_int_p, c_void_pp = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)
        signatures: dict[str, list[Any]] = {
            "cuInit": [ctypes.c_uint],
            "cuDeviceGet": [c_int_p, ctypes.c_int],
            "cuDeviceGetAttribute": [c_int_p, ctypes.c_int, ctypes.c_int],
            "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
            "cuDevicePrimaryCtxRetain": [c_void_pp, ctypes.c_int],
            "cuCtxSetCurrent": [ctypes.c_void_p],
            "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t],
            "cuMemFree_v2": [ctypes.c_uint64],
            "cuMemcpyHtoD_v2": [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t],
            "cuMemcpyDtoH_v2": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t],
            "cuStreamCreate": [c_void_pp, ctypes.c_uint],
            "cuStreamSynchronize": [ctypes.c_void_p],
            "cuStreamDestroy_v2": [ctypes.c_void_p],
            "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        }
        for name, argtypes in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        try:
            self._call("cuInit", 0)
        except Failure as exc:
            raise Missing(f"CUDA cannot start: {exc}") from None
        device = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(device), 0)
        self.device = device.value
        context = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(context), self.device)
        self._call("cuCtxSetCurrent", context)

    def _call(self, name: str, *args: Any) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(text))
            raise Failure(f"{name} failed: {(text.value or b'error').decode()} ({status})")

    def compute_capability(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._call(
            "cuDeviceGetAttribute", ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0
        )
        self._call(
            "cuDeviceGetAttribute", ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0
        )
        return f"{major.value}.{minor.value}"

    def name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buf, 256, self.device)
        return buf.value.decode(errors="replace")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(ptr), max(int(nbytes), 1))  # 0 bytes is an error
        return int(ptr.value)

    def free(self, ptr: int) -> None:
        self._call("cuMemFree_v2", ptr)

    def to_device(self, ptr: int, array: np.ndarray) -> None:
        if array.nbytes:
            self._call("cuMemcpyHtoD_v2", ptr, array.ctypes.data, array.nbytes)

    def to_host(self, array: np.ndarray, ptr: int) -> None:
        if array.nbytes:
            self._call("cuMemcpyDtoH_v2", array.ctypes.data, ptr, array.nbytes)

    def stream(self) -> int:
        handle = ctypes.c_void_p()
        self._call("cuStreamCreate", ctypes.byref(handle), 0)
        return int(handle.value or 0)

    def synchronize(self, stream: int) -> None:
        self._call("cuStreamSynchronize", stream)


# --- build ------------------------------------------------------------------------------------


def network_flags(trt: Any) -> int:
    # TensorRT 10 networks are always explicit-batch (the flag is deprecated); 8.x needs it.
    if int(str(trt.__version__).split(".")[0]) >= 10:
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)


def parse_onnx(trt: Any, builder: Any, logger: Any, onnx_path: str) -> tuple[Any, Any]:
    """The parsed network, and the parser (which must outlive the network's use)."""
    network = builder.create_network(network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not Path(onnx_path).is_file():
        raise Failure(f"no ONNX model at {onnx_path}")
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)).strip() for i in range(parser.num_errors)]
        raise Failure(f"TensorRT cannot parse {onnx_path}: {'; '.join(errors) or 'no reason given'}")
    return network, parser


def add_profile(trt: Any, builder: Any, network: Any, config: Any, args: argparse.Namespace) -> Any:
    """One optimization profile over every input with a variable dimension; None if none has."""
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    unknown = sorted(set(args.min_shapes) - {t.name for t in inputs})
    if unknown:
        raise Failure(f"profile shapes name inputs the network lacks: {unknown}")
    dynamic = [t for t in inputs if any(d < 0 for d in t.shape)]
    if not dynamic:
        return None
    profile = builder.create_optimization_profile()
    for tensor in dynamic:
        if tensor.name not in args.min_shapes:
            raise Failure(
                f"input {tensor.name!r} has shape {list(tensor.shape)} with variable dimensions, "
                "and no --min/--opt/--max-shapes for it"
            )
        low, opt, high = (
            args.min_shapes[tensor.name],
            args.opt_shapes[tensor.name],
            args.max_shapes[tensor.name],
        )
        declared = [int(d) for d in tensor.shape]
        if len(low) != len(declared) or any(
            d >= 0 and not d == x == y == z for d, x, y, z in zip(declared, low, opt, high, strict=True)
        ):
            raise Failure(
                f"input {tensor.name!r}: profile shapes {list(low)}..{list(high)} do not fit {declared}"
            )
        profile.set_shape(tensor.name, low, opt, high)
    config.add_optimization_profile(profile)
    return profile


def set_precision(
    trt: Any, config: Any, precision: str, calibrator: Any = None, profile: Any = None
) -> list[str]:
    """Builder flags of ``precision``; returns the precision flags that end up set."""
    flag = trt.BuilderFlag
    if precision == "fp32":
        config.clear_flag(flag.TF32)  # TensorRT turns TF32 on by default (Ampere and newer)
    elif precision == "tf32":
        config.set_flag(flag.TF32)
    elif precision == "fp16":
        config.set_flag(flag.FP16)
    elif precision == "int8":
        config.set_flag(flag.INT8)
        config.set_flag(flag.FP16)  # layers without an INT8 kernel fall back to FP16, not FP32
        config.int8_calibrator = calibrator
        if profile is not None:
            config.set_calibration_profile(profile)  # calibration runs at this profile's opt shape
    else:
        raise Failure(f"unknown precision {precision!r}")
    return [name for name in ("TF32", "FP16", "INT8") if config.get_flag(getattr(flag, name))]


def calibration_batches(arrays: dict[str, np.ndarray], rows_per_batch: int) -> list[dict[str, np.ndarray]]:
    """Full batches of ``rows_per_batch`` rows, wrapping around: TensorRT calibrates a dynamic
    network at the calibration profile's opt shape, so every batch must have exactly that many."""
    if not arrays:
        raise Failure("the calibration set is empty")
    rows = len(next(iter(arrays.values())))
    if rows == 0 or any(len(a) != rows for a in arrays.values()):
        raise Failure("calibration arrays must have the same, non-zero number of rows")
    total = -(-max(rows, rows_per_batch) // rows_per_batch) * rows_per_batch
    index = np.arange(total) % rows
    return [
        {name: np.ascontiguousarray(a[index[s : s + rows_per_batch]]) for name, a in arrays.items()}
        for s in range(0, total, rows_per_batch)
    ]


def make_calibrator(trt: Any, cuda: Any, batches: list[dict[str, np.ndarray]]) -> Any:
    """An entropy calibrator feeding ``batches`` through device buffers, one per input."""

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.pending = list(batches)
            self.buffers: dict[str, int] = {}
            self.rows = len(next(iter(batches[0].values())))

        # The buffers live until the process ends, which is right after the build.

        def get_batch_size(self) -> int:
            return self.rows

        def get_batch(self, names: list[str], *_: Any) -> list[int] | None:
            if not self.pending:
                return None
            batch = self.pending.pop(0)
            pointers = []
            for name in names:
                array = batch[name]
                if name not in self.buffers:
                    self.buffers[name] = cuda.alloc(array.nbytes)
                cuda.to_device(self.buffers[name], array)
                pointers.append(self.buffers[name])
            return pointers

        def read_calibration_cache(self, *_: Any) -> None:
            return None  # always calibrate afresh: the rows are part of the export

        def write_calibration_cache(self, *_: Any) -> None:
            return None

    return Calibrator()


def load_calibration(trt: Any, network: Any, path: str, rows_per_batch: int) -> list[dict[str, np.ndarray]]:
    dtypes = {}
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dtypes[tensor.name] = trt.nptype(tensor.dtype)
    with np.load(path) as data:
        missing = sorted(set(dtypes) - set(data.files))
        if missing:
            raise Failure(f"calibration file {path} lacks inputs {missing}")
        arrays = {name: np.asarray(data[name], dtype=dtype) for name, dtype in dtypes.items()}
    return calibration_batches(arrays, rows_per_batch)


def load_timing_cache(config: Any, path: str) -> dict[str, Any]:
    """Attach the timing cache at ``path`` (or a new one); a cache from another GPU or TensorRT
    version is set aside rather than trusted."""
    info: dict[str, Any] = {"path": path or None, "reused": False, "saved": False}
    data = Path(path).read_bytes() if path and Path(path).is_file() else b""
    cache = None
    if data:
        try:
            cache = config.create_timing_cache(data)
        except Exception:  # a truncated or foreign file
            cache = None
        if cache is not None and config.set_timing_cache(cache, False):
            info["reused"] = True
        else:
            log(f"timing cache {path} does not fit this GPU or TensorRT version; starting a new one")
            cache = None
    if cache is None:
        config.set_timing_cache(config.create_timing_cache(b""), False)
    return info


def save_timing_cache(config: Any, info: dict[str, Any]) -> None:
    path = info["path"]
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(bytes(config.get_timing_cache().serialize()))
    os.replace(tmp, target)  # concurrent builds: the last whole file wins, never a torn one
    info["saved"] = True


def engine_io(trt: Any, engine: Any) -> dict[str, list[dict[str, Any]]]:
    io: dict[str, list[dict[str, Any]]] = {"inputs": [], "outputs": []}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        entry = {
            "name": name,
            "dtype": np.dtype(trt.nptype(engine.get_tensor_dtype(name))).name,
            "shape": [int(d) for d in engine.get_tensor_shape(name)],
        }
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        io["inputs" if is_input else "outputs"].append(entry)
    return io


def build(args: argparse.Namespace, trt: Any, cuda: Any) -> dict[str, Any]:
    logger = trt.Logger(trt.Logger.VERBOSE if args.verbose else trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network, _parser = parse_onnx(trt, builder, logger, args.onnx)
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, args.workspace_mb << 20)
    profile = add_profile(trt, builder, network, config, args)
    calibrator, batches = None, []
    if args.precision == "int8":
        if profile is not None:
            rows = next(iter(args.opt_shapes.values()))[0]  # every input shares the batch axis
        else:
            fixed = list(network.get_input(0).shape)
            rows = int(fixed[0]) if fixed else 1
        batches = load_calibration(trt, network, args.calibration, rows)
        calibrator = make_calibrator(trt, cuda, batches)
    flags = set_precision(trt, config, args.precision, calibrator, profile)
    cache = load_timing_cache(config, args.timing_cache)
    log(f"building {args.plan} from {args.onnx}: {args.precision} ({', '.join(flags) or 'FP32'})")
    start = time.perf_counter()
    plan = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - start
    if plan is None:
        raise Failure("TensorRT could not build the engine (its log above says why)")
    data = bytes(plan)
    Path(args.plan).write_bytes(data)
    save_timing_cache(config, cache)
    engine = trt.Runtime(logger).deserialize_cuda_engine(data)
    if engine is None:
        raise Failure("the engine just built does not deserialize")
    return {
        "command": "build",
        "plan": args.plan,
        "plan_bytes": len(data),
        "tensorrt_version": str(trt.__version__),
        "device": {"name": cuda.name(), "compute_capability": cuda.compute_capability()},
        "precision": args.precision,
        "flags": flags,
        "workspace_mb": args.workspace_mb,
        "profile": {
            name: {
                "min": list(args.min_shapes[name]),
                "opt": list(args.opt_shapes[name]),
                "max": list(args.max_shapes[name]),
            }
            for name in args.min_shapes
        },
        "calibration": {"batches": len(batches), "file": args.calibration} if batches else None,
        "timing_cache": cache,
        "build_seconds": round(seconds, 3),
        **engine_io(trt, engine),
    }


# --- run --------------------------------------------------------------------------------------


class Engine:
    """A deserialized plan with one execution context, and its input and output names."""

    def __init__(self, trt: Any, plan: str) -> None:
        logger = trt.Logger(trt.Logger.WARNING)
        if not Path(plan).is_file():
            raise Failure(f"no plan at {plan}")
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(Path(plan).read_bytes())
        if self.engine is None:
            raise Failure(
                f"{plan} does not deserialize (built by another TensorRT version, or for another GPU?)"
            )
        self.trt = trt
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]
        self.variable = [n for n in self.inputs if any(d < 0 for d in self.engine.get_tensor_shape(n))]

    def dtype(self, name: str) -> Any:
        return self.trt.nptype(self.engine.get_tensor_dtype(name))

    def batch_range(self) -> tuple[int, int, int] | None:
        """(min, opt, max) batch of the first profile; None for a static engine."""
        if not self.variable:
            return None
        low, opt, high = self.engine.get_tensor_profile_shape(self.variable[0], 0)
        return int(low[0]), int(opt[0]), int(high[0])

    def feeds(self, path: str) -> dict[str, np.ndarray]:
        """The arrays of an .npz, one per input, cast to the engine's dtypes."""
        with np.load(path) as data:
            missing = sorted(set(self.inputs) - set(data.files))
            if missing:
                raise Failure(f"{path} lacks inputs {missing}")
            return {n: np.asarray(data[n], dtype=self.dtype(n)) for n in self.inputs}


class Bound:
    """Device buffers for one set of input shapes, allocated once and run many times."""

    def __init__(self, engine: Engine, cuda: Any, shapes: dict[str, tuple[int, ...]]) -> None:
        self.engine, self.cuda = engine, cuda
        self.pointers: dict[str, int] = {}
        self.host: dict[str, np.ndarray] = {}
        context = engine.context
        try:
            for name in engine.inputs:
                shape = shapes[name]
                if engine.variable and not context.set_input_shape(name, shape):
                    raise Failure(f"input {name!r}: shape {list(shape)} is outside the engine's profile")
                nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(engine.dtype(name)).itemsize
                self.pointers[name] = cuda.alloc(nbytes)
                context.set_tensor_address(name, self.pointers[name])
            for name in engine.outputs:
                shape = tuple(int(d) for d in context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise Failure(
                        f"output {name!r} has a data-dependent shape {list(shape)}, "
                        "which this script cannot run"
                    )
                self.host[name] = np.empty(shape, dtype=engine.dtype(name))
                self.pointers[name] = cuda.alloc(self.host[name].nbytes)
                context.set_tensor_address(name, self.pointers[name])
        except BaseException:
            self.close()
            raise

    def run(self, stream: int, chunk: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Copy ``chunk`` in, execute, copy the outputs back; they are overwritten by the next run."""
        for name, array in chunk.items():
            self.cuda.to_device(self.pointers[name], array)
        if not self.engine.context.execute_async_v3(stream):
            raise Failure("TensorRT refused to run the batch (its log above says why)")
        self.cuda.synchronize(stream)
        for name, array in self.host.items():
            self.cuda.to_host(array, self.pointers[name])
        return self.host

    def close(self) -> None:
        for pointer in self.pointers.values():
            self.cuda.free(pointer)
        self.pointers = {}


def infer(args: argparse.Namespace, trt: Any, cuda: Any) -> dict[str, Any]:
    """Run the engine on every row of ``--inputs``, in batches the profile allows."""
    engine = Engine(trt, args.plan)
    feeds = engine.feeds(args.inputs)
    inputs, dynamic = engine.inputs, bool(engine.variable)
    rows = len(feeds[inputs[0]]) if inputs and feeds[inputs[0]].ndim else 1
    if rows == 0:
        raise Failure(f"{args.inputs} holds no rows")
    # The largest batch the profile covers; a static engine runs the arrays as they are.
    span = engine.batch_range()
    step = span[2] if span else rows
    stream = cuda.stream()
    parts: dict[str, list[np.ndarray]] = {n: [] for n in engine.outputs}
    start = time.perf_counter()
    for first in range(0, rows, step):
        chunk = {n: np.ascontiguousarray(a[first : first + step] if dynamic else a) for n, a in feeds.items()}
        bound = Bound(engine, cuda, {n: a.shape for n, a in chunk.items()})
        try:
            for n, out in bound.run(stream, chunk).items():
                parts[n].append(out.copy())
        finally:
            bound.close()
    seconds = time.perf_counter() - start
    # Typed Any: numpy 2's savez stubs read **arrays as its allow_pickle flag, which numpy 1.x
    # (a user's rerun may have it) does not take at all.
    result: dict[str, Any] = {n: np.concatenate(p) if dynamic else p[0] for n, p in parts.items()}
    np.savez(args.outputs, **result)
    return {"command": "infer", "rows": rows, "batches": -(-rows // step), "seconds": round(seconds, 4)}


def bench_rows(engine: Engine, args: argparse.Namespace, batch: int) -> dict[str, np.ndarray]:
    """``batch`` rows per input: ``--inputs`` tiled, or seeded normal noise of the engine's shape."""
    if args.inputs:
        feeds = engine.feeds(args.inputs)
        return {n: np.ascontiguousarray(np.resize(a, (batch, *a.shape[1:]))) for n, a in feeds.items()}
    rng = np.random.default_rng(0)
    rows = {}
    for name in engine.inputs:
        dims = [int(d) for d in engine.engine.get_tensor_shape(name)]
        shape = [batch, *dims[1:]] if engine.variable else dims
        if any(d < 0 for d in shape):
            raise Failure(f"input {name!r} has variable dimensions {dims} besides the batch: give --inputs")
        rows[name] = rng.normal(size=shape).astype(engine.dtype(name))
    return rows


def bench(args: argparse.Namespace, trt: Any, cuda: Any) -> dict[str, Any]:
    """Closed-loop timing of one stream, copies included: what a caller holding numpy arrays sees
    (ONNX Runtime's ``session.run`` is timed the same way in ``make bench``)."""
    engine = Engine(trt, args.plan)
    span = engine.batch_range()
    if span is None:
        sizes: tuple[int, ...] = (int(engine.engine.get_tensor_shape(engine.inputs[0])[0]),)
        if args.batch_sizes and args.batch_sizes != sizes:
            raise Failure(f"the engine has a fixed batch of {sizes[0]}; --batch-sizes cannot change it")
    else:
        sizes = args.batch_sizes or tuple(sorted(set(span)))
        outside = [b for b in sizes if not span[0] <= b <= span[2]]
        if outside:
            raise Failure(f"batch sizes {outside} are outside the engine's profile {span[0]}..{span[2]}")
    stream = cuda.stream()
    points: list[dict[str, Any]] = []
    latencies: dict[str, Any] = {}  # Any: see infer() on numpy's savez stubs
    for batch in sizes:
        chunk = bench_rows(engine, args, batch)
        bound = Bound(engine, cuda, {n: a.shape for n, a in chunk.items()})
        try:
            deadline = time.perf_counter() + args.warmup
            while time.perf_counter() < deadline:
                bound.run(stream, chunk)
            times: list[int] = []
            end = time.perf_counter_ns() + int(args.seconds * 1e9)
            while (now := time.perf_counter_ns()) < end or not times:
                bound.run(stream, chunk)
                times.append(time.perf_counter_ns() - now)
        finally:
            bound.close()
        ns = np.asarray(times, dtype=np.int64)
        latencies[f"batch{batch}"] = ns
        points.append(
            {
                "batch_size": batch,
                "calls": len(ns),
                "p50_ms": float(np.percentile(ns, 50) / 1e6),
                "p99_ms": float(np.percentile(ns, 99) / 1e6),
                "rows_per_s": float(batch * len(ns) / (ns.sum() / 1e9)),
            }
        )
        log(f"batch {batch}: {points[-1]['p50_ms']:.3f} ms p50 over {len(ns)} calls")
    if args.latencies:
        np.savez(args.latencies, **latencies)
    return {
        "command": "bench",
        "plan": args.plan,
        "tensorrt_version": str(trt.__version__),
        "device": {"name": cuda.name(), "compute_capability": cuda.compute_capability()},
        "points": points,
    }


# --- entry point ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import tensorrt as trt
    except ImportError as exc:
        print(f"error: cannot import tensorrt ({exc}): pip install 'tensorrt==10.5.0'", file=sys.stderr)
        return EXIT_MISSING
    try:
        cuda = CudaDriver()
    except Missing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_MISSING
    try:
        result = {"build": build, "infer": infer, "bench": bench}[args.command](args, trt, cuda)
    except Failure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.result:
        Path(args.result).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("inputs", "outputs")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
