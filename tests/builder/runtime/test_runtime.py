"""The embedded Triton runtime end to end: the real tritonserver, the onnxruntime shim.

A tiny ONNX model (Y = 2X + 1, Z = X*X) is served from a tmp repository whose config is
generated through Triton's own protobuf schema, then queried with tritonclient.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from builder.errors import RuntimeSetupError
from builder.runtime import server as server_module
from builder.runtime.paths import RuntimePaths
from builder.runtime.ports import free_ports
from builder.runtime.server import TritonServer

pytestmark = pytest.mark.integration
StartTriton = Callable[..., TritonServer]  # the `start_triton` fixture (conftest.py)


# ---- model repository helpers ------------------------------------------------------------
def affine_onnx() -> onnx.ModelProto:
    """Y = 2X + 1 and Z = X*X over float32 [N, 3]."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])
    z = helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 3])
    consts = [
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
    ]
    nodes = [
        helper.make_node("Mul", ["X", "two"], ["twice"]),
        helper.make_node("Add", ["twice", "one"], ["Y"]),
        helper.make_node("Mul", ["X", "X"], ["Z"]),
    ]
    graph = helper.make_graph(nodes, "affine", [x], [y, z], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime 1.32 and the NGC 24.10 backend both read
    onnx.checker.check_model(model)
    return model


def model_config(name: str, *, max_batch_size: int) -> str:
    """config.pbtxt text, built through ModelConfig (never a string template)."""
    dims = [3] if max_batch_size > 0 else [-1, 3]
    spec: dict[str, Any] = {
        "name": name,
        "backend": "onnxruntime",
        "max_batch_size": max_batch_size,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": dims}],
        "output": [
            {"name": "Y", "data_type": "TYPE_FP32", "dims": dims},
            {"name": "Z", "data_type": "TYPE_FP32", "dims": dims},
        ],
        # One instance keeps start/stop quick; no `kind`, so Triton picks CPU here.
        "instance_group": [{"count": 1}],
        "parameters": {"intra_op_thread_count": {"string_value": "1"}},
        # GPU-only block: the shim must ignore it, as production's config carries it.
        "optimization": {
            "execution_accelerators": {
                "gpu_execution_accelerator": [{"name": "tensorrt", "parameters": {"precision_mode": "FP16"}}]
            }
        },
    }
    if max_batch_size > 0:
        # A generous delay so 64 requests fired together surely meet in batches.
        spec["dynamic_batching"] = {"max_queue_delay_microseconds": 20000}
    config = json_format.ParseDict(spec, model_config_pb2.ModelConfig())
    return text_format.MessageToString(config)


def save_model(repo: Path, name: str, model: onnx.ModelProto, spec: dict[str, Any]) -> None:
    """``model`` as ``<repo>/<name>/1/model.onnx`` beside the config ``spec`` (a ModelConfig as a
    dict) rendered as Triton's text format."""
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, repo / name / "1" / "model.onnx")
    config = json_format.ParseDict(spec, model_config_pb2.ModelConfig())
    (repo / name / "config.pbtxt").write_text(text_format.MessageToString(config))


def write_model(repo: Path, name: str, *, max_batch_size: int = 8) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    onnx.save(affine_onnx(), folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(model_config(name, max_batch_size=max_batch_size))
    return folder


def write_failing_model(repo: Path, name: str, *, batching: bool = False) -> None:
    """Reshapes [N, 3] to [-1, 4]: onnxruntime fails at run time unless 3N divides by 4.

    With ``batching``, a dynamic batcher with a generous delay: a 4-row request (fine alone) and
    a 1-row one (fails alone) fired together meet in one batch, which fails as a whole.
    """
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", 4])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 4])
    graph = helper.make_graph([helper.make_node("Reshape", ["X", "shape"], ["Y"])], name, [x], [y], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    spec = {
        "name": name,
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [3]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [4]}],
        "instance_group": [{"count": 1}],
    }
    if batching:
        spec["dynamic_batching"] = {"max_queue_delay_microseconds": 20000}
    save_model(repo, name, model, spec)


