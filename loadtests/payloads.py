"""Triton request tensors from the model's input example (gateway rows: loadtests/entities.py).

Triton inputs come from the exported repository: the version's ``metadata.json`` gives each
input's name, dtype and shape (one FP32 matrix, or one typed input per column: FP32, INT64,
BOOL, or BYTES for a string column), and ``<model>/warmup/<input>`` holds the input example's
first row (what ``builder export`` writes for warm-up: raw bytes, or Triton's serialized BYTES
format for a string input). Each request jitters the float values a little, so a response cache
or a branch predictor cannot serve the same row forever. Without a local repository the
signature comes from the server's model metadata and rows are drawn from a seeded normal
(strings: from a small fixed vocabulary, ``DEFAULT_VOCABULARY``, which the gateway rows' string
fields share).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# KServe v2 datatypes <-> numpy (the subset exported models use)
V2_TO_NUMPY = {
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
    # strings travel as numpy object arrays of str (JSON strings over HTTP, length-prefixed
    # bytes over gRPC)
    "BYTES": np.object_,
}
NUMPY_TO_V2 = {np.dtype(v).name: k for k, v in V2_TO_NUMPY.items()}
# The names metadata.json may give a string column (the served dtype is "string").
STRING_DTYPES = frozenset({"string", "str", "bytes", "object"})
# Values for a string input with no example: the demo model's channels and some of its merchant
# categories. A model that never saw them reads them as unknown (a OneHotEncoder with
# handle_unknown="ignore" encodes all zeros), so any string model accepts them.
DEFAULT_VOCABULARY = ("web", "app", "pos", "grocery", "electronics", "travel")


@dataclass(frozen=True)
class TensorSpec:
    """One model input: name, v2 datatype, per-row shape, and the example row if known."""

    name: str
    datatype: str
    row_shape: tuple[int, ...]
    example: np.ndarray | None = None

    @property
    def dtype(self) -> np.dtype[Any]:
        if self.datatype not in V2_TO_NUMPY:
            raise ValueError(
                f"input {self.name!r}: datatype {self.datatype} is not supported by the load test"
            )
        return np.dtype(V2_TO_NUMPY[self.datatype])


class ModelInputs:
    """Draws batches of model inputs for Triton."""

    def __init__(
        self,
        tensors: list[TensorSpec],
        seed: int | str = 0,
        vocabulary: Sequence[str] = DEFAULT_VOCABULARY,
    ) -> None:
        if not tensors:
            raise ValueError("the model declares no inputs")
        if not vocabulary:
            raise ValueError("the string vocabulary is empty")
        self.tensors = tensors
        self.vocabulary = list(vocabulary)
        # hashlib, not hash(): str hashes change per process, and rows should not
        self._rng = np.random.default_rng(int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:8]))

    def batch(self, rows: int) -> dict[str, np.ndarray]:
        """``{input name: array [rows, *row_shape]}``; string inputs are object arrays of str."""
        return {t.name: self._column(t, (rows, *t.row_shape)) for t in self.tensors}

    def _column(self, t: TensorSpec, shape: tuple[int, ...]) -> np.ndarray:
        kind = t.dtype.kind
        if t.example is not None:
            if kind == "O":
                # a string cannot be jittered; the numeric columns beside it still vary per row
                return np.array(np.broadcast_to(t.example.reshape(t.row_shape), shape), dtype=object)
            base = np.broadcast_to(t.example.reshape(t.row_shape), shape).astype(np.float64)
            if kind == "f":
                # ±1 % jitter (plus a little absolute noise for zeros): the same distribution, not
                # the same bytes every time
                base = base * (1 + 0.01 * self._rng.standard_normal(shape))
                base = base + 0.001 * self._rng.standard_normal(shape)
            return base.astype(t.dtype)
        if kind == "O":
            return np.array(self._rng.choice(self.vocabulary, size=shape).tolist(), dtype=object)
        if kind == "f":
            return self._rng.standard_normal(shape).astype(t.dtype)
        if kind == "b":
            return self._rng.integers(0, 2, shape).astype(t.dtype)
        return self._rng.integers(0, 10, shape).astype(t.dtype)

    def v2_json(self, rows: int) -> dict[str, Any]:
        """A KServe v2 ``/infer`` request body with ``rows`` rows (BYTES data as JSON strings)."""
        return {
            "inputs": [
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": _v2_type(array),
                    "data": array.ravel().tolist(),
                }
                for name, array in self.batch(rows).items()
            ]
        }

    @classmethod
    def from_repo(cls, repo: Path, model: str, version: str = "", seed: int | str = 0) -> ModelInputs | None:
        """From an exported repository; None when it does not hold the model."""
        model_dir = repo / model
        versions = sorted(int(p.name) for p in model_dir.glob("*") if p.is_dir() and p.name.isdigit())
        if not versions:
            return None
        chosen = version or str(versions[-1])
        meta_path = model_dir / chosen / "metadata.json"
        if not meta_path.is_file():
            return None
        metadata = json.loads(meta_path.read_text())
        tensors = []
        for spec in metadata.get("signature", {}).get("inputs", []):
            datatype = _v2_datatype(spec["name"], str(spec["dtype"]))
            row_shape = tuple(int(d) for d in spec["shape"][1:])
            example = _example(model_dir, spec["name"], datatype, row_shape)
            if example is None and datatype == "BYTES":
                example = _metadata_example(metadata, spec["name"], row_shape)
            tensors.append(TensorSpec(spec["name"], datatype, row_shape, example))
        return cls(tensors, seed)

    @classmethod
    def from_v2_metadata(cls, metadata: dict[str, Any], seed: int | str = 0) -> ModelInputs:
        """From a server's ``GET /v2/models/{model}`` answer (or tritonclient's ``as_json``)."""
        tensors = []
        for spec in metadata.get("inputs", []):
            shape = [int(d) for d in spec["shape"]]
            # a leading -1 is the batch axis; other -1s (variable length) get 1 element
            row_shape = tuple(max(d, 1) for d in (shape[1:] if shape and shape[0] == -1 else shape))
            tensors.append(TensorSpec(spec["name"], spec["datatype"], row_shape))
        return cls(tensors, seed)


def serialize_bytes(values: Iterable[str | bytes]) -> bytes:
    """Triton's BYTES tensor encoding (raw ``ModelInfer`` contents, warm-up files): per element a
    4-byte little-endian length, then the bytes (str as UTF-8), in row-major order."""
    parts = []
    for value in values:
        data = value.encode() if isinstance(value, str) else bytes(value)
        parts.append(struct.pack("<I", len(data)) + data)
    return b"".join(parts)


def parse_bytes(data: bytes) -> list[bytes]:
    """The elements of a BYTES tensor in Triton's encoding; ValueError if it is truncated."""
    out, offset = [], 0
    while offset < len(data):
        if offset + 4 > len(data):
            raise ValueError("BYTES tensor: truncated length prefix")
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if offset + length > len(data):
            raise ValueError("BYTES tensor: element longer than the data left")
        out.append(data[offset : offset + length])
        offset += length
    return out


