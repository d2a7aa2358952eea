"""PyTorch modules -> ONNX with a dynamic batch axis (``torch.onnx.export``, dynamo exporter).

MLflow 3 saves PyTorch models as ``torch.export`` programs (``model.pt2``) by default, and loads
them back as graph modules that the TorchScript exporter cannot trace (they refuse ``train()``
and ``eval()``). The dynamo exporter takes both those and pickled ``nn.Module``s, with the batch
axis declared dynamic. It needs onnxscript and emits opset 18 or later.

Integer inputs are ids more often than numbers: without an input example (MLflow's ``pt2`` format
saves none when the example is a torch tensor, a tuple or a list), generated ids must stay within
the model's embedding tables, or the native model and ONNX Runtime both refuse them. The tables'
sizes are in the module (``nn.Embedding``/``nn.EmbeddingBag`` in a pickled module, the
``aten.embedding*`` ops' weights in a ``pt2`` program), and rows the model still refuses are
reported as the builder's, before any converter runs on them.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter
from builder.convert.ids import EmbeddingTables, check_generated_ids, id_vocabulary, ids_below, is_integer
from builder.errors import ConversionError, first_line
from builder.parity.rows import Feeds
from builder.registry.signature import ModelInputs

MIN_OPSET = 18  # the dynamo exporter's lowest
# What a pt2 program's graph calls for nn.Embedding / nn.EmbeddingBag / F.embedding (the weight
# is each op's first argument, its rows the ids it takes).
EMBEDDING_OPS = ("embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only")
TABLES = EmbeddingTables(
    layer="nn.Embedding",
    example_hint="log the model with an input example of values it accepts: input_example= in "
    "mlflow.pytorch.log_model (a numpy array for one input; for several, a dict of numpy arrays "
    'by input name with serialization_format="pickle": MLflow saves no torch tensor, tuple or '
    "list as the example)",
)


class PyTorchConverter(FlavorConverter):
    flavor = "pytorch"

    def __init__(self, output_names: list[str] | None = None) -> None:
        self.output_names = output_names or ["output"]

    def load(self, local_path: Path) -> Any:
        import mlflow.pytorch
        import torch

        module = mlflow.pytorch.load_model(str(local_path), map_location="cpu")
        if hasattr(module, "training") and not isinstance(module, torch.fx.GraphModule):
            module.eval()  # an exported program's module has no train/eval mode to set
        return module

    def vocabulary(self, native: Any, inputs: ModelInputs) -> dict[str, tuple[Any, ...]]:
        """Every integer input draws its parity rows below the smallest embedding table's rows
        (builder/convert/ids.py)."""
        return id_vocabulary(embedding_rows(native), inputs)

    def check_generated(self, native: Any, feeds: Feeds, inputs: ModelInputs) -> None:
        """The native module refusing the builder's generated ids is the builder's fault, said
        so before the converter sees them (builder/convert/ids.py)."""
        predict = functools.partial(self.predict, native, inputs=inputs)
        check_generated_ids(predict, feeds, inputs, embedding_rows(native), TABLES)

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        import torch

        names = [t.name for t in inputs.tensors]
        # The exporter traces with these; ids stay within the embeddings in case it runs them.
        bound = embedding_rows(native)
        rng = np.random.default_rng(0)
        examples = tuple(
            torch.from_numpy(t.sample(4, rng, ids_below(bound) if is_integer(t) else ()))
            for t in inputs.tensors
        )
        batch = torch.export.Dim("batch")
        dynamic = tuple({0: batch} for _ in names)
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notes
                program = torch.onnx.export(
                    native,
                    examples,
                    input_names=names,
                    output_names=self.output_names,
                    dynamic_shapes=dynamic,
                    opset_version=max(opset, MIN_OPSET),
                    dynamo=True,
                    verbose=False,
                )
        except Exception as exc:  # torch raises UnsupportedOperatorError, SymbolicValueError, ...
            raise ConversionError(
                f"torch.onnx.export failed: {first_line(exc)}",
                hint="an operator without an ONNX symbolic: rewrite it with supported ops, or log "
                "the model as ONNX yourself (mlflow.onnx.log_model)",
            ) from exc
        if program is None:
            raise ConversionError("torch.onnx.export returned no program")
        return program.model_proto

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        import torch

        with torch.no_grad():
            out = native(*(torch.from_numpy(feeds[t.name]) for t in inputs.tensors))
        outs = out if isinstance(out, tuple | list) else (out,)
        return {name: o.detach().numpy() for name, o in zip(self.output_names, outs, strict=True)}


def embedding_rows(module: Any) -> int | None:
    """The rows of the smallest embedding table in ``module`` (the exclusive upper bound of the
    ids every one of them accepts), or None when it has none the builder can see."""
    import torch

    sizes = []
    for sub in module.modules() if isinstance(module, torch.nn.Module) else ():
        if isinstance(sub, torch.nn.Embedding | torch.nn.EmbeddingBag):
            sizes.append(int(sub.num_embeddings))
        elif isinstance(sub, torch.fx.GraphModule):
            sizes += _graph_embedding_rows(sub)
    return min(sizes) if sizes else None


def _graph_embedding_rows(graph_module: Any) -> list[int]:
    """Rows of the weights the ``aten.embedding*`` ops of a traced graph read (a ``pt2`` program
    loads as a graph module whose submodules are plain modules, no nn.Embedding)."""
    sizes = []
    for node in graph_module.graph.nodes:
        packet = getattr(node.target, "overloadpacket", None) if node.op == "call_function" else None
        if getattr(packet, "__name__", None) not in EMBEDDING_OPS or not node.args:
            continue
        weight = node.args[0]
        value = weight.meta.get("val") if hasattr(weight, "meta") else None
        if getattr(weight, "op", None) == "get_attr":
            value = _attribute(graph_module, str(weight.target))
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) == 2:
            sizes.append(int(shape[0]))
    return sizes


def _attribute(module: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        module = getattr(module, part, None)
    return module