STRING_KEYS = ["café", "東京", "", "web"]  # non-ASCII UTF-8, the empty string, plain ASCII


def write_string_model(repo: Path, name: str, *, code_type: str = "TYPE_INT64") -> None:
    """S (string [N, 1]) -> CODE = LabelEncoder(S) (index in STRING_KEYS, else -1), ECHO = S.

    CODE shows onnxruntime saw the same UTF-8 text the graph holds; ECHO the way back out.
    ``code_type`` lets a test declare a type the graph does not have.
    """
    s = helper.make_tensor_value_info("S", TensorProto.STRING, ["N", 1])
    code = helper.make_tensor_value_info("CODE", TensorProto.INT64, ["N", 1])
    echo = helper.make_tensor_value_info("ECHO", TensorProto.STRING, ["N", 1])
    nodes = [
        helper.make_node(
            "LabelEncoder",
            ["S"],
            ["CODE"],
            domain="ai.onnx.ml",
            keys_strings=STRING_KEYS,
            values_int64s=list(range(len(STRING_KEYS))),
            default_int64=-1,
        ),
        helper.make_node("Identity", ["S"], ["ECHO"]),
    ]
    graph = helper.make_graph(nodes, name, [s], [code, echo])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.checker.check_model(model)
    spec = {
        "name": name,
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "input": [{"name": "S", "data_type": "TYPE_STRING", "dims": [1]}],
        "output": [
            {"name": "CODE", "data_type": code_type, "dims": [1]},
            {"name": "ECHO", "data_type": "TYPE_STRING", "dims": [1]},
        ],
        "instance_group": [{"count": 1}],
        "dynamic_batching": {"max_queue_delay_microseconds": 20000},
    }
    save_model(repo, name, model, spec)


