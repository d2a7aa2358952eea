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

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter
from builder.errors import ConversionError, first_line
from builder.parity.rows import Feeds
from builder.registry.signature import ModelInputs
from builder.tensors import TensorSpec

MIN_OPSET = 18  # the dynamo exporter's lowest
# What a pt2 program's graph calls for nn.Embedding / nn.EmbeddingBag / F.embedding (the weight
# is each op's first argument, its rows the ids it takes).
EMBEDDING_OPS = ("embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only")
EXAMPLE_HINT = (
    "log the model with an input example of values it accepts: input_example= in "
    "mlflow.pytorch.log_model (a numpy array for one input; for several, a dict of numpy arrays "
    'by input name with serialization_format="pickle": MLflow saves no torch tensor, tuple or '
    "list as the example)"
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
        """Every integer input draws its parity rows from ``0 .. n-1``, ``n`` the smallest
        embedding table's rows: an id any of the model's embeddings accepts. Nothing when the
        model has no embedding (its integer inputs then follow the example, or 0..9)."""
        bound = embedding_rows(native)
        if bound is None:
            return {}
        return {t.name: _ids(bound) for t in inputs.tensors if _integer(t)}

    def check_generated(self, native: Any, feeds: Feeds, inputs: ModelInputs) -> None:
        """Run the native model on the generated rows when the model takes integers: a refusal
        there (an id past a table the builder could not see) is the builder's rows' fault, said
        so before ONNX Runtime or the converter see those rows and seem to fail."""
        integers = [t for t in inputs.tensors if _integer(t)]
        generated = feeds.generated()
        if not integers or not len(next(iter(generated.values()))):
            return
        try:
            self.predict(native, generated, inputs)
        except Exception as exc:  # IndexError, RuntimeError: whatever the module raises
            drawn = ", ".join(
                f"{t.name!r} {int(generated[t.name].min())}..{int(generated[t.name].max())}" for t in integers
            )
            bound = embedding_rows(native)
            if bound is not None:
                why = f"below its smallest embedding's {bound} rows"
            elif feeds.example_rows:
                why = "within the input example's range; the model has no nn.Embedding that says more"
            else:
                why = (
                    "without an input example, and with no nn.Embedding in the model, the builder "
                    "cannot know which integers it accepts"
                )
            hint = EXAMPLE_HINT
            if feeds.example_rows:
                hint = "check parity on the input example alone (--parity-rows 0), or " + hint
            which = "integer input" if len(integers) == 1 else "integer inputs"
            raise ConversionError(
                f"the builder's generated parity rows are outside what the model accepts ({which} "
                f"{drawn}: {why}); the native model raised {type(exc).__name__}: "
                f"{first_line(exc, 200)}",
                hint=hint,
            ) from exc

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        import torch

        names = [t.name for t in inputs.tensors]
        # The exporter traces with these; ids stay within the embeddings in case it runs them.
        bound = embedding_rows(native)
        rng = np.random.default_rng(0)
        examples = tuple(
            torch.from_numpy(t.sample(4, rng, _ids(bound) if _integer(t) else ())) for t in inputs.tensors
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


def _integer(tensor: TensorSpec) -> bool:
    return tensor.dtype.startswith(("int", "uint"))


def _ids(bound: int | None) -> tuple[int, ...]:
    """Ids an embedding of ``bound`` rows takes (none known: the tensors' own 0..9)."""
    return tuple(range(bound)) if bound is not None else ()
