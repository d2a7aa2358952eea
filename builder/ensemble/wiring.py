"""The ensemble's tensor mapping, built and checked at export: steps in order, each reading
and writing ensemble tensors by name, typed.

Steps name the *logical* tensors they read and write (``input``, ``score``, ...). A step may
rewrite a tensor an earlier step wrote (a pre step that clips ``input``, a post step that caps
``score``); Triton's ensembles need every tensor written once, so each write is a new version,
and the builder names them: an ensemble input or output, or a tensor written once, keeps its
own name; the versions in between become ``<tensor>__<step model>``. Every read is checked to
be fed (by an ensemble input or an earlier step's output) with the same dtype and compatible
dims; a refusal is one UsageError naming the step and the tensor, before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from builder.errors import UsageError
from builder.repository.triton_config import EnsembleStep
from builder.tensors import TensorSpec, triton_dtype

_HINT = "fix the step's step.json (docs/user-steps.md) or the tensor it maps"


@dataclass(frozen=True)
class Port:
    """A step model's tensor ``name`` and the ensemble tensor it reads or writes."""

    name: str
    tensor: str
    spec: TensorSpec  # dtype and full shape (batch axis -1 where the step batches)
    ensemble_input: bool = False  # declared a new ensemble input (pre steps only)


@dataclass(frozen=True)
class Node:
    """One step of the ensemble, in run order."""

    model_name: str
    label: str  # how messages name it: "pre step 'clip'", "the model 'x'"
    stage: str  # "pre" | "model" | "post": only pre steps and the model take ensemble inputs
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    user: bool = False  # a user step's unread output is a mistake; a generated one's, dropped
    version: int = -1


@dataclass
class _Version:
    tensor: str
    spec: TensorSpec
    producer: Node | None  # None: an ensemble input
    reads: int = 0
    name: str = ""


@dataclass(frozen=True)
class Wiring:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    steps: list[EnsembleStep] = field(default_factory=list)


def describe(spec: TensorSpec, batched: bool) -> str:
    """``TYPE_FP32 [1]``: a tensor as its config writes it (dims without the batch axis)."""
    dims = spec.shape[1:] if batched and spec.batched else spec.shape
    return f"{triton_dtype(spec.dtype)} {list(dims)}"


def dims_agree(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Same rank, and every size equal or variable (-1) on one side."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _fail(message: str) -> UsageError:
    return UsageError(message, hint=_HINT)


def wire(nodes: Sequence[Node], model_inputs: set[str], outputs: Sequence[str], *, batched: bool) -> Wiring:
    """Map ``nodes`` into one ensemble. ``model_inputs`` are the names a pre step or the model
    may read straight from the request; ``outputs`` the ensemble outputs the generated steps
    give, to which every new tensor a post step writes is added."""
    versions: list[_Version] = []
    current: dict[str, int] = {}
    inputs: dict[str, TensorSpec] = {}
    maps: list[tuple[Node, dict[str, int], dict[str, int]]] = []
    for node in nodes:
        reads: dict[str, int] = {}
        for port in node.inputs:
            reads[port.name] = _read(node, port, versions, current, inputs, model_inputs, batched)
        writes: dict[str, int] = {}
        for port in node.outputs:
            versions.append(_Version(port.tensor, port.spec, node))
            current[port.tensor] = writes[port.name] = len(versions) - 1
        maps.append((node, reads, writes))
    wanted = list(
        dict.fromkeys([*outputs, *(p.tensor for n in nodes if n.stage == "post" for p in n.outputs)])
    )
    finals = {}
    for tensor in wanted:
        index = current.get(tensor)
        if index is None or versions[index].producer is None:
            raise _fail(f"ensemble output {tensor!r} is written by no step")
        if tensor in inputs:
            raise _fail(f"ensemble output {tensor!r} has the name of an ensemble input; write another name")
        finals[index] = tensor
    for index, version in enumerate(versions):
        producer = version.producer
        if producer is None:
            version.name = version.tensor
        elif index in finals:
            version.name = finals[index]
        elif version.reads:
            # Written once: its own name (the configs read as they always did); rewritten: the
            # writer's name tells the versions apart.
            once = sum(v.tensor == version.tensor for v in versions) == 1
            version.name = version.tensor if once else f"{version.tensor}__{producer.model_name}"
        elif producer.user:
            port = next(p for p in producer.outputs if p.tensor == version.tensor)
            raise _fail(
                f"{producer.label}: output {port.name!r} writes {version.tensor!r}, which no later "
                "step reads and no ensemble output is"
            )
    steps = [
        EnsembleStep(
            node.model_name,
            {port: versions[i].name for port, i in reads.items()},
            {port: versions[i].name for port, i in writes.items() if versions[i].name},
            node.version,
        )
        for node, reads, writes in maps
    ]
    out_specs = [_renamed(versions[current[t]].spec, t) for t in wanted]
    return Wiring(list(inputs.values()), out_specs, steps)


def _renamed(spec: TensorSpec, name: str) -> TensorSpec:
    return TensorSpec(name, spec.dtype, spec.shape)


def _read(
    node: Node,
    port: Port,
    versions: list[_Version],
    current: dict[str, int],
    inputs: dict[str, TensorSpec],
    model_inputs: set[str],
    batched: bool,
) -> int:
    """The version ``port`` reads, checked to exist and to agree in dtype and dims."""
    tensor, where = port.tensor, f"{node.label}: input {port.name!r}"
    if port.ensemble_input and node.stage != "pre":
        raise _fail(f"{where}: only a pre step can declare an ensemble input")
    if tensor in current:
        if port.ensemble_input:
            raise _fail(f"{where}: declares the ensemble input {tensor!r}, which already exists")
        index = current[tensor]
    elif port.ensemble_input or (node.stage != "post" and tensor in model_inputs):
        inputs[tensor] = _renamed(port.spec, tensor)
        versions.append(_Version(tensor, inputs[tensor], None))
        index = current[tensor] = len(versions) - 1
    else:
        known = sorted(current) or ["none"]
        raise _fail(
            f"{where} reads {tensor!r}, which no ensemble input or earlier step provides "
            f"(known: {', '.join(known)}; model inputs: {', '.join(sorted(model_inputs))})"
        )
    version = versions[index]
    origin = "the ensemble input" if version.producer is None else f"{version.producer.label}'s"
    if version.spec.dtype != port.spec.dtype or not dims_agree(version.spec.shape, port.spec.shape):
        raise _fail(
            f"{where} is {describe(port.spec, batched)}, but {origin} {tensor!r} is "
            f"{describe(version.spec, batched)}"
        )
    version.reads += 1
    return index