def _v2_datatype(name: str, dtype: str) -> str:
    """metadata.json's dtype (numpy's names, ``string`` for a string column) as a v2 datatype."""
    if dtype in STRING_DTYPES:
        return "BYTES"
    try:
        datatype = NUMPY_TO_V2.get(np.dtype(dtype).name)
    except TypeError:
        datatype = None
    if datatype is None:
        raise ValueError(f"input {name!r}: dtype {dtype} is not supported")
    return datatype


def _example(model_dir: Path, name: str, datatype: str, row_shape: tuple[int, ...]) -> np.ndarray | None:
    """The warm-up row ``builder export`` wrote, if it is there and the size fits."""
    path = model_dir / "warmup" / name
    if not path.is_file():
        return None
    data: np.ndarray
    if datatype == "BYTES":
        try:
            elements = parse_bytes(path.read_bytes())
        except ValueError:
            return None
        # errors="replace": a value that is not UTF-8 still makes a valid (if odd) request
        data = np.array([e.decode("utf-8", errors="replace") for e in elements], dtype=object)
    else:
        data = np.frombuffer(path.read_bytes(), dtype=V2_TO_NUMPY[datatype]).copy()
    return data if data.size == int(np.prod(row_shape)) else None


def _metadata_example(metadata: dict[str, Any], name: str, row_shape: tuple[int, ...]) -> np.ndarray | None:
    """A string input's value in the first row of an input example recorded in metadata.json
    (``input_example``: MLflow's ``{"columns": [...], "data": [[...]]}`` or a list of records)."""
    example = metadata.get("input_example")
    value: Any = None
    if isinstance(example, dict) and name in example.get("columns", []) and example.get("data"):
        value = example["data"][0][example["columns"].index(name)]
    elif isinstance(example, list) and example and isinstance(example[0], dict):
        value = example[0].get(name)
    if not isinstance(value, str) or int(np.prod(row_shape)) != 1:
        return None
    return np.array([value], dtype=object)


def _v2_type(array: np.ndarray) -> str:
    return NUMPY_TO_V2[array.dtype.name]
