"""Parity rows: the run's input example plus rows generated from what the model learned.

Rows are built as the served tensors (the layout's names, dtypes and shapes), so parity checks
exactly what Triton will be sent. Strings are never random characters: they come from the input
example and the categories/vocabulary the model learned (``FlavorConverter.vocabulary``), plus
the empty string and a value the model never saw (the "unknown" path a OneHotEncoder with
``handle_unknown="ignore"`` takes in production).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.registry.signature import ModelInputs
from builder.tensors import TensorSpec, numpy_dtype

UNSEEN = "__never_seen_in_training__"


@dataclass(frozen=True)
class Feeds:
    arrays: dict[str, np.ndarray]
    source: str  # "input_example", "generated" or both joined by "+"

    @property
    def rows(self) -> int:
        return len(next(iter(self.arrays.values())))

    def head(self, n: int) -> dict[str, np.ndarray]:
        return {k: v[:n] for k, v in self.arrays.items()}


def example_tensors(example: Any, inputs: ModelInputs) -> dict[str, np.ndarray] | None:
    """MLflow's input example (a DataFrame, dict or array) as the served tensors, or None when
    it does not fit the signature (parity then uses generated rows only)."""
    if example is None:
        return None
    if inputs.tabular:
        import pandas as pd

        frame = example if isinstance(example, pd.DataFrame) else pd.DataFrame(example)
        if any(c.name not in frame.columns for c in inputs.columns):
            return None
        if inputs.layout == "matrix":
            (tensor,) = inputs.tensors
            return {tensor.name: frame[[c.name for c in inputs.columns]].to_numpy(dtype=np.float32)}
        return {c.name: _column(frame[c.name].to_numpy(), c.dtype) for c in inputs.columns}
    if isinstance(example, dict):
        arrays = {t.name: _cast(example[t.name], t) for t in inputs.tensors if t.name in example}
        return arrays if len(arrays) == len(inputs.tensors) else None
    if len(inputs.tensors) == 1:
        (tensor,) = inputs.tensors
        return {tensor.name: _cast(example, tensor)}
    return None


def _column(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "string":
        # A missing string in an example row is sent as "", as the gateway sends it.
        strings = ["" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in values]
        return np.array(strings, dtype=object).reshape(-1, 1)
    return np.asarray(values).astype(numpy_dtype(dtype)).reshape(-1, 1)


def _cast(values: Any, tensor: TensorSpec) -> np.ndarray:
    array = np.asarray(values)
    if tensor.dtype == "string":
        return np.vectorize(str, otypes=[object])(array)
    return array.astype(numpy_dtype(tensor.dtype))


def example_digest(example: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for key in sorted(example):
        array = example[key]
        if array.dtype == object:  # strings: their text, NUL-separated
            data = "\x00".join(map(str, array.ravel())).encode()
        else:
            data = np.ascontiguousarray(array).tobytes()
        h.update(key.encode() + data)
    return h.hexdigest()


def build_feeds(
    inputs: ModelInputs,
    example: dict[str, np.ndarray] | None,
    vocabulary: dict[str, tuple[Any, ...]],
    generated: int,
) -> Feeds:
    """The example rows, then ``generated`` rows (at least 8 without an example)."""
    rng = np.random.default_rng(0)
    parts: list[dict[str, np.ndarray]] = [example] if example is not None else []
    if generated > 0 or not parts:
        rows = max(generated, 8)
        parts.append(
            {t.name: _generate(t, rows, rng, example, vocabulary.get(t.name, ())) for t in inputs.tensors}
        )
    arrays = {t.name: np.concatenate([p[t.name] for p in parts]) for t in inputs.tensors}
    sources = (["input_example"] if example is not None else []) + (
        ["generated"] if len(parts) > (example is not None) else []
    )
    return Feeds(arrays, "+".join(sources))


def _generate(
    tensor: TensorSpec,
    rows: int,
    rng: np.random.Generator,
    example: dict[str, np.ndarray] | None,
    learned: tuple[Any, ...],
) -> np.ndarray:
    seen = example.get(tensor.name) if example is not None else None
    if tensor.dtype == "string":
        known = [*learned, *(seen.ravel().tolist() if seen is not None else [])]
        # Every generated batch also carries the empty string and an unseen value.
        words = tuple(dict.fromkeys([*known, "", UNSEEN]))
        out = tensor.sample(rows, rng, words)
        out.reshape(-1)[:2] = ["", UNSEEN]
        return out
    if learned and tensor.dtype.startswith("int"):
        return tensor.sample(rows, rng, tuple(learned))
    if seen is not None and seen.size and tensor.dtype.startswith(("int", "uint")):
        # Integers are often indices (an embedding's, a category code): stay in the seen range.
        low, high = int(seen.min()), int(seen.max())
        return rng.integers(low, high + 1, size=tensor.sample(rows, rng).shape).astype(tensor.dtype)
    out = tensor.sample(rows, rng)
    if seen is not None and out.dtype.kind == "f" and np.isnan(seen).any():
        # The example has missing values, so the model takes them: test that path too.
        out[rng.random(out.shape) < 0.15] = np.nan
    return out
