"""What the onnxruntime shim costs per request, against the floor the Python backend sets (issue 16, 3).

The embedded Triton has no native onnxruntime backend: ``builder/runtime/backends/onnxruntime/
model.py`` (a Python-backend model) stands in for it. Its floor is what any Python-backend model
pays per request (IPC to its stub process, the stub's tensor handling) plus the model's own
``session.run``. This part measures both, side by side, in one server:

1. exports two models into a throwaway repository with ``builder export``'s defaults: the demo's
   typed fraud detector (``support.train``: a scikit-learn Pipeline over 9 ``[1]``-shaped columns,
   2 of them TYPE_STRING, trained from the Feast feature store as ``gateway_bench`` builds it)
   and a numeric one (``support.models.sklearn_classifier``: one FP32 ``[5]`` input);
2. writes beside each an identity Python-backend model with the same inputs, batching and
   instance count that returns its inputs unchanged: the cost of the Python backend alone;
3. optionally copies of each export with more instances (``--shim-instances 1,2``) and served
   through another shim source (``--shim-baseline OLD_MODEL_PY``, for before/after);
4. times ``session.run`` on the same one-row feed in the model-execution env (the stubs'
   onnxruntime and numpy), CPU per call, one intra-op thread as the shim's config asks;
5. drives every model with a closed-loop gRPC client (``tritonclient.grpc.aio``, each of N clients
   sends one row and waits for its answer) in a separate process, so the client's CPU is not
   counted as the server's, models alternated A B .. B A per concurrency, and reads the CPU time
   (utime + stime, /proc) of tritonserver and all its descendants (the stubs) at the window edges.

The aim: shim CPU per request <= 2 x (identity CPU per request + session.run CPU per call), with
session.run timed back to back (hot caches). Served one request at a time, the same call finds its
caches cold and costs several times more (also reported, "cold"); the stub column (the model's own
stub processes' share of the server CPU) shows where the shim's cost above the identity goes.

Run: ``.venv/bin/python -m benchmarks.shim_bench`` (about 90 s; ``--help`` for the knobs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.tune.load import Plan, clock_ticks, closed_loop, machine_cpu_seconds, processes
from serving_contract import keys

REPO_ROOT = Path(__file__).resolve().parent.parent
TYPED, NUMERIC = "shim_typed", "shim_numeric"
IDENTITY = "_identity"
AIM_RATIO = 2.0  # shim CPU per request <= 2x (identity + session.run), issue 16 part 3
_REQUEST_TIMEOUT_S = 10.0

# A Python-backend model that returns its inputs unchanged: what the backend costs on its own.
IDENTITY_MODEL_PY = """\
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.pairs = [(i["name"], "OUT_" + i["name"]) for i in config["input"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            tensors = {t.name(): t for t in request.inputs()}
            outputs = [pb_utils.Tensor(out, tensors[name].as_numpy()) for name, out in self.pairs]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

# Serves another shim source as a Python-backend model: it inherits execute() unchanged (no
# per-request cost added) and only points initialize() at model.onnx instead of model.py.
SHIM_WRAPPER_PY = """\
import importlib.util
import json
import os
import sys

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim_under_test.py")
_spec = importlib.util.spec_from_file_location("shim_under_test", _path)
_shim = importlib.util.module_from_spec(_spec)
sys.modules["shim_under_test"] = _shim  # dataclasses look their module up while it executes
_spec.loader.exec_module(_shim)


class TritonPythonModel(_shim.TritonPythonModel):
    def initialize(self, args):
        config = json.loads(args["model_config"])
        config["default_model_filename"] = "model.onnx"
        super().initialize({**args, "model_config": json.dumps(config)})
"""

# Runs in the model-execution env (the stubs' onnxruntime + numpy 1.26), not the project's.
SESSION_RUN_TIMER = """\
import json, sys, time
import numpy as np
import onnxruntime as ort

path, feeds_path, threads, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
loaded = np.load(feeds_path)
feeds = {k: (v.astype(object) if v.dtype.kind == "U" else v) for k, v in loaded.items()}
options = ort.SessionOptions()
options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
names = [o.name for o in session.get_outputs()]
for _ in range(200):
    session.run(names, feeds)
calls, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
while time.perf_counter() - wall0 < seconds:
    for _ in range(100):
        session.run(names, feeds)
    calls += 100
cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
# As served, one call a millisecond apart finds the caches cold: several times the hot cost.
cold = 0.0
for _ in range(300):
    time.sleep(0.001)
    t0 = time.thread_time()
    session.run(names, feeds)
    cold += time.thread_time() - t0
result = {"calls": calls, "cpu_us": cpu / calls * 1e6, "wall_us": wall / calls * 1e6}
print(json.dumps({**result, "cold_cpu_us": cold / 300 * 1e6}))
"""


class ShimBenchError(Exception):
    """A reason not to report shim numbers (a model that answers wrongly, a failed request)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This part's options; prefixed, so they sit beside ``benchmarks/run.py``'s own."""
    parser.add_argument("--shim-window", type=float, default=2.0, help="measured seconds per window")
    parser.add_argument("--shim-warmup", type=float, default=0.5, help="unmeasured seconds before each")
    parser.add_argument("--shim-rounds", type=int, default=2, help="windows per point, order alternated")
    parser.add_argument("--shim-concurrency", default="1,16", help="comma-separated client counts")
    parser.add_argument(
        "--shim-instances", default="1", help="comma-separated instance counts to serve the shim with"
    )
    parser.add_argument(
        "--shim-baseline",
        type=Path,
        action="append",
        default=[],
        help="another shim model.py (e.g. `git show HEAD~1:builder/runtime/backends/onnxruntime/"
        "model.py`) served beside the current one as '<model>__baseline' (repeat: __baseline2, ...)",
    )
    parser.add_argument("--shim-run-seconds", type=float, default=1.0, help="seconds timing session.run")


# ---- model repository ------------------------------------------------------------------------
def _read_config(folder: Path) -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def _write_config(folder: Path, config: Any) -> None:
    from google.protobuf import text_format

    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))


