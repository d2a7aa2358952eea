"""The onnxruntime shim's ``execute`` without a server: a stand-in for the stub's
``triton_python_backend_utils`` hands it requests as the stub does (BYTES as object arrays of
Python bytes) and collects what it answers. The real server path is
``tests/builder/runtime/test_runtime.py``; this one pins down per-request behaviour quickly.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

SHIM = Path(__file__).resolve().parents[3] / "builder" / "runtime" / "backends" / "onnxruntime" / "model.py"
KEYS = ["café", "東京", "", "web"]
_NUMPY = {"TYPE_FP32": np.float32, "TYPE_INT64": np.int64, "TYPE_STRING": np.object_}


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self.array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self.array


class Request:
    def __init__(self, inputs: dict[str, np.ndarray], requested: tuple[str, ...] = ()) -> None:
        self._inputs = [Tensor(k, v) for k, v in inputs.items()]
        self._requested = list(requested)

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    def requested_output_names(self) -> list[str]:
        return list(self._requested)


class Response:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: Any = None) -> None:
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors or []}
        self.error = error


class TritonError:
    def __init__(self, message: str) -> None:
        self.message = message


@pytest.fixture(scope="module")
def shim() -> Iterator[types.ModuleType]:
    utils = types.ModuleType("triton_python_backend_utils")
    utils.Tensor = Tensor  # type: ignore[attr-defined]
    utils.InferenceResponse = Response  # type: ignore[attr-defined]
    utils.TritonError = TritonError  # type: ignore[attr-defined]
    utils.triton_string_to_numpy = _NUMPY.__getitem__  # type: ignore[attr-defined]
    saved = sys.modules.get("triton_python_backend_utils")
    sys.modules["triton_python_backend_utils"] = utils
    spec = importlib.util.spec_from_file_location("onnxruntime_shim_under_test", SHIM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
        if saved is None:
            sys.modules.pop("triton_python_backend_utils", None)
        else:
            sys.modules["triton_python_backend_utils"] = saved


def _save(repo: Path, graph: onnx.GraphProto, spec: dict[str, Any]) -> dict[str, str]:
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    (repo / "1").mkdir(parents=True)
    onnx.save(model, repo / "1" / "model.onnx")
    return {"model_config": json.dumps(spec), "model_repository": str(repo), "model_version": "1"}


def strings_args(repo: Path, *, code_type: str = "TYPE_INT64") -> dict[str, str]:
    """S -> CODE (index in KEYS, else -1) and ECHO (S unchanged); X -> Y = X * 2, batched."""
    inputs = [
        helper.make_tensor_value_info("S", TensorProto.STRING, ["N", 1]),
        helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2]),
    ]
    outputs = [
        helper.make_tensor_value_info("CODE", TensorProto.INT64, ["N", 1]),
        helper.make_tensor_value_info("ECHO", TensorProto.STRING, ["N", 1]),
        helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2]),
    ]
    nodes = [
        helper.make_node(
            "LabelEncoder",
            ["S"],
            ["CODE"],
            domain="ai.onnx.ml",
            keys_strings=KEYS,
            values_int64s=list(range(len(KEYS))),
            default_int64=-1,
        ),
        helper.make_node("Identity", ["S"], ["ECHO"]),
        helper.make_node("Mul", ["X", "two"], ["Y"]),
    ]
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(nodes, "strings", inputs, outputs, [two])
    spec = {
        "max_batch_size": 8,
        "input": [
            {"name": "S", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "X", "data_type": "TYPE_FP32", "dims": [2]},
        ],
        "output": [
            {"name": "CODE", "data_type": code_type, "dims": [1]},
            {"name": "ECHO", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "Y", "data_type": "TYPE_FP32", "dims": [2]},
        ],
    }
    return _save(repo, graph, spec)


def reshape_args(repo: Path) -> dict[str, str]:
    """X [N, 3] -> Y = reshape(X, [-1, 4]): fails unless 3N divides by 4."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", 4])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 4])
    graph = helper.make_graph([helper.make_node("Reshape", ["X", "shape"], ["Y"])], "r", [x], [y], [shape])
    spec = {
        "max_batch_size": 8,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [3]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [4]}],
    }
    return _save(repo, graph, spec)


def _strings_request(values: list[str], *, requested: tuple[str, ...] = ()) -> Request:
    s = np.array([v.encode() for v in values], dtype=object).reshape(-1, 1)  # as the stub hands BYTES
    x = np.arange(2 * len(values), dtype=np.float32).reshape(-1, 2)
    return Request({"S": s, "X": x}, requested)


