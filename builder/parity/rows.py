"""Parity rows: the run's input example plus rows generated from what the model learned.

Rows are built as the served tensors (the layout's names, dtypes and shapes), so parity checks
exactly what Triton will be sent. Strings are never random characters: they come from the input
example and the categories/vocabulary the model learned (``FlavorConverter.vocabulary``), plus
the empty string and a value the model never saw (the "unknown" path a OneHotEncoder with
``handle_unknown="ignore"`` takes in production), except on an input the model refuses unseen
values on (``known_only``: an encoder with ``handle_unknown="error"``, which raises on them):
its rows keep to the learned values and the example's.

Numbers follow one rule, column by column (a 2-D tensor's columns, e.g. the matrix layout's
DataFrame columns; any other tensor as a whole), so that generated rows look like the training
data (``_draw``):

1. a column the model knows categories for (``vocabulary``: a LightGBM categorical feature, a
   scikit-learn encoder's integer categories, a PyTorch module's or Keras model's ids below
   its smallest embedding's rows) draws from those categories;
2. a column whose example values are all integers (an int dtype, or floats like ``3.0``) draws
   integers within the example's [min, max];
3. any other float column draws uniformly within the example's [min, max] (a constant column:
   half its magnitude either side, never below 0 when the example is non-negative);
4. a column with NaN in the example gets NaN in 15 % of its generated rows;
5. without an example, ints are drawn from 0..9 and floats from a standard normal.
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
    example_rows: int = 0  # the first rows are the input example's, the rest generated

    @property
    def rows(self) -> int:
        return len(next(iter(self.arrays.values())))

    def generated(self) -> dict[str, np.ndarray]:
        """The rows the builder drew itself (none when parity runs on the example alone)."""
        return {k: v[self.example_rows :] for k, v in self.arrays.items()}

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
    known_only: frozenset[str] = frozenset(),
) -> Feeds:
    """The example rows, then ``generated`` rows (at least 8 without an example).

    ``vocabulary`` is keyed by input name, or by column name for the matrix layout's columns;
    ``known_only`` names the inputs (or matrix columns) that take learned values only."""
    rng = np.random.default_rng(0)
    parts: list[dict[str, np.ndarray]] = [example] if example is not None else []
    if generated > 0 or not parts:
        rows = max(generated, 8)
        columns = tuple(c.name for c in inputs.columns) if inputs.layout == "matrix" else ()
        parts.append(
            {
                t.name: _generate(t, rows, rng, example, vocabulary, columns, known_only)
                for t in inputs.tensors
            }
        )
    arrays = {t.name: np.concatenate([p[t.name] for p in parts]) for t in inputs.tensors}
    sources = (["input_example"] if example is not None else []) + (
        ["generated"] if len(parts) > (example is not None) else []
    )
    example_rows = len(next(iter(example.values()))) if example is not None else 0
    return Feeds(arrays, "+".join(sources), example_rows)


def _generate(
    tensor: TensorSpec,
    rows: int,
    rng: np.random.Generator,
    example: dict[str, np.ndarray] | None,
    vocabulary: dict[str, tuple[Any, ...]],
    columns: tuple[str, ...] = (),
    known_only: frozenset[str] = frozenset(),
) -> np.ndarray:
    """Generated rows of one tensor. ``vocabulary`` holds learned values by input name, and by
    column name for a 2-D tensor's columns (``columns``: the matrix layout's DataFrame columns)."""
    learned = vocabulary.get(tensor.name, ())
    seen = example.get(tensor.name) if example is not None else None
    if tensor.dtype == "string":
        known = [*learned, *(seen.ravel().tolist() if seen is not None else [])]
        if tensor.name in known_only and known:
            # The model raises on a value it never saw: no empty string, no unseen value.
            return tensor.sample(rows, rng, tuple(dict.fromkeys(known)))
        # Every generated batch also carries the empty string and an unseen value.
        words = tuple(dict.fromkeys([*known, "", UNSEEN]))
        out = tensor.sample(rows, rng, words)
        out.reshape(-1)[:2] = ["", UNSEEN]
        return out
    if tensor.dtype == "bool":
        return tensor.sample(rows, rng)
    shape = tensor.sample(rows, rng).shape
    if len(shape) != 2:  # images, sequences: the rule over the tensor as a whole
        flat = seen.reshape(-1) if seen is not None else None
        return _draw(shape, tensor.dtype, rng, flat, learned)
    out = np.empty(shape, dtype=numpy_dtype(tensor.dtype))
    per_column = seen is not None and seen.ndim == 2 and seen.shape[1] == shape[1]
    for j in range(shape[1]):
        name = columns[j] if j < len(columns) else None
        column_learned = vocabulary.get(name, ()) if name is not None else ()
        if not column_learned and (shape[1] == 1 or not columns):
            # A tensor's learned values hold for each of its unnamed columns (a PyTorch
            # embedding's ids, for every position of a [N, T] token tensor).
            column_learned = learned
        column_seen = seen[:, j] if per_column and seen is not None else None
        if seen is not None and not per_column:
            column_seen = seen.reshape(-1)
        closed = tensor.name in known_only or (name is not None and name in known_only)
        if closed and not column_learned and column_seen is not None:
            # Learned values unknown: the example's own values are ones the model accepts.
            column_learned = tuple(np.unique(column_seen[column_seen == column_seen]).tolist())
        out[:, j] = _draw((shape[0],), tensor.dtype, rng, column_seen, column_learned)
    return out


def _draw(
    shape: tuple[int, ...],
    dtype: str,
    rng: np.random.Generator,
    seen: np.ndarray | None,
    learned: tuple[Any, ...],
) -> np.ndarray:
    """Values of one column (or tensor) by the module's rule: learned categories, else the
    example's integers or range, else what the dtype allows."""
    target = numpy_dtype(dtype)
    is_int = dtype.startswith(("int", "uint"))
    numbers = [v for v in learned if isinstance(v, int | float | np.integer | np.floating) and v == v]
    if numbers:
        return rng.choice(np.asarray(numbers), size=shape).astype(target)
    values = np.asarray(seen, dtype=np.float64).reshape(-1) if seen is not None else np.empty(0)
    finite = values[np.isfinite(values)]
    if not finite.size:
        out = rng.integers(0, 10, size=shape) if is_int else rng.normal(size=shape)
    else:
        low, high = float(finite.min()), float(finite.max())
        if is_int or bool(np.all(finite == np.round(finite))):
            out = rng.integers(int(low), int(high) + 1, size=shape)
        else:
            if high == low:  # one value seen: half its magnitude either side
                spread = max(abs(low), 1.0) / 2
                low, high = (max(low - spread, 0.0) if low >= 0 else low - spread), high + spread
            out = rng.uniform(low, high, size=shape)
    out = out.astype(target)
    if out.dtype.kind == "f" and values.size and np.isnan(values).any():
        # The example has missing values, so the model takes them: test that path too.
        out[rng.random(out.shape) < 0.15] = np.nan
    return out
