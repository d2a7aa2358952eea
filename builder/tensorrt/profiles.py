"""The optimization profile of a plan, derived from the serving options.

A TensorRT engine with a variable batch dimension serves only the shapes its optimization
profile covers, and runs fastest at the profile's ``opt`` shape. Triton's dynamic batcher forms
batches of up to ``max_batch_size`` rows and prefers its ``preferred_batch_size`` values, so the
two are derived together here: ``min`` 1 (a single request must run), ``max`` =
``--max-batch-size`` (the largest batch Triton forms), ``opt`` = ``--opt-batch-size``, else the
largest preferred batch size, else half the maximum (a loaded server's typical batch); and the
batcher prefers ``opt`` and ``max``, the shapes TensorRT tuned kernels for.

Only the batch axis varies: any other variable dimension has no value to tune for, and is
refused with a reason rather than guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from builder.errors import ConversionError, UsageError
from builder.tensors import TensorSpec


@dataclass(frozen=True)
class BatchProfile:
    """min/opt/max of the batch axis, shared by every input of the one profile."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise UsageError(
                f"batch profile min {self.min} / opt {self.opt} / max {self.max}: need 1 <= min <= opt <= max"
            )

    def to_dict(self) -> dict[str, int]:
        return {"min": self.min, "opt": self.opt, "max": self.max}


@dataclass(frozen=True)
class InputShapes:
    """The full min/opt/max shapes of one input (batch axis included)."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def to_dict(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def batch_profile(
    max_batch_size: int, preferred_batch_sizes: Sequence[int] = (), opt_batch_size: int | None = None
) -> BatchProfile | None:
    """The batch profile, or None for a model that does not batch (``--max-batch-size 0``)."""
    if max_batch_size == 0:
        if opt_batch_size is not None:
            raise UsageError(
                "--opt-batch-size needs batching",
                hint="pass --max-batch-size N (N >= 1), or leave --opt-batch-size out",
            )
        return None
    if opt_batch_size is not None:
        if not 1 <= opt_batch_size <= max_batch_size:
            raise UsageError(
                f"--opt-batch-size {opt_batch_size} is outside 1..--max-batch-size ({max_batch_size})",
                hint="the profile's opt shape must lie within the batches Triton forms",
            )
        opt = opt_batch_size
    elif preferred_batch_sizes:
        opt = max(preferred_batch_sizes)
    else:
        opt = max(1, max_batch_size // 2)
    return BatchProfile(min=1, opt=opt, max=max_batch_size)


def aligned_preferred_sizes(
    profile: BatchProfile | None, preferred_batch_sizes: Sequence[int]
) -> tuple[int, ...]:
    """The dynamic batcher's preferred sizes: the user's, plus the profile's opt and max."""
    if profile is None:
        return ()
    return tuple(sorted({*preferred_batch_sizes, profile.opt, profile.max}))


def input_shapes(profile: BatchProfile | None, inputs: Sequence[TensorSpec]) -> tuple[InputShapes, ...]:
    """Per-input profile shapes; refuses shapes a batch-only profile cannot cover."""
    shapes = []
    for tensor in inputs:
        variable = [i for i, d in enumerate(tensor.shape) if d < 0]
        if profile is None:
            if variable:
                raise UsageError(
                    f"input {tensor.name!r} has shape {list(tensor.shape)}: a TensorRT plan that does not "
                    "batch (--max-batch-size 0) needs fixed shapes",
                    hint="pass --max-batch-size N (N >= 1) to build a profile over the batch axis",
                )
            fixed = tuple(tensor.shape)
            shapes.append(InputShapes(tensor.name, fixed, fixed, fixed))
            continue
        if not tensor.batched:
            raise UsageError(
                f"input {tensor.name!r} has shape {list(tensor.shape)}, with no variable batch axis",
                hint="export with --max-batch-size 0",
            )
        if any(i > 0 for i in variable):
            raise ConversionError(
                f"input {tensor.name!r} has shape {list(tensor.shape)}: besides the batch axis, "
                "variable dimensions have no size to build the TensorRT profile for",
                hint="export the model with fixed non-batch dimensions, or use --format onnx",
            )
        rest = tuple(tensor.shape[1:])
        shapes.append(
            InputShapes(
                tensor.name,
                (profile.min, *rest),
                (profile.opt, *rest),
                (profile.max, *rest),
            )
        )
    return tuple(shapes)