def _model(shim: types.ModuleType, args: dict[str, str]) -> Any:
    model = shim.TritonPythonModel()
    model.initialize(args)
    return model


def test_non_ascii_strings_reach_the_graph_as_text(shim: types.ModuleType, tmp_path: Path) -> None:
    model = _model(shim, strings_args(tmp_path))
    values = [*KEYS, "Café", "東", " "]  # the last three are near misses: no key may match
    [alone] = model.execute([_strings_request(values)])
    assert alone.error is None
    assert alone.outputs["CODE"].ravel().tolist() == [0, 1, 2, 3, -1, -1, -1]
    assert alone.outputs["ECHO"].ravel().tolist() == values
    # Batched one value per request: concatenated, run once, split back to each request.
    answers = model.execute([_strings_request([v]) for v in values])
    assert [a.outputs["CODE"].item() for a in answers] == [0, 1, 2, 3, -1, -1, -1]
    assert [a.outputs["ECHO"].item() for a in answers] == values


def test_bytes_that_are_not_utf8_fail_only_their_request(shim: types.ModuleType, tmp_path: Path) -> None:
    model = _model(shim, strings_args(tmp_path))
    bad = Request({"S": np.array([[b"\xff\xfe"]], dtype=object), "X": np.zeros((1, 2), np.float32)})
    good = _strings_request(["web"])
    answers = model.execute([good, bad, good])
    assert "UnicodeDecodeError" in answers[1].error.message
    assert [answers[0].outputs["CODE"].item(), answers[2].outputs["CODE"].item()] == [3, 3]


def test_only_requested_outputs_and_no_copies(shim: types.ModuleType, tmp_path: Path) -> None:
    model = _model(shim, strings_args(tmp_path))
    [answer] = model.execute([_strings_request(["web", "café"], requested=("Y",))])
    assert list(answer.outputs) == ["Y"]
    np.testing.assert_array_equal(answer.outputs["Y"], np.arange(4, dtype=np.float32).reshape(2, 2) * 2)
    assert model.casts == {}  # graph and config agree: nothing is cast on the way out
    # Batched, each request's rows are views of the one output onnxruntime returned.
    first, second = model.execute([_strings_request(["web"]), _strings_request(["café", ""])])
    assert first.outputs["Y"].base is not None and first.outputs["Y"].base is second.outputs["Y"].base
    assert first.outputs["Y"].flags.c_contiguous and second.outputs["Y"].shape == (2, 2)


def test_one_bad_request_in_a_batch_fails_alone(shim: types.ModuleType, tmp_path: Path) -> None:
    """4 rows reshape fine alone, 1 row does not; batched together, only the 1-row ones fail."""
    model = _model(shim, reshape_args(tmp_path))
    arrays = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) + i for i, n in enumerate([4, 1, 4, 1])]
    answers = model.execute([Request({"X": x}) for x in arrays])
    for x, answer in zip(arrays, answers, strict=True):
        if len(x) == 4:
            assert answer.error is None
            np.testing.assert_array_equal(answer.outputs["Y"], x.reshape(-1, 4))
        else:
            assert "onnxruntime shim" in answer.error.message


def test_a_request_of_another_shape_runs_apart(shim: types.ModuleType, tmp_path: Path) -> None:
    """S is [N, 1] in the graph: a [1, 2] request fails on its own, its batch-mates answer."""
    model = _model(shim, strings_args(tmp_path))
    odd = Request({"S": np.array([[b"web", b"web"]], dtype=object), "X": np.ones((1, 2), np.float32)})
    answers = model.execute([_strings_request(["café"]), odd, _strings_request(["東京"])])
    assert answers[1].error is not None and "onnxruntime shim" in answers[1].error.message
    assert [answers[0].outputs["CODE"].item(), answers[2].outputs["CODE"].item()] == [0, 1]


def test_a_missing_input_is_an_error_response(shim: types.ModuleType, tmp_path: Path) -> None:
    model = _model(shim, strings_args(tmp_path))
    partial = Request({"S": np.array([[b"web"]], dtype=object)})
    answers = model.execute([partial, _strings_request(["web"])])
    assert "X" in answers[0].error.message
    assert answers[1].error is None


def test_config_type_unlike_the_graph_refuses_to_load(shim: types.ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="config output 'CODE' is TYPE_FP32 but the graph has TYPE_INT64"):
        _model(shim, strings_args(tmp_path, code_type="TYPE_FP32"))