def _variant(repo: Path, source: str, name: str, *, instances: int, model_py: Path | None = None) -> str:
    """A copy of an exported model under ``name``: more instances, or served by another shim."""
    folder = repo / name
    shutil.copytree(repo / source, folder)
    config = _read_config(folder)
    config.name = name
    del config.instance_group[:]
    config.instance_group.add(count=instances)
    if model_py is not None:
        # A plain Python-backend model (backend "python" loads <version>/model.py) running that
        # shim, through a wrapper: Triton tells a Python-backend model its file is model.py.
        config.backend = "python"
        shutil.copy2(model_py, folder / "1" / "shim_under_test.py")
        (folder / "1" / "model.py").write_text(SHIM_WRAPPER_PY)
    _write_config(folder, config)
    return name


def _identity(repo: Path, source: str) -> str:
    """The identity model for ``source``: same inputs, batching and instances; outputs = inputs."""
    from tritonclient.grpc import model_config_pb2

    exported = _read_config(repo / source)
    name = source + IDENTITY
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=exported.max_batch_size)
    config.input.extend(exported.input)
    for tensor in exported.input:
        config.output.add(name="OUT_" + tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    config.instance_group.extend(exported.instance_group)
    if exported.HasField("dynamic_batching"):
        config.dynamic_batching.CopyFrom(exported.dynamic_batching)
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(IDENTITY_MODEL_PY)
    _write_config(folder, config)
    return name


def build_repo(root: Path, say: Callable[[str], None]) -> Path:
    """Train, register and export the typed and the numeric model into ``root/model_repo``."""
    import mlflow

    from builder.export import ExportRequest, export_model
    from support import models
    from support.train import prepare_feature_store, train_and_register

    repo = root / "model_repo"
    feature_repo = root / "feature_repo"
    shutil.copytree(
        REPO_ROOT / "feature_repo", feature_repo, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    say("shim: feature data, feast apply, materialize; training the typed fraud Pipeline")
    store = prepare_feature_store(feature_repo)
    experiment = mlflow.get_experiment_by_name("bench")
    experiment_id = experiment.experiment_id if experiment else mlflow.create_experiment("bench")
    train_and_register(store, TYPED, experiment_id, n_estimators=20)
    say("shim: training the numeric classifier; exporting both with builder export's defaults")
    models.sklearn_classifier(NUMERIC)
    for name in (TYPED, NUMERIC):
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    return repo


# ---- requests --------------------------------------------------------------------------------
def feed_rows(repo: Path, model: str, n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``n`` one-row requests for ``model``, drawn from the ranges its drift reference recorded
    (categories as trained, numbers inside the training range), typed as its config says."""
    config = _read_config(repo / model)
    rng = np.random.default_rng(seed)
    param = config.parameters.get(keys.DRIFT_REFERENCE)
    reference = param.string_value if param is not None else ""
    features = {f["name"]: f for f in json.loads(reference)["features"]} if reference else {}
    from tritonclient.utils import triton_to_np_dtype

    rows: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
    for tensor in config.input:
        dtype_name = model_config_name(tensor.data_type)
        shape = [1, *tensor.dims]
        feature = features.get(tensor.name, {})
        for row in rows:
            if dtype_name == "BYTES":
                categories = feature.get("categories") or ["a"]
                values = rng.choice(categories, size=shape)
                row[tensor.name] = np.vectorize(lambda s: s.encode(), otypes=[object])(values)
            else:
                edges = feature.get("edges") or [0.0, 1.0]
                values = rng.uniform(min(edges), max(edges), size=shape)
                row[tensor.name] = values.astype(triton_to_np_dtype(dtype_name))
    return rows


def model_config_name(data_type: int) -> str:
    """``TYPE_FP32`` (an enum value) -> ``FP32``, the name the wire protocol uses."""
    from tritonclient.grpc import model_config_pb2

    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def session_run_cost(runtime: Any, repo: Path, model: str, row: dict[str, np.ndarray], seconds: float) -> Any:
    """CPU and wall µs of one ``session.run`` on ``row``, in the model-execution env."""
    config = _read_config(repo / model)
    threads = (
        int(config.parameters["intra_op_thread_count"].string_value or 1)
        if ("intra_op_thread_count" in config.parameters)
        else 1
    )
    with tempfile.TemporaryDirectory(prefix="shim-feed-") as tmp:
        feeds = Path(tmp) / "feeds.npz"
        # Strings travel as 'U' arrays (np.savez refuses objects without pickle).
        strings_as_text = {
            k: (np.char.decode(v.astype(np.bytes_)) if v.dtype == object else v) for k, v in row.items()
        }
        save: Any = np.savez  # numpy's stubs read **arrays as its allow_pickle keyword
        save(feeds, **strings_as_text)
        done = subprocess.run(
            [
                str(runtime.model_env_python),
                "-c",
                SESSION_RUN_TIMER,
                str(repo / model / "1" / "model.onnx"),
                str(feeds),
                str(threads),
                str(seconds),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    if done.returncode != 0:
        raise ShimBenchError(f"timing session.run for {model} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---- load ------------------------------------------------------------------------------------
def tree_cpu_seconds(root_pid: int, model: str | None = None) -> tuple[float, float]:
    """utime + stime of ``root_pid`` and every live descendant (Linux /proc), in seconds; and of
    those, of the Python-backend stubs serving ``model`` (the stub's argv[1] is the model's file,
    ``<repo>/<model>/<version>/<file>``): the share no other model's traffic can blur."""
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    stubs: set[int] = set()
    for entry, fields in processes():
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = int(fields[11]) + int(fields[12])
        if model is not None and int(fields[1]) == root_pid:
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and Path(argv[1].decode(errors="replace")).parent.parent.name == model:
                stubs.add(pid)
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return clock_ticks(total), clock_ticks(sum(times[pid] for pid in stubs))


@dataclass
class Window:
    """One measured window of one model at one concurrency."""

    model: str
    concurrency: int
    seconds: float
    latencies_ns: np.ndarray
    server_cpu_s: float
    stub_cpu_s: float  # the part of server_cpu_s spent in this model's own stub processes
    client_cpu_s: float
    machine_cpu_s: float
    inference_count: int
    execution_count: int


def drive(
    url: str,
    model: str,
    rows: list[dict[str, np.ndarray]],
    concurrency: int,
    warmup_s: float,
    seconds: float,
    server_pid: int,
) -> Window:
    """Closed loop: ``concurrency`` clients, each one request in flight; runs in its own process."""
    return asyncio.run(_drive(url, model, rows, concurrency, warmup_s, seconds, server_pid))


async def _drive(
    url: str,
    model: str,
    rows: list[dict[str, np.ndarray]],
    concurrency: int,
    warmup_s: float,
    seconds: float,
    server_pid: int,
) -> Window:
    import tritonclient.grpc.aio as aio

    client = aio.InferenceServerClient(url)
    requests = []
    for row in rows:  # built once: the client's CPU goes to sending, not to converting
        inputs = []
        for name, array in row.items():
            inp = aio.InferInput(name, list(array.shape), "BYTES" if array.dtype == object else _wire(array))
            inp.set_data_from_numpy(array)
            inputs.append(inp)
        requests.append(inputs)

    async def call(i: int) -> bool:
        await client.infer(model, requests[i], client_timeout=_REQUEST_TIMEOUT_S)
        return True

    async def stats() -> tuple[int, int]:
        s = (await client.get_inference_statistics(model, client_timeout=_REQUEST_TIMEOUT_S)).model_stats[0]
        return s.inference_count, s.execution_count

    async def snapshot() -> tuple[tuple[float, ...], tuple[int, ...]]:
        cpu = (*tree_cpu_seconds(server_pid, model), time.process_time(), machine_cpu_seconds())
        return cpu, await stats()

    try:  # one failed request fails the window
        loop = await closed_loop(call, len(requests), Plan(concurrency, warmup_s, seconds), snapshot)
    finally:
        await client.close()
    (c0, s0), (c1, s1) = loop.before, loop.after
    server_cpu, stub_cpu, client_cpu, machine_cpu = (b - a for a, b in zip(c0, c1, strict=True))
    inferences, executions = (b - a for a, b in zip(s0, s1, strict=True))
    latencies = loop.latencies_ns
    return Window(
        model, concurrency, seconds, latencies,
        server_cpu, stub_cpu, client_cpu, machine_cpu, int(inferences), int(executions),
    )  # fmt: skip


def _wire(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))


def summarize(windows: Sequence[Window]) -> dict[str, Any]:
    """One point from its windows: rate, latency, CPU per request of server and client."""
    latencies = np.concatenate([w.latencies_ns for w in windows])
    seconds = sum(w.seconds for w in windows)
    requests = max(len(latencies), 1)
    server = sum(w.server_cpu_s for w in windows)
    client = sum(w.client_cpu_s for w in windows)
    machine = sum(w.machine_cpu_s for w in windows)
    executions = sum(w.execution_count for w in windows)
    return {
        "model": windows[0].model,
        "concurrency": windows[0].concurrency,
        "requests": len(latencies),
        "throughput_per_s": len(latencies) / seconds,
        "p50_ms": float(np.percentile(latencies, 50)) / 1e6 if len(latencies) else float("nan"),
        "p99_ms": float(np.percentile(latencies, 99)) / 1e6 if len(latencies) else float("nan"),
        "server_cpu_us_per_request": server / requests * 1e6,
        "stub_cpu_us_per_request": sum(w.stub_cpu_s for w in windows) / requests * 1e6,
        "server_cores": server / seconds,
        "client_cores": client / seconds,
        "other_cores": max(0.0, (machine - server - client) / seconds),
        "mean_batch": sum(w.inference_count for w in windows) / executions if executions else float("nan"),
        # Each window alone, so a reader sees how far repeats disagree.
        "windows_cpu_us_per_request": [
            round(w.server_cpu_s / max(len(w.latencies_ns), 1) * 1e6, 1) for w in windows
        ],
    }


def measure(
    url: str,
    server_pid: int,
    targets: Sequence[str],
    rows: dict[str, list[dict[str, np.ndarray]]],
    args: argparse.Namespace,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every (model, concurrency) point; per concurrency the order is A B .. then .. B A."""
    windows: dict[tuple[str, int], list[Window]] = {}
    context = multiprocessing.get_context("spawn")  # the client inherits no MLflow or threads
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as client:
        for concurrency in args.concurrency:
            for r in range(args.rounds):
                for model in targets if r % 2 == 0 else list(reversed(targets)):
                    say(f"shim: {model} at concurrency {concurrency}, window {r + 1}/{args.rounds}")
                    job = client.submit(
                        drive, url, model, rows[model], concurrency, args.warmup, args.window, server_pid
                    )
                    windows.setdefault((model, concurrency), []).append(job.result())
    return [summarize(windows[(m, c)]) for c in args.concurrency for m in targets]


def check_answers(url: str, shims: Sequence[str], rows: dict[str, list[dict[str, np.ndarray]]]) -> None:
    """Every shim serving of a model answers alike on the same rows (first one is the reference),
    and every identity model returns its inputs."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:

        def infer(model: str, row: dict[str, np.ndarray]) -> Any:
            inputs = []
            for name, array in row.items():
                inp = grpcclient.InferInput(
                    name, list(array.shape), "BYTES" if array.dtype == object else _wire(array)
                )
                inp.set_data_from_numpy(array)
                inputs.append(inp)
            return client.infer(model, inputs, client_timeout=_REQUEST_TIMEOUT_S)

        reference: dict[str, Any] = {}
        for model in shims:
            base = model.split("__")[0]
            result = infer(model, rows[model][0])
            got = result.as_numpy("probabilities")
            if base not in reference:
                reference[base] = got
            elif not np.allclose(got, reference[base], atol=1e-6):
                raise ShimBenchError(f"{model} answers {got} where {base} answers {reference[base]}")
            identity = base + IDENTITY
            echoed = infer(identity, rows[identity][0])
            for name, array in rows[identity][0].items():
                if not np.array_equal(echoed.as_numpy("OUT_" + name), array):
                    raise ShimBenchError(f"{identity} did not return input {name} unchanged")
    finally:
        client.close()


def verdicts(
    points: list[dict[str, Any]], run_cost: dict[str, Any], shims: dict[str, str]
) -> list[dict[str, Any]]:
    """Shim CPU per request against the floor (identity + session.run), per model and concurrency."""
    by_key = {(p["model"], p["concurrency"]): p for p in points}
    out = []
    for served, base in shims.items():
        for (model, concurrency), point in by_key.items():
            if model != served:
                continue
            identity = by_key[(base + IDENTITY, concurrency)]["server_cpu_us_per_request"]
            floor = identity + run_cost[base]["cpu_us"]
            shim = point["server_cpu_us_per_request"]
            out.append(
                {
                    "model": served,
                    "concurrency": concurrency,
                    "shim_cpu_us": shim,
                    "identity_cpu_us": identity,
                    "session_run_cpu_us": run_cost[base]["cpu_us"],
                    "floor_cpu_us": floor,
                    "ratio": shim / floor,
                    "aim_met": shim <= AIM_RATIO * floor,
                    "shim_stub_cpu_us": point["stub_cpu_us_per_request"],
                    "identity_stub_cpu_us": by_key[(base + IDENTITY, concurrency)]["stub_cpu_us_per_request"],
                    "throughput_vs_identity": point["throughput_per_s"]
                    / by_key[(base + IDENTITY, concurrency)]["throughput_per_s"],
                }
            )
    return out


# ---- entry points ----------------------------------------------------------------------------
def _settings(given: argparse.Namespace) -> argparse.Namespace:
    """This part's knobs, whether run alone or from ``benchmarks/run.py`` (whose parser may not
    have called :func:`add_arguments`: then the defaults)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    for name in vars(args):
        if hasattr(given, name):
            setattr(args, name, getattr(given, name))
    return argparse.Namespace(
        window=args.shim_window,
        warmup=args.shim_warmup,
        rounds=args.shim_rounds,
        concurrency=[int(c) for c in str(args.shim_concurrency).split(",")],
        instances=[int(c) for c in str(args.shim_instances).split(",")],
        baseline=args.shim_baseline,
        run_seconds=args.shim_run_seconds,
    )


def run(args: argparse.Namespace, runtime: Any, root: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Everything in the module docstring; returns the ``shim`` part of the results."""
    from builder.runtime.server import ServerOptions, TritonServer

    settings = _settings(args)
    root.mkdir(parents=True, exist_ok=True)
    repo = build_repo(root, say)
    shims: dict[str, str] = {}  # served model -> the export it serves
    for base in (TYPED, NUMERIC):
        shims[base] = base
        for count in settings.instances:
            if count != 1:
                shims[_variant(repo, base, f"{base}__i{count}", instances=count)] = base
        for i, source in enumerate(settings.baseline, start=1):
            name = f"{base}__baseline{i if i > 1 else ''}"
            shims[_variant(repo, base, name, instances=1, model_py=source)] = base
        _identity(repo, base)
    targets = [
        m
        for base in (TYPED, NUMERIC)
        for m in (base, base + IDENTITY, *[s for s in shims if s != base and shims[s] == base])
    ]
    rows = {}
    for base in (TYPED, NUMERIC):
        base_rows = feed_rows(repo, base, 64)
        for model in targets:
            if model.split("__")[0].removesuffix(IDENTITY) == base:
                rows[model] = base_rows
    say("shim: timing session.run in the model-execution env")
    run_cost = {
        b: session_run_cost(runtime, repo, b, rows[b][0], settings.run_seconds) for b in (TYPED, NUMERIC)
    }
    server = TritonServer(
        repo,
        ServerOptions.explicit(sorted(p.name for p in repo.iterdir() if p.is_dir())),
        runtime=runtime,
        log_path=root / "tritonserver.log",
    )
    say(f"shim: starting tritonserver with {len(targets)} models")
    server.start(timeout=180)
    try:
        assert server.pid is not None
        check_answers(server.grpc_url, list(shims), rows)
        points = measure(server.grpc_url, server.pid, targets, rows, settings, say)
    finally:
        server.stop()
    return {
        "settings": {
            "typed_model": "demo fraud Pipeline (impute+scale, one-hot, GradientBoosting 20 trees): "
            "9 [1]-shaped inputs, 2 TYPE_STRING",
            "numeric_model": "support.models.sklearn_classifier: StandardScaler + GradientBoosting, "
            "one FP32 [5] input",
            "window_s": settings.window,
            "warmup_s": settings.warmup,
            "rounds": settings.rounds,
            "concurrency": settings.concurrency,
            "instances": settings.instances,
            "baseline": [str(b) for b in settings.baseline],
            "load_generator": "tritonclient.grpc.aio closed loop, one row per request, own process",
            "cpu": "utime+stime of tritonserver and its descendants (stubs), /proc, at the window edges",
        },
        "session_run": run_cost,
        "points": points,
        "aim": verdicts(points, run_cost, shims),
    }


def to_markdown(result: dict[str, Any]) -> str:
    """The two tables a reader wants: every point, and each shim against its floor."""
    lines = [
        "| model | clients | req/s | p50 ms | p99 ms | server CPU µs/req (windows) | of it, stub "
        "| mean batch | server cores | client cores | other cores |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in result["points"]:
        windows = "/".join(f"{w:.0f}" for w in p["windows_cpu_us_per_request"])
        lines.append(
            f"| {p['model']} | {p['concurrency']} | {p['throughput_per_s']:.0f} | {p['p50_ms']:.2f} | "
            f"{p['p99_ms']:.2f} | {p['server_cpu_us_per_request']:.0f} ({windows}) | "
            f"{p['stub_cpu_us_per_request']:.0f} | {p['mean_batch']:.1f} | "
            f"{p['server_cores']:.2f} | {p['client_cores']:.2f} | {p['other_cores']:.2f} |"
        )
    lines += [
        "",
        "session.run in-process, one row: "
        + ", ".join(
            f"{m} {c['cpu_us']:.0f} µs CPU ({c['wall_us']:.0f} wall; {c['cold_cpu_us']:.0f} µs CPU "
            "called 1 ms apart, caches cold, as when served one request at a time)"
            for m, c in result["session_run"].items()
        ),
        "",
        "| shim | clients | shim CPU µs/req | identity µs/req | session.run µs | ratio (aim <= 2) "
        "| req/s vs identity | stub µs/req: shim, identity |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a in result["aim"]:
        lines.append(
            f"| {a['model']} | {a['concurrency']} | {a['shim_cpu_us']:.0f} | {a['identity_cpu_us']:.0f} | "
            f"{a['session_run_cpu_us']:.0f} | {a['ratio']:.2f}{'' if a['aim_met'] else ' (missed)'} | "
            f"{a['throughput_vs_identity']:.2f} | "
            f"{a['shim_stub_cpu_us']:.0f}, {a['identity_stub_cpu_us']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run this part alone: throwaway registry and repository, table on stdout."""
    import mlflow

    from builder.errors import BuilderError
    from builder.runtime.install import install_runtime
    from builder.runtime.paths import default_runtime_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(f"[shim-bench] {message}", file=sys.stderr, flush=True)

    try:
        runtime = install_runtime(default_runtime_dir(), log=say)
        with tempfile.TemporaryDirectory(prefix="shim-bench-") as tmp:
            root = Path(tmp)
            logging.getLogger("mlflow").setLevel(logging.WARNING)
            os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
            mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
            experiment = mlflow.create_experiment("bench", artifact_location=str(root / "artifacts"))
            mlflow.set_experiment(experiment_id=experiment)
            result = run(args, runtime, root / "shim", say)
    except BuilderError as exc:
        print(f"shim-bench: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except ShimBenchError as exc:
        print(f"shim-bench: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
