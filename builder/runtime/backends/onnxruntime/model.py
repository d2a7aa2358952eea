"""A Python-based Triton backend named ``onnxruntime``: serves ``<version>/model.onnx``.

The embedded runtime has no native onnxruntime backend, so this file stands in for it: a
model whose config says ``backend: "onnxruntime"`` loads here on the embedded server and on
the NGC image's native C++ backend with the same config. It runs inside the model-execution
env (numpy 1.26 + onnxruntime), never the project env, so it imports nothing from ``builder``.

Why batches are concatenated: Triton's dynamic batcher hands ``execute`` several requests at
once; running them as one ``session.run`` is what turns queueing into throughput.

Why it is written the way it is: every request already pays the Python backend's own cost (gRPC,
IPC to this stub process, the stub's tensor handling: 0.4-0.6 ms of server CPU per one-row request
on a 2-core machine for a model that returns its inputs), and ``session.run`` on one row of the
demo model costs 13 µs back to back but ~80 µs in the stub as served (caches cold between calls).
So the shim does as little Python per request as it can on top: one pass over the request's
inputs, strings decoded in numpy's C loop (no Python frame per element), a lone request run as it
is (no grouping, concatenation or splitting), outputs passed on as onnxruntime returned them (the
graph's types are checked against the config at load, so nothing is cast or copied), and what
depends only on the config worked out once in ``initialize``. ``benchmarks/shim_bench.py``
measures it against that floor.
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

        options = ort.SessionOptions()
        options.intra_op_num_threads = _int_parameter(config, "intra_op_thread_count", 1)
        options.inter_op_num_threads = _int_parameter(config, "inter_op_thread_count", 1)
        # `optimization { execution_accelerators { gpu_... } }` is left unread on purpose:
        # it names TensorRT/CUDA, which only the GPU image has; CPU is always correct.
        self.session = ort.InferenceSession(
            _model_path(args, config), sess_options=options, providers=["CPUExecutionProvider"]
        )
        graph_inputs = {i.name: i.type for i in self.session.get_inputs()}
        graph_outputs = {o.name: o.type for o in self.session.get_outputs()}
        _check_types("input", config.get("input", []), graph_inputs)
        _check_types("output", config.get("output", []), graph_outputs)

        self.string_inputs = frozenset(n for n, t in graph_inputs.items() if t == "tensor(string)")
        # Config order: what a request asking for every output gets, and what session.run is asked.
        self.output_names = [out["name"] for out in config.get("output", [])]
        self.all_outputs = frozenset(self.output_names)
        # Outputs are cast to the config's declared type (the config is the client contract), but
        # _check_types has already refused every mismatch it can name, so a cast is left only for
        # a graph type it cannot (none of the exported models have one): no copy on the hot path.
        self.casts = {
            out["name"]: pb_utils.triton_string_to_numpy(out["data_type"])
            for out in config.get("output", [])
            if graph_outputs.get(out["name"]) not in _ORT_TO_TRITON
        }

    def execute(self, requests: list[Any]) -> list[Any]:
        """Answer every request, in order; a failing request gets an error response, not a crash."""
        if len(requests) == 1:  # one client, or no batching: the common case, kept short
            try:
                item = _Prepared(0, self._inputs(requests[0]), self._requested(requests[0]))
                return self._run_group([item])
            except Exception as exc:  # any failure belongs to this request, not the server
                return [_error_response(exc)]
        responses: list[Any] = [None] * len(requests)
        prepared: list[_Prepared] = []
        for index, request in enumerate(requests):
            try:
                prepared.append(_Prepared(index, self._inputs(request), self._requested(request)))
            except Exception as exc:
                responses[index] = _error_response(exc)
        for group in self._groups(prepared):
            for item, response in zip(group, self._answer(group), strict=True):
                responses[item.index] = response
        return responses

    def _inputs(self, request: Any) -> dict[str, np.ndarray]:
        """The request's inputs by name, in one pass (Triton has checked names, types, shapes).

        An optional input left out is simply absent; onnxruntime says so if it was needed.
        """
        arrays = {}
        for tensor in request.inputs():
            name = tensor.name()
            array = tensor.as_numpy()
            if name in self.string_inputs:
                array = _decode(array)
            arrays[name] = array
        return arrays

    def _requested(self, request: Any) -> list[str]:
        # Triton fills in every config output when a client asks for none; keep a fallback.
        return request.requested_output_names() or self.output_names

    def _groups(self, prepared: list[_Prepared]) -> list[list[_Prepared]]:
        """Requests that can share one session.run.

        Without batching every request runs alone. With batching, requests are grouped by the
        inputs they carry and those inputs' non-batch shapes: the batcher normally only combines
        equal shapes, but one odd request must not fail the whole batch. (Types need no key:
        Triton has checked them against the config, and strings of any length concatenate.)
        """
        if self.max_batch_size <= 0:
            return [[item] for item in prepared]
        groups: dict[tuple[Any, ...], list[_Prepared]] = {}
        for item in prepared:
            key = tuple(sorted((name, a.shape[1:]) for name, a in item.inputs.items()))
            groups.setdefault(key, []).append(item)
        return list(groups.values())

    def _answer(self, group: list[_Prepared]) -> list[Any]:
        """The group's responses; if its batch fails, each request is run alone, so only the
        request that fails (bad values, an output that is not per-row) gets the error."""
        try:
            return self._run_group(group)
        except Exception as exc:  # any failure belongs to these requests, not the server
            if len(group) == 1:
                return [_error_response(exc)]
        return [self._answer([item])[0] for item in group]

    def _run_group(self, group: list[_Prepared]) -> list[Any]:
        wanted = {name for item in group for name in item.wanted}
        names = self.output_names if wanted == self.all_outputs else sorted(wanted)
        if len(group) == 1:
            outputs = [dict(zip(names, self.session.run(names, group[0].inputs), strict=True))]
        else:
            feeds = {
                name: np.concatenate([item.inputs[name] for item in group], axis=0)
                for name in group[0].inputs
            }
            merged = dict(zip(names, self.session.run(names, feeds), strict=True))
            outputs = self._split(merged, [len(next(iter(item.inputs.values()))) for item in group])
        casts = self.casts
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(name, _cast(result[name], casts.get(name))) for name in item.wanted
                ]
            )
            for item, result in zip(group, outputs, strict=True)
        ]

    @staticmethod
    def _split(merged: dict[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
        """Each request's rows of every output: views (slices of axis 0), not copies."""
        total = sum(sizes)
        bounds = []
        start = 0
        for size in sizes:
            bounds.append((start, start + size))
            start += size
        parts: list[dict[str, Any]] = [{} for _ in sizes]
        for name, value in merged.items():
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
            if array.ndim == 0 or array.shape[0] != total:
                raise ValueError(
                    f"output '{name}' has shape {array.shape}; expected a batch of {total} first"
                )
            for part, (begin, end) in zip(parts, bounds, strict=True):
                part[name] = array[begin:end]
        return parts

    def finalize(self) -> None:
        del self.session  # frees the session's memory before the stub exits


# The stub hands BYTES as an object array of Python bytes. onnxruntime wants str (objects or a
# 'U' array): it str()s a bytes object into "b'...'", and a fixed-width bytes ('S') array loses
# or garbles any value that fills its width with non-ASCII UTF-8. A ufunc over the C function
# bytes.decode (UTF-8) makes the str objects in numpy's C loop, no Python frame per element:
# 0.35 µs for one value, 5 µs for 64, where np.vectorize(lambda) took 3.6 and 12, and
# np.char.decode to 'U' 2.2 and 36. Bytes that are not UTF-8 fail the request that sent them.
_DECODE_UTF8 = np.frompyfunc(bytes.decode, 1, 1)


def _decode(array: np.ndarray) -> np.ndarray:
    decoded = _DECODE_UTF8(array)
    # A 0-d array comes back as a bare str; onnxruntime needs an array.
    return decoded if isinstance(decoded, np.ndarray) else np.asarray(decoded, dtype=object)


def _cast(value: Any, dtype: Any) -> np.ndarray:
    """``value`` as a numpy array of ``dtype`` (None: as it is), copying only when it must."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    return array if dtype is None or array.dtype == dtype else array.astype(dtype)
