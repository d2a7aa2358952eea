"""Request bodies: gateway rows from entity ids, Triton tensors from the model's input example.

Gateway rows follow the feature repo's generator: users ``1..500``, merchants ``1..100`` (both
configurable), an amount and an hour of day as the request-time fields. Triton inputs come from
the exported repository: the version's ``metadata.json`` gives each input's name, dtype and
shape, and ``<model>/warmup/<input>`` holds the raw bytes of the input example's first row (what
``builder export`` writes for warm-up). Each request jitters that row a little, so a response
cache or a branch predictor cannot serve the same row forever. Without a local repository the
signature comes from the server's model metadata and rows are drawn from a seeded normal.
"""

from __future__ import annotations

import hashlib
import json
import random
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
}
NUMPY_TO_V2 = {np.dtype(v).name: k for k, v in V2_TO_NUMPY.items()}


def parse_id_range(text: str) -> tuple[int, int]:
    """``"1-500"`` -> (1, 500); a single number is a range of one."""
    low, sep, high = text.strip().partition("-")
    try:
        first = int(low)
        last = int(high) if sep else first
    except ValueError as exc:
        raise ValueError(f"bad id range {text!r}: write FIRST-LAST, e.g. 1-500") from exc
    if first < 0 or last < first:
        raise ValueError(f"bad id range {text!r}: need 0 <= FIRST <= LAST")
    return first, last


class EntityRows:
    """Gateway rows: random entity ids from the ranges plus request-time fields."""

    def __init__(self, user_ids: str, merchant_ids: str, seed: int | str = 0) -> None:
        self.users = parse_id_range(user_ids)
        self.merchants = parse_id_range(merchant_ids)
        self._rng = random.Random(seed)

    def row(self) -> dict[str, Any]:
        rng = self._rng
        return {
            "user_id": rng.randint(*self.users),
            "merchant_id": rng.randint(*self.merchants),
            # the generator's amounts are lognormal around e^3.5 ≈ 33
            "amount": round(rng.lognormvariate(3.5, 0.6), 2),
            "hour": rng.randint(0, 23),
        }

    def body(self, rows: int) -> dict[str, Any]:
        return {"rows": [self.row() for _ in range(rows)]}


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

    def __init__(self, tensors: list[TensorSpec], seed: int | str = 0) -> None:
        if not tensors:
            raise ValueError("the model declares no inputs")
        self.tensors = tensors
        # hashlib, not hash(): str hashes change per process, and rows should not
        self._rng = np.random.default_rng(int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:8]))

    def batch(self, rows: int) -> dict[str, np.ndarray]:
        """``{input name: array [rows, *row_shape]}``."""
        out = {}
        for t in self.tensors:
            shape = (rows, *t.row_shape)
            if t.example is not None:
                base = np.broadcast_to(t.example.reshape(t.row_shape), shape).astype(np.float64)
                if t.dtype.kind == "f":
                    # ±1 % jitter (plus a little absolute noise for zeros): the same distribution, not
                    # the same bytes every time
                    base = base * (1 + 0.01 * self._rng.standard_normal(shape))
                    base = base + 0.001 * self._rng.standard_normal(shape)
                out[t.name] = base.astype(t.dtype)
            elif t.dtype.kind == "f":
                out[t.name] = self._rng.standard_normal(shape).astype(t.dtype)
            elif t.dtype.kind == "b":
                out[t.name] = self._rng.integers(0, 2, shape).astype(t.dtype)
            else:
                out[t.name] = self._rng.integers(0, 10, shape).astype(t.dtype)
        return out

    def v2_json(self, rows: int) -> dict[str, Any]:
        """A KServe v2 ``/infer`` request body with ``rows`` rows."""
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
        signature = json.loads(meta_path.read_text()).get("signature", {})
        tensors = []
        for spec in signature.get("inputs", []):
            datatype = NUMPY_TO_V2.get(np.dtype(spec["dtype"]).name)
            if datatype is None:
                raise ValueError(f"input {spec['name']!r}: dtype {spec['dtype']} is not supported")
            row_shape = tuple(int(d) for d in spec["shape"][1:])
            tensors.append(
                TensorSpec(
                    spec["name"], datatype, row_shape, _example(model_dir, spec["name"], datatype, row_shape)
                )
            )
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


def _example(model_dir: Path, name: str, datatype: str, row_shape: tuple[int, ...]) -> np.ndarray | None:
    """The warm-up row ``builder export`` wrote, if it is there and the size fits."""
    path = model_dir / "warmup" / name
    if not path.is_file():
        return None
    data: np.ndarray = np.frombuffer(path.read_bytes(), dtype=V2_TO_NUMPY[datatype])
    return data.copy() if data.size == int(np.prod(row_shape)) else None


def _v2_type(array: np.ndarray) -> str:
    return NUMPY_TO_V2[array.dtype.name]
