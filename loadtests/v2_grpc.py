"""KServe v2 ``ModelInfer`` requests from a batch of model inputs (no Locust, no channel here).

Tensor contents go in ``raw_input_contents``, as tritonclient sends them: numeric tensors as
their native little-endian bytes, BYTES tensors (string columns) in Triton's length-prefixed
encoding, each element its UTF-8 bytes.
"""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import service_pb2

from loadtests.payloads import NUMPY_TO_V2, serialize_bytes


def tensor_contents(array: np.ndarray) -> bytes:
    """The raw bytes Triton reads for one input tensor."""
    if array.dtype == np.object_:
        return serialize_bytes(array.ravel().tolist())
    return np.ascontiguousarray(array).tobytes()


def infer_request(model: str, version: str, batch: dict[str, np.ndarray]) -> service_pb2.ModelInferRequest:
    """One ``ModelInferRequest`` carrying every input of ``batch`` (name -> array [rows, ...])."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, array in batch.items():
        tensor = request.inputs.add()
        tensor.name = name
        tensor.datatype = NUMPY_TO_V2[array.dtype.name]
        tensor.shape.extend(array.shape)
        request.raw_input_contents.append(tensor_contents(array))
    return request
