"""Models already logged as ONNX (``mlflow.onnx``): checked, put under the serving contract's
names, otherwise passed through unchanged.

What the builder adapts, and why:

- **Inputs.** A signature of one unnamed tensor (what MLflow infers from a numpy input example)
  is served as ``input`` (docs/serving-contract.md) and mapped onto the graph's only input,
  whatever its exporter named it (skl2onnx: ``X``). A float input signed with another float
  width than the graph's (a float64 example of a graph converted from float32 rows, the usual
  skl2onnx recipe) is served as signed and cast first thing in the graph.
- **ZipMap.** skl2onnx gives a classifier's probabilities as a ZipMap by default: a sequence of
  maps (class -> probability), which no Triton tensor carries. The [N, C] tensor the ZipMap wraps
  is served instead, as the classifier contract's ``probabilities`` (column ``j`` = the ZipMap's
  ``j``-th key, its classes), and the graph's other output as ``label`` (builder/kinds.py).
- **Classifiers without ZipMap** (outputs ``label`` and ``probabilities``: skl2onnx's
  ``zipmap=False`` names, and onnxmltools') whose classifier operators declare one list of
  classes are served as classifiers too, so a model gets the same contract either way.
- Anything else is kind ``other``: outputs passed through by name.

Parity compares the served graph with the model as logged, run by onnxruntime (its "native"
runtime), the ZipMap's maps read back into columns by class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from builder.convert.base import FlavorConverter, cast_input
from builder.errors import ConversionError, first_line
from builder.kinds import LABEL, PROBABILITIES, ModelKind
from builder.registry.signature import TABULAR_INPUT, ModelInputs
from builder.tensors import dtype_from_onnx, numpy_dtype

ML_DOMAIN = "ai.onnx.ml"
# Operators of ai.onnx.ml that make a classifier's label and scores, and the attributes that
# list its classes (in the order of the score columns).
CLASSIFIER_OPS = ("LinearClassifier", "TreeEnsembleClassifier", "SVMClassifier")
CLASS_ATTRIBUTES = ("classlabels_ints", "classlabels_int64s", "classlabels_strings")
LABEL_TYPES = (TensorProto.INT64, TensorProto.STRING)
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)

ZIPMAP_HINT = (
    "convert the model again with float32 rows (skl2onnx: to_onnx(model, X[:1].astype(numpy.float32))) "
    "or without ZipMap (skl2onnx: options={id(model): {'zipmap': False}}), and log it again"
)
LOAD_HINT = (
    "export the graph at an opset and with operators onnxruntime supports, check that "
    "onnxruntime.InferenceSession loads it, and log it again"
)
ONNX_HINT = (
    "the ONNX model is served as logged: check that onnxruntime runs it on rows like its input "
    "example (names, dtypes and shapes as its signature says), and log it with an input example "
    "of the rows it takes; nothing was written"
)


@dataclass(frozen=True)
class ZipMap:
    """A ZipMap that makes a graph output: the tensor it wraps and its keys, in column order."""

    output: str
    tensor: str
    classes: tuple[Any, ...]


@dataclass(frozen=True)
class LoggedOnnx:
    """The ONNX model as logged (never changed), its onnxruntime session (parity's native side)
    and what the builder serves of it, decided once when it is loaded."""

    model: onnx.ModelProto
    session: Any
    kind: ModelKind
    zipmaps: dict[str, ZipMap] = field(default_factory=dict)  # graph output -> its ZipMap
    served: dict[str, str] = field(default_factory=dict)  # graph output -> served name


class OnnxConverter(FlavorConverter):
    flavor = "onnx"
    library = "its exporter"

    def load(self, local_path: Path) -> LoggedOnnx:
        import mlflow.onnx

        return read_logged(mlflow.onnx.load_model(str(local_path)))

    def model_name(self, native: LoggedOnnx) -> str:
        producer = f"{native.model.producer_name} {native.model.producer_version}".strip()
        return f"the logged ONNX model ({producer})" if producer else "the logged ONNX model"

    def reads_columns_by_name(self, native: LoggedOnnx) -> bool:
        """A graph of several inputs (skl2onnx's from a DataFrame: one per column) takes an
        all-numeric column signature one input per column, not as one matrix."""
        return len(_real_inputs(native.model.graph)) > 1

    def describe(self, native: LoggedOnnx, inputs: ModelInputs) -> ModelKind:
        return native.kind

    def known_cause(self, native: Any, stage: str) -> str | None:
        # There is no converter to report to: the graph is the user's own. (A parity miss is
        # near impossible: parity runs the logged graph against itself, renamed and unwrapped.)
        return ONNX_HINT

    def to_onnx(self, native: LoggedOnnx, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(native.model)  # the logged model stays as it is: parity runs it
        graph = model.graph
        for served, name in input_names(native.model, inputs).items():
            if name != served:
                _rename_everywhere(graph, served, _unused(graph, served))  # a tensor already so named
                _rename_everywhere(graph, name, served)
            declared = _graph_input(graph, served).type.tensor_type.elem_type
            wanted = helper.np_dtype_to_tensor_dtype(numpy_dtype(_served_dtype(inputs, served)))
            if declared != wanted:
                cast_input(model, served, wanted)
        for zipmap in native.zipmaps.values():
            _unwrap(graph, zipmap)
        # Served names: a ZipMap's output is now the tensor it wrapped.
        zipped = {o: z.tensor for o, z in native.zipmaps.items()}
        _rename_outputs(graph, {zipped.get(o, o): name for o, name in native.served.items()})
        return model

    def predict(
        self, native: LoggedOnnx, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        graph = native.model.graph
        fed = {}
        for served, name in input_names(native.model, inputs).items():
            elem = _graph_input(graph, name).type.tensor_type.elem_type
            fed[name] = feeds[served].astype(numpy_dtype(dtype_from_onnx(elem)), copy=False)
        names = [o.name for o in graph.output]
        rows = len(next(iter(feeds.values()))) if feeds else 0
        out = {}
        for name, value in zip(names, native.session.run(names, fed), strict=True):
            zipmap = native.zipmaps.get(name)
            if zipmap is not None:  # a list of {class: probability}: its columns, in class order
                value = np.array([[row[c] for c in zipmap.classes] for row in value], dtype=np.float32)
            out[native.served.get(name, name)] = _per_row(np.asarray(value), rows)
        return out


def read_logged(model: onnx.ModelProto) -> LoggedOnnx:
    """The logged model, its session, and what it is served as (the module docstring's rules);
    refused when onnxruntime cannot load it or an output is no tensor and no ZipMap."""
    import onnxruntime as ort

    zipmaps = _zipmaps(model.graph)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own types: Fail, InvalidGraph, NotImplemented, ...
        zipped = f" (its ZipMap output {next(iter(zipmaps))!r} included)" if zipmaps else ""
        raise ConversionError(
            f"ONNX Runtime (what Triton runs it with) cannot load the ONNX model as logged{zipped}: "
            f"{first_line(exc)}",
            hint=ZIPMAP_HINT if zipmaps else LOAD_HINT,
        ) from exc
    for out in model.graph.output:
        if out.name not in zipmaps and not out.type.HasField("tensor_type"):
            what = out.type.WhichOneof("value") or "untyped value"
            raise ConversionError(
                f"ONNX output {out.name!r} is a {what.removesuffix('_type')}, which no Triton tensor carries",
                hint="export the graph with tensor outputs only (for a skl2onnx classifier's "
                "probabilities: options={id(model): {'zipmap': False}}), and log it again",
            )
    kind, served = _contract(model.graph, zipmaps)
    return LoggedOnnx(model=model, session=session, kind=kind, zipmaps=zipmaps, served=served)


def input_names(model: onnx.ModelProto, inputs: ModelInputs) -> dict[str, str]:
    """Served input name -> the graph input it feeds: the same names, or the signature's one
    unnamed tensor (``input``) onto the graph's only input. Refused otherwise, and where a
    dtype differs beyond a float width (which the served graph casts)."""
    graph = _real_inputs(model.graph)
    signed = [t.name for t in inputs.tensors]
    if set(signed) == set(graph):
        names = {n: n for n in signed}
    elif signed == [TABULAR_INPUT] and len(graph) == 1:
        names = {TABULAR_INPUT: graph[0]}
    else:
        raise ConversionError(
            f"ONNX inputs {sorted(graph)} do not match the signature's {sorted(signed)}",
            hint="log it with an input example (or signature) that names the graph's inputs, "
            f"e.g. input_example={{{', '.join(f'{n!r}: ...' for n in graph)}}}, one array per input; "
            "a single unnamed array maps onto a graph with one input",
        )
    for served, name in names.items():
        elem = _graph_input(model.graph, name).type.tensor_type.elem_type
        dtype, want = _served_dtype(inputs, served), _dtype_name(elem)
        if dtype != want and not (elem in FLOAT_TYPES and dtype.startswith("float")):
            raise ConversionError(
                f"ONNX input {name!r} takes {want}, but the signature's {served!r} is {dtype}",
                hint=f"log it with an input example of the dtype the graph takes ({want})",
            )
    return names


def _contract(graph: onnx.GraphProto, zipmaps: dict[str, ZipMap]) -> tuple[ModelKind, dict[str, str]]:
    """The kind, and graph output -> served name for the outputs that are renamed."""
    outputs = {o.name: o for o in graph.output}
    if zipmaps:
        others = [o for o in outputs.values() if o.name not in zipmaps]
        if len(zipmaps) == 1 and len(others) == 1 and _elem(others[0]) in LABEL_TYPES:
            (zipmap,) = zipmaps.values()
            served = {others[0].name: LABEL, zipmap.output: PROBABILITIES}
            return ModelKind.classifier(zipmap.classes), served
        # Unwrapped, each under its ZipMap output's own name; nothing says what the rest is.
        return ModelKind("other"), {o: o for o in zipmaps}
    if set(outputs) == {LABEL, PROBABILITIES} and _elem(outputs[LABEL]) in LABEL_TYPES:
        classes = _declared_classes(graph)
        if classes is not None and _elem(outputs[PROBABILITIES]) in FLOAT_TYPES:
            return ModelKind.classifier(classes), {}
    return ModelKind("other"), {}


def _zipmaps(graph: onnx.GraphProto) -> dict[str, ZipMap]:
    outputs = {o.name for o in graph.output}
    found = {}
    for node in graph.node:
        if node.op_type == "ZipMap" and node.domain == ML_DOMAIN and node.output[0] in outputs:
            found[node.output[0]] = ZipMap(node.output[0], node.input[0], _classes(node) or ())
    return found


def _declared_classes(graph: onnx.GraphProto) -> tuple[Any, ...] | None:
    """The one list of classes the graph's classifier operators declare; None if none or several."""
    lists = {
        classes
        for node in graph.node
        if node.domain == ML_DOMAIN and node.op_type in CLASSIFIER_OPS
        for classes in [_classes(node)]
        if classes
    }
    return lists.pop() if len(lists) == 1 else None


def _classes(node: onnx.NodeProto) -> tuple[Any, ...] | None:
    for attribute in node.attribute:
        if attribute.name in CLASS_ATTRIBUTES:
            value = helper.get_attribute_value(attribute)
            if value:
                return tuple(v.decode() if isinstance(v, bytes) else int(v) for v in value)
    return None


def _unwrap(graph: onnx.GraphProto, zipmap: ZipMap) -> None:
    """Drop the ZipMap and serve the [N, C] float tensor it wraps in its place."""
    for i, node in enumerate(graph.node):
        if node.op_type == "ZipMap" and list(node.output) == [zipmap.output]:
            del graph.node[i]
            break
    for i, out in enumerate(graph.output):
        if out.name == zipmap.output:
            # normalize_outputs declares the batch axis from a run; ZipMap takes float only.
            shape = [None, len(zipmap.classes) or None]
            graph.output.insert(i, helper.make_tensor_value_info(zipmap.tensor, TensorProto.FLOAT, shape))
            del graph.output[i + 1]
            break


def _rename_everywhere(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename a tensor in the graph's inputs, outputs, initializers, value infos and nodes, and
    where a subgraph (If, Loop, Scan) reads it from the outer scope."""
    if old == new:
        return
    for values in (graph.input, graph.output, graph.value_info, graph.initializer):
        for value in values:
            if value.name == old:
                value.name = new
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        node.output[:] = [new if o == old else o for o in node.output]
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                _rename_everywhere(sub, old, new)


def _rename_outputs(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename tensors to their served names (``tensor -> served``), moving aside whatever
    tensor already has a served name (skl2onnx's graphs name an inner tensor ``label``), in two
    passes so that no rename lands on a tensor another one is about to take."""
    moving = {old: new for old, new in names.items() if old != new}
    parked = {old: _unused(graph, f"{old}__served") for old in moving}
    for old, temporary in parked.items():
        _rename_everywhere(graph, old, temporary)
    for new in moving.values():
        _rename_everywhere(graph, new, _unused(graph, new))
    for old, temporary in parked.items():
        _rename_everywhere(graph, temporary, moving[old])


def _unused(graph: onnx.GraphProto, name: str) -> str:
    """A name no tensor of the graph has, for moving ``name`` out of the way."""
    taken = {v.name for vs in (graph.input, graph.output, graph.value_info, graph.initializer) for v in vs}
    taken |= {t for node in graph.node for t in (*node.input, *node.output)}
    candidate, i = f"{name}__logged", 1
    while candidate in taken:
        candidate, i = f"{name}__logged{i}", i + 1
    return candidate


def _real_inputs(graph: onnx.GraphProto) -> list[str]:
    """The graph's inputs that are fed (an old IR lists its initializers among its inputs)."""
    constants = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in constants]


def _graph_input(graph: onnx.GraphProto, name: str) -> onnx.ValueInfoProto:
    return next(i for i in graph.input if i.name == name)


def _served_dtype(inputs: ModelInputs, name: str) -> str:
    return next(t.dtype for t in inputs.tensors if t.name == name)


def _elem(value: onnx.ValueInfoProto) -> int:
    return int(value.type.tensor_type.elem_type)


def _dtype_name(elem: int) -> str:
    try:
        return dtype_from_onnx(elem)
    except KeyError:
        return TensorProto.DataType.Name(elem).lower()


def _per_row(value: np.ndarray, rows: int) -> np.ndarray:
    """Shaped as the served graph answers (normalize_outputs): a per-row scalar as [N, 1]."""
    if value.ndim == 1 or (rows > 1 and value.shape == (1, rows)):
        return value.reshape(-1, 1)
    return value
