"""A Python-based Triton backend named ``onnxruntime``: serves ``<version>/model.onnx``.

The embedded runtime has no native onnxruntime backend, so this file stands in for it: a
model whose config says ``backend: "onnxruntime"`` loads here on the embedded server and on
the NGC image's native C++ backend with the same config. It runs inside the model-execution
env (numpy 1.26 + onnxruntime), never the project env, so it imports nothing from ``builder``.

Why batches are concatenated: Triton's dynamic batcher hands ``execute`` several requests at
once; running them as one ``session.run`` is what turns queueing into throughput.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

# onnxruntime's type names for the Triton data types a config may declare.
_ORT_TO_TRITON = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
}


def _int_parameter(config: dict[str, Any], key: str, default: int) -> int:
    """A ``parameters { key: ... value { string_value: "N" } }`` entry, as the native backend."""
    entry = config.get("parameters", {}).get(key)
    if not entry:
        return default
    return int(entry.get("string_value", default))


def _model_path(args: dict[str, str], config: dict[str, Any]) -> str:
    filename = config.get("default_model_filename") or "model.onnx"
    path = os.path.join(args["model_repository"], args["model_version"], filename)
    # Models with external data may be a directory holding model.onnx, as for the native one.
    if os.path.isdir(path):
        path = os.path.join(path, "model.onnx")
    return path


def _check_types(kind: str, declared: list[dict[str, Any]], actual: dict[str, str]) -> None:
    """Refuse to load when the config and the ONNX graph disagree, as the native backend does."""
    for entry in declared:
        name = entry["name"]
        if name not in actual:
            raise ValueError(f"config {kind} '{name}' is not a graph {kind} (graph has {sorted(actual)})")
        expected = _ORT_TO_TRITON.get(actual[name])
        if expected is not None and entry["data_type"] != expected:
            raise ValueError(f"config {kind} '{name}' is {entry['data_type']} but the graph has {expected}")


@dataclass
class _Prepared:
    """One request's inputs, read once, and the output names it asked for."""

    index: int
    inputs: dict[str, np.ndarray]
    wanted: list[str]


def _error_response(exc: Exception) -> Any:
    error = pb_utils.TritonError(f"onnxruntime shim: {type(exc).__name__}: {exc}")
    return pb_utils.InferenceResponse(error=error)


class TritonPythonModel:
    """One instance per model instance (its own stub process and onnxruntime session)."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.max_batch_size = int(config.get("max_batch_size", 0))
        # Outputs are cast to the config's declared type: the config is the client contract.
        self.output_dtypes = {
            out["name"]: pb_utils.triton_string_to_numpy(out["data_type"]) for out in config.get("output", [])
        }
        self.input_names = [inp["name"] for inp in config.get("input", [])]

        options = ort.SessionOptions()
        options.intra_op_num_threads = _int_parameter(config, "intra_op_thread_count", 1)
        options.inter_op_num_threads = _int_parameter(config, "inter_op_thread_count", 1)
        # `optimization { execution_accelerators { gpu_... } }` is left unread on purpose:
        # it names TensorRT/CUDA, which only the GPU image has; CPU is always correct.
        self.session = ort.InferenceSession(
            _model_path(args, config), sess_options=options, providers=["CPUExecutionProvider"]
        )
        _check_types("input", config.get("input", []), {i.name: i.type for i in self.session.get_inputs()})
        _check_types(
            "output",
            config.get("output", []),
            {o.name: o.type for o in self.session.get_outputs()},
        )
        self.string_inputs = {i.name for i in self.session.get_inputs() if i.type == "tensor(string)"}

    def execute(self, requests: list[Any]) -> list[Any]:
        """Answer every request, in order; a failing group gets error responses, not a crash."""
        responses: list[Any] = [None] * len(requests)
        prepared: list[_Prepared] = []
        for index, request in enumerate(requests):
            try:
                prepared.append(_Prepared(index, self._inputs(request), self._requested(request)))
            except Exception as exc:
                responses[index] = _error_response(exc)
        for group in self._groups(prepared):
            try:
                results = self._run_group(group)
            except Exception as exc:  # any failure belongs to these requests, not the server
                results = [_error_response(exc) for _ in group]
            for item, response in zip(group, results, strict=True):
                responses[item.index] = response
        return responses

    def _inputs(self, request: Any) -> dict[str, np.ndarray]:
        arrays = {}
        for name in self.input_names:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                continue  # optional input left out; onnxruntime says so if it was needed
            array = tensor.as_numpy()
            if name in self.string_inputs:
                # Triton hands BYTES as Python bytes; onnxruntime's string tensors want str.
                array = np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(
                    array
                )
            arrays[name] = array
        return arrays

    def _groups(self, prepared: list[_Prepared]) -> list[list[_Prepared]]:
        """Requests that can share one session.run.

        Without batching every request runs alone. With batching, requests are grouped by
        their inputs' non-batch shapes: the batcher normally only combines equal shapes, but
        one odd request must not fail the whole batch.
        """
        if self.max_batch_size <= 0:
            return [[item] for item in prepared]
        groups: dict[tuple[Any, ...], list[_Prepared]] = {}
        for item in prepared:
            key = tuple((name, a.shape[1:], a.dtype.str) for name, a in item.inputs.items())
            groups.setdefault(key, []).append(item)
        return list(groups.values())

    def _run_group(self, group: list[_Prepared]) -> list[Any]:
        names = sorted({name for item in group for name in item.wanted})
        if len(group) == 1:
            values = self.session.run(names, group[0].inputs)
            outputs = [dict(zip(names, values, strict=True))]
        else:
            feeds = {
                name: np.concatenate([item.inputs[name] for item in group], axis=0)
                for name in group[0].inputs
            }
            merged = dict(zip(names, self.session.run(names, feeds), strict=True))
            sizes = [len(next(iter(item.inputs.values()))) for item in group]
            outputs = self._split(merged, sizes)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, self._cast(name, result[name])) for name in item.wanted]
            )
            for item, result in zip(group, outputs, strict=True)
        ]

    def _requested(self, request: Any) -> list[str]:
        # Triton fills in every config output when a client asks for none; keep a fallback.
        return list(request.requested_output_names()) or list(self.output_dtypes)

    @staticmethod
    def _split(merged: dict[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
        bounds = np.cumsum(sizes)[:-1]
        total = sum(sizes)
        parts: list[dict[str, Any]] = [{} for _ in sizes]
        for name, value in merged.items():
            array = np.asarray(value)
            if array.ndim == 0 or array.shape[0] != total:
                raise ValueError(
                    f"output '{name}' has shape {array.shape}; expected a batch of {total} first"
                )
            for part, piece in zip(parts, np.split(array, bounds), strict=True):
                part[name] = piece
        return parts

    def _cast(self, name: str, value: Any) -> np.ndarray:
        dtype = self.output_dtypes.get(name)
        array = np.asarray(value)
        return array if dtype is None else array.astype(dtype, copy=False)

    def finalize(self) -> None:
        del self.session  # frees the session's memory before the stub exits