def expected(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x * 2 + 1, x * x


def stub_pids(repo: Path) -> list[int]:
    """Python-backend stubs serving models of ``repo`` (their argv names the model path)."""
    done = subprocess.run(
        ["pgrep", "-f", f"triton_python_backend_stub {re.escape(str(repo))}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(pid) for pid in done.stdout.split()]


def server_pids(repo: Path) -> list[int]:
    done = subprocess.run(
        ["pgrep", "-f", "--", f"--model-repository={re.escape(str(repo))}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(pid) for pid in done.stdout.split()]


# ---- one server shared by the inference tests ----------------------------------------------
@pytest.fixture(scope="module")
def served(triton_runtime: RuntimePaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "affine", max_batch_size=8)
    write_model(repo, "affine_nobatch", max_batch_size=0)
    write_failing_model(repo, "reshape_fails")
    write_failing_model(repo, "reshape_batched", batching=True)
    write_string_model(repo, "strings")
    server = TritonServer(repo, runtime=triton_runtime, log_path=repo.parent / "triton.log")
    with server:
        yield server


def test_infer_over_http(served: TritonServer) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    client = httpclient.InferenceServerClient(served.http_url, connection_timeout=10)
    try:
        request = httpclient.InferInput("X", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        result = client.infer("affine", [request])
        y, z = expected(x)
        np.testing.assert_allclose(result.as_numpy("Y"), y)
        np.testing.assert_allclose(result.as_numpy("Z"), z)
        assert result.as_numpy("Y").dtype == np.float32
        # Served through the shim, Triton still reports the native backend's platform.
        assert client.get_model_metadata("affine")["platform"] == "onnxruntime_onnx"
    finally:
        client.close()


def test_infer_over_grpc_returns_only_requested_outputs(served: TritonServer) -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        request = grpcclient.InferInput("X", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        result = client.infer(
            "affine", [request], outputs=[grpcclient.InferRequestedOutput("Z")], client_timeout=10
        )
    np.testing.assert_allclose(result.as_numpy("Z"), expected(x)[1])
    assert result.as_numpy("Y") is None


def test_model_without_batching(served: TritonServer) -> None:
    x = np.ones((5, 3), dtype=np.float32)
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        request = grpcclient.InferInput("X", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        result = client.infer("affine_nobatch", [request], client_timeout=10)
    np.testing.assert_allclose(result.as_numpy("Y"), expected(x)[0])


def test_model_error_is_an_error_response_not_a_crash(served: TritonServer) -> None:
    x = np.ones((1, 3), dtype=np.float32)
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        request = grpcclient.InferInput("X", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("reshape_fails", [request], client_timeout=10)
        assert "onnxruntime shim" in str(caught.value.message())
        assert client.is_model_ready("reshape_fails")  # the stub survived its error
        assert client.is_server_ready()


def _execution_count(client: grpcclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("execution_count", 0))


def test_dynamic_batching_runs_requests_together(served: TritonServer) -> None:
    """64 concurrent requests of 1-3 rows: fewer executions than requests, each answer its own."""
    requests = 64
    inputs = [
        np.full((1 + i % 3, 3), i, dtype=np.float32) + np.arange(3, dtype=np.float32) for i in range(requests)
    ]
    results: dict[int, Any] = {}
    done = threading.Event()
    lock = threading.Lock()

    def callback(index: int, result: Any, error: Any) -> None:
        with lock:
            results[index] = error if error is not None else result.as_numpy("Y")
            if len(results) == requests:
                done.set()

    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        before = _execution_count(client, "affine")
        for index, x in enumerate(inputs):
            request = grpcclient.InferInput("X", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            client.async_infer(
                "affine",
                [request],
                callback=lambda result, error, index=index: callback(index, result, error),
                client_timeout=30,
            )
        assert done.wait(60), f"only {len(results)} of {requests} answers arrived"
        executions = _execution_count(client, "affine") - before

    for index, x in enumerate(inputs):
        answer = results[index]
        assert isinstance(answer, np.ndarray), f"request {index} failed: {answer}"
        np.testing.assert_allclose(answer, expected(x)[0])  # split back to the right request
    assert executions < requests, f"{executions} executions for {requests} requests: no batching"


def _fire_together(url: str, model: str, inputs: list[list[Any]], outputs: list[str]) -> dict[int, Any]:
    """Send every request at once (so the batcher can merge them); index -> answers or error."""
    results: dict[int, Any] = {}
    done = threading.Event()
    lock = threading.Lock()

    def callback(index: int, result: Any, error: Any) -> None:
        with lock:
            results[index] = error if error is not None else {o: result.as_numpy(o) for o in outputs}
            if len(results) == len(inputs):
                done.set()

    with grpcclient.InferenceServerClient(url) as client:
        for index, request in enumerate(inputs):
            client.async_infer(
                model,
                request,
                callback=lambda result, error, index=index: callback(index, result, error),
                client_timeout=30,
            )
        assert done.wait(60), f"only {len(results)} of {len(inputs)} answers arrived"
    return results


def _bytes_input(values: list[bytes]) -> list[Any]:
    request = grpcclient.InferInput("S", [len(values), 1], "BYTES")
    request.set_data_from_numpy(np.array(values, dtype=object).reshape(-1, 1))
    return [request]


def test_string_inputs_keep_their_utf8(served: TritonServer) -> None:
    """Non-ASCII and empty strings reach onnxruntime as the text the graph holds, alone and batched."""
    keys = [k.encode() for k in STRING_KEYS]
    unknown = ["Café".encode(), "東".encode(), b" "]  # near misses: none may match a key
    inputs = [_bytes_input(keys + unknown)] + [_bytes_input([v]) for v in keys + unknown] * 2
    results = _fire_together(served.grpc_url, "strings", inputs, ["CODE", "ECHO"])
    want_codes = [*range(len(keys)), *([-1] * len(unknown))]
    for index in range(len(inputs)):
        answer = results[index]
        assert isinstance(answer, dict), f"request {index} failed: {answer}"
        values = (keys + unknown) if index == 0 else [(keys + unknown)[(index - 1) % len(keys + unknown)]]
        codes = want_codes if index == 0 else [want_codes[(index - 1) % len(want_codes)]]
        assert answer["CODE"].ravel().tolist() == codes
        assert answer["ECHO"].ravel().tolist() == values  # back out as the same UTF-8 bytes


def test_one_bad_request_in_a_batch_fails_alone(served: TritonServer) -> None:
    """4-row requests (fine alone) batched with 1-row ones (which fail): only the 1-row ones fail."""
    shapes = [4, 1, 4, 1, 1, 4]
    arrays = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 100 * i for i, n in enumerate(shapes)]
    inputs = []
    for x in arrays:
        request = grpcclient.InferInput("X", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        inputs.append([request])
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        before = _execution_count(client, "reshape_batched")
    results = _fire_together(served.grpc_url, "reshape_batched", inputs, ["Y"])
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        executions = _execution_count(client, "reshape_batched") - before
    assert executions < len(inputs), "the requests never met in a batch: the test proves nothing"
    for index, x in enumerate(arrays):
        answer = results[index]
        if len(x) == 4:
            assert isinstance(answer, dict), f"good request {index} failed: {answer}"
            np.testing.assert_array_equal(answer["Y"], x.reshape(-1, 4))
        else:
            assert isinstance(answer, InferenceServerException), f"bad request {index} answered {answer}"
            assert "onnxruntime shim" in str(answer.message())


def test_config_type_unlike_the_graph_refuses_to_load(start_triton: StartTriton, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_string_model(repo, "strings_wrong", code_type="TYPE_FP32")
    server = start_triton(repo, model_control_mode="explicit")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("strings_wrong", client_timeout=60)
        assert "config output 'CODE' is TYPE_FP32 but the graph has TYPE_INT64" in str(caught.value.message())
        assert not client.is_model_ready("strings_wrong")


# ---- lifecycle ---------------------------------------------------------------------------------
def test_load_model_star_loads_every_model_as_tritons_own_flag(tmp_path: Path) -> None:
    """`builder serve --load-model '*'` (Triton's convention for "all") was refused as a model
    named '*'; it is passed through, and Triton loads every model of the repository."""
    from support.servers import free_port

    repo = tmp_path / "repo"
    write_model(repo, "affine")
    write_model(repo, "affine_nobatch", max_batch_size=0)
    http_port = free_port()
    args = [
        sys.executable, "-m", "builder", "serve", "--repo", str(repo), "--model-control-mode", "explicit",
        "--load-model", "*", "--http-port", str(http_port), "--grpc-port", str(free_port()),
        "--metrics-port", str(free_port()), "--address", "127.0.0.1",
    ]  # fmt: skip
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", connection_timeout=10)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if client.is_model_ready("affine") and client.is_model_ready("affine_nobatch"):
                    break
            except Exception:  # not listening yet
                pass
            time.sleep(0.3)
        ready = client.is_model_ready("affine") and client.is_model_ready("affine_nobatch")
        assert ready, log.read_text(errors="replace")
    finally:
        client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)


def test_explicit_mode_load_and_unload(start_triton: StartTriton, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    write_model(repo, "affine_nobatch", max_batch_size=0)
    server = start_triton(repo, model_control_mode="explicit", load_models=["affine"])
    client = httpclient.InferenceServerClient(server.http_url, connection_timeout=10)
    try:
        assert client.is_model_ready("affine")
        assert not client.is_model_ready("affine_nobatch")
        client.load_model("affine_nobatch")
        assert client.is_model_ready("affine_nobatch")
        client.unload_model("affine")
        deadline = time.monotonic() + 15
        while client.is_model_ready("affine") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not client.is_model_ready("affine")
        states = {m["name"]: m.get("state") for m in server.models()}
        assert states["affine_nobatch"] == "READY"
        assert states["affine"] != "READY"
    finally:
        client.close()


def test_stop_leaves_no_processes(start_triton: StartTriton, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    server = start_triton(repo)
    assert stub_pids(repo), "expected a Python-backend stub while serving"
    server.stop()
    assert stub_pids(repo) == []
    assert server_pids(repo) == []
    assert not server.is_ready()


def test_broken_config_fails_fast_with_log_tail(start_triton: StartTriton, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('name: "broken"\nbackend: {{ not protobuf')
    started = time.monotonic()
    with pytest.raises(RuntimeSetupError) as caught:
        start_triton(repo)
    assert time.monotonic() - started < 30
    message = caught.value.message
    assert "exited during start" in message
    assert "last lines of" in message and "broken" in message  # the server's own log lines
    assert stub_pids(repo) == [] and server_pids(repo) == []


def test_start_timeout_kills_the_server(start_triton: StartTriton, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    with pytest.raises(RuntimeSetupError, match="not ready before the start timeout"):
        start_triton(repo, timeout=0.3)  # loading the model alone takes longer
    assert _wait_gone(repo, 5) == ([], [])


def test_explicit_port_already_taken(start_triton: StartTriton, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(RuntimeSetupError, match=f"http port {taken} is already in use"):
            start_triton(repo, http_port=taken)
        assert time.monotonic() - started < 5


def test_picked_port_taken_is_retried(
    start_triton: StartTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port grabbed between picking and binding costs one retry, not a failed start."""
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        real = server_module.free_ports
        calls: list[int] = []

        def racy_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
            calls.append(count)
            ports = real(count, host)
            return [ports[0], taken, ports[2]] if len(calls) == 1 else ports  # gRPC collides

        monkeypatch.setattr(server_module, "free_ports", racy_free_ports)
        server = start_triton(repo)
        assert len(calls) == 2
        assert server.ports["grpc"] != taken
        assert server.is_ready()
        assert "retrying with fresh ports" in server.log_path.read_text()


def _wait_gone(repo: Path, seconds: float) -> tuple[list[int], list[int]]:
    deadline = time.monotonic() + seconds
    while (server_pids(repo) or stub_pids(repo)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return server_pids(repo), stub_pids(repo)


def test_killed_owner_leaves_no_server(triton_runtime: RuntimePaths, tmp_path: Path) -> None:
    """An owner killed with SIGKILL (no cleanup runs) still takes Triton and its stubs along."""
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    script = (
        "import sys; from pathlib import Path\n"
        "from builder.runtime.paths import locate_runtime\n"
        "from builder.runtime.server import TritonServer\n"
        # Kept in a variable: a dropped TritonServer stops its server (weakref.finalize).
        "server = TritonServer(Path(sys.argv[1]), runtime=locate_runtime(Path(sys.argv[2])))\n"
        "server.start()\n"
        "print('ready', flush=True); sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, str(repo), str(triton_runtime.root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as owner:
        try:
            assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
            assert server_pids(repo) and stub_pids(repo)
        finally:
            owner.kill()
    assert _wait_gone(repo, 15) == ([], [])


def test_builder_serve_runs_until_sigterm(triton_runtime: RuntimePaths, tmp_path: Path) -> None:
    """`builder serve` in the foreground: endpoints printed once ready, clean stop on SIGTERM."""
    repo = tmp_path / "repo"
    write_model(repo, "affine")
    http, grpc, metrics = free_ports(3)
    cli = "from builder.cli.main import app; import builder.cli.serve; app()"
    command = [
        sys.executable, "-c", cli, "serve", "--repo", str(repo), "--address", "127.0.0.1",
        "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
        "--runtime-dir", str(triton_runtime.root), "--log-file", str(tmp_path / "triton.log"),
    ]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if "Ctrl-C to stop" in line:
                    break
            printed = "".join(lines)
            assert f"127.0.0.1:{http}" in printed and f"127.0.0.1:{grpc}" in printed, printed
            assert "affine" in printed and "READY" in printed, printed
            proc.send_signal(signal.SIGTERM)
            rest, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, printed + rest
    assert "stopped" in rest
    assert stub_pids(repo) == [] and server_pids(repo) == []
