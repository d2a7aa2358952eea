"""PyTorch modules -> ONNX with a dynamic batch axis (``torch.onnx.export``, dynamo exporter).

MLflow 3 saves PyTorch models as ``torch.export`` programs (``model.pt2``) by default, and loads
them back as graph modules that the TorchScript exporter cannot trace (they refuse ``train()``
and ``eval()``). The dynamo exporter takes both those and pickled ``nn.Module``s, with the batch
axis declared dynamic. It needs onnxscript and emits opset 18 or later.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter
from builder.errors import ConversionError, first_line
from builder.registry.signature import ModelInputs

MIN_OPSET = 18  # the dynamo exporter's lowest


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

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        import torch

        names = [t.name for t in inputs.tensors]
        examples = tuple(torch.from_numpy(t.sample(4, np.random.default_rng(0))) for t in inputs.tensors)
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
