"""The explainer model Triton serves beside an exported model (``<model>_explain``,
docs/explain.md): the same inputs, and per row the exact SHAP values per original column
(``contributions``, rows x columns x outputs) and the base value (``base_value``, rows x
outputs), in the model's raw units.

It runs in the Python backend's own environment (numpy 1.26, onnxruntime), so it imports
nothing from the project: ``kernel.py`` beside it (a copy of builder/explain/kernel.py) does
the arithmetic over ``explainer.npz``, and ``preprocess.onnx``, where the model is a Pipeline,
turns the inputs into the features the trees or coefficients read, exactly as the model's own
graph does. Requests of one batch are explained together (one pass over the leaves).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # kernel.py lies beside this file
    sys.path.insert(0, _HERE)

import kernel  # noqa: E402

_DECODE_UTF8 = np.frompyfunc(bytes.decode, 1, 1)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        with np.load(os.path.join(folder, "explainer.npz"), allow_pickle=False) as data:
            self.arrays = kernel.prepare({k: data[k] for k in data.files})
        self.input_names = [i["name"] for i in config.get("input", [])]
        self.string_inputs = frozenset(
            i["name"] for i in config.get("input", []) if i["data_type"] == "TYPE_STRING"
        )
        self.session = None
        path = os.path.join(folder, "preprocess.onnx")
        if os.path.exists(path):
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            self.session = ort.InferenceSession(
                path, sess_options=options, providers=["CPUExecutionProvider"]
            )
            self.feature_output = self.session.get_outputs()[0].name

    def _features(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The model's features: the preprocessing graph's output, or the inputs side by side."""
        if self.session is not None:
            return np.asarray(self.session.run([self.feature_output], inputs)[0], dtype=np.float64)
        parts = [
            np.asarray(inputs[n], dtype=np.float64).reshape(len(inputs[n]), -1) for n in self.input_names
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

    def _inputs(self, request: Any) -> dict[str, np.ndarray]:
        arrays = {}
        for name in self.input_names:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            array = tensor.as_numpy()
            if name in self.string_inputs:
                array = _DECODE_UTF8(array)
                array = array if isinstance(array, np.ndarray) else np.asarray(array, dtype=object)
            arrays[name] = array
        return arrays

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        batch: list[tuple[int, dict[str, np.ndarray]]] = []
        for index, request in enumerate(requests):
            try:
                batch.append((index, self._inputs(request)))
            except Exception as exc:  # this request's inputs, not the server
                responses[index] = _error(exc)
        if not batch:
            return responses
        try:
            answered = self._explain(batch)
        except Exception:  # one bad request must not fail the others: each runs alone
            answered = []
            for index, inputs in batch:
                try:
                    answered += self._explain([(index, inputs)])
                except Exception as exc:
                    answered.append((index, _error(exc)))
        for index, response in answered:
            responses[index] = response
        return responses

    def _explain(self, batch: list[tuple[int, dict[str, np.ndarray]]]) -> list[tuple[int, Any]]:
        if len(batch) == 1:
            features = self._features(batch[0][1])
        else:
            features = np.concatenate([self._features(inputs) for _, inputs in batch], axis=0)
        phi, base = kernel.explain(self.arrays, features)
        out, start = [], 0
        for index, inputs in batch:
            rows = len(next(iter(inputs.values())))
            response = pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("contributions", np.ascontiguousarray(phi[start : start + rows])),
                    pb_utils.Tensor("base_value", np.ascontiguousarray(base[start : start + rows])),
                ]
            )
            out.append((index, response))
            start += rows
        return out

    def finalize(self) -> None:
        self.session = None


def _error(exc: Exception) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"explainer: {type(exc).__name__}: {exc}"))
