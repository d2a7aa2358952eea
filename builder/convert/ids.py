"""Integer inputs that are ids into an embedding table (PyTorch's ``nn.Embedding``, Keras'
``Embedding`` layer): parity rows drawn within the smallest table, and the refusal, blaming the
builder's own rows, when the native model still refuses them.

Without an input example (MLflow's PyTorch ``pt2`` format saves none), generated ids would be
drawn from 0..9 and land past a smaller table, where the native model and ONNX Runtime both
refuse them; the tables' sizes are in the model. Rows the model still refuses are reported as
the builder's, before any converter runs on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.errors import ConversionError, first_line
from builder.parity.rows import Feeds
from builder.registry.signature import ModelInputs
from builder.tensors import TensorSpec

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class EmbeddingTables:
    """How a flavor's refusal names its embedding tables and asks for an input example."""

    layer: str  # "nn.Embedding", "Embedding layer"
    example_hint: str  # how to log the model with an input example


def is_integer(tensor: TensorSpec) -> bool:
    return tensor.dtype.startswith(("int", "uint"))


def ids_below(bound: int | None) -> tuple[int, ...]:
    """Ids a table of ``bound`` rows takes (none known: the tensors' own 0..9)."""
    return tuple(range(bound)) if bound is not None else ()


def id_vocabulary(bound: int | None, inputs: ModelInputs) -> dict[str, tuple[Any, ...]]:
    """Every integer input draws its parity rows from ``0 .. bound-1``, ``bound`` the smallest
    table's rows: an id every one of the model's embeddings accepts. Nothing without a table
    (its integer inputs then follow the example, or 0..9)."""
    if bound is None:
        return {}
    return {t.name: ids_below(bound) for t in inputs.tensors if is_integer(t)}


def check_generated_ids(
    predict: Callable[[dict[str, np.ndarray]], object],
    feeds: Feeds,
    inputs: ModelInputs,
    bound: int | None,
    tables: EmbeddingTables,
) -> None:
    """Run the native model (``predict``) on the generated rows when it takes integers: a
    refusal there (an id past a table the builder could not see) is the builder's rows' fault,
    said so before ONNX Runtime or the converter see those rows and seem to fail."""
    integers = [t for t in inputs.tensors if is_integer(t)]
    generated = feeds.generated()
    if not integers or not len(next(iter(generated.values()))):
        return
    try:
        predict(generated)
    except Exception as exc:  # IndexError, InvalidArgumentError: whatever the model raises
        drawn = ", ".join(
            f"{t.name!r} {int(generated[t.name].min())}..{int(generated[t.name].max())}" for t in integers
        )
        if bound is not None:
            why = f"below its smallest embedding's {bound} rows"
        elif feeds.example_rows:
            why = f"within the input example's range; the model has no {tables.layer} that says more"
        else:
            why = (
                f"without an input example, and with no {tables.layer} in the model, the builder "
                "cannot know which integers it accepts"
            )
        hint = tables.example_hint
        if feeds.example_rows:
            hint = "check parity on the input example alone (--parity-rows 0), or " + hint
        which = "integer input" if len(integers) == 1 else "integer inputs"
        raise ConversionError(
            f"the builder's generated parity rows are outside what the model accepts ({which} "
            f"{drawn}: {why}); the native model raised {type(exc).__name__}: {_reason(exc)}",
            hint=hint,
        ) from exc


def _reason(exc: BaseException) -> str:
    """The line of the native model's error that says why: TensorFlow's op errors open with a
    line naming the layer (``Exception encountered when calling Embedding.call().``) and give
    the out-of-range index on a later one."""
    text = ANSI.sub("", str(exc))  # Keras bolds the op's message for a terminal
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = next((line for line in lines if "indices" in line or "out of" in line), None)
    return first_line(Exception(said or text), 200) if lines else type(exc).__name__
