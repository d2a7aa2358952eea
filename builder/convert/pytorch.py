"""PyTorch modules -> ONNX with a dynamic batch axis (``torch.onnx.export``).

The TorchScript-based exporter (``dynamo=False``) is used: it is fast (sub-second for small
models), needs no onnxscript at run time, and produces the dynamic batch axis from
``dynamic_axes``. Inputs and outputs are named from the signature.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter
from builder.errors import ConversionError
from builder.signature import ModelInputs


class PyTorchConverter(FlavorConverter):
    flavor = "pytorch"

    def __init__(self, output_names: list[str] | None = None) -> None:
        self.output_names = output_names or ["output"]

    def load(self, local_path: Path) -> Any:
        import mlflow.pytorch

        module = mlflow.pytorch.load_model(str(local_path), map_location="cpu")
        module.eval()
        return module

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        import torch

        names = [t.name for t in inputs.tensors]
        examples = tuple(
            torch.from_numpy(t.sample(2, np.random.default_rng(0))) for t in inputs.tensors
        )
        dynamic = {n: {0: "batch"} for n in names + self.output_names}
        buffer = io.BytesIO()
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # the exporter's deprecation and tracer notes
                torch.onnx.export(
                    native,
                    examples,
                    buffer,
                    input_names=names,
                    output_names=self.output_names,
                    dynamic_axes=dynamic,
                    opset_version=opset,
                    dynamo=False,
                )
        except Exception as exc:  # torch raises UnsupportedOperatorError, SymbolicValueError, ...
            raise ConversionError(
                f"torch.onnx.export failed: {str(exc).strip().splitlines()[0][:300]}",
                hint="an operator without an ONNX symbolic: rewrite it with supported ops, or log "
                "the model as ONNX yourself (mlflow.onnx.log_model)",
            ) from exc
        return onnx.load_from_string(buffer.getvalue())

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        import torch

        with torch.no_grad():
            out = native(*(torch.from_numpy(feeds[t.name]) for t in inputs.tensors))
        outs = out if isinstance(out, tuple | list) else (out,)
        return {name: o.detach().numpy() for name, o in zip(self.output_names, outs, strict=True)}
