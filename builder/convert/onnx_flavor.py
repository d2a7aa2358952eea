"""Models already logged as ONNX (``mlflow.onnx``): checked, then passed through unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter
from builder.registry.signature import ModelInputs


class OnnxConverter(FlavorConverter):
    flavor = "onnx"

    def load(self, local_path: Path) -> Any:
        import mlflow.onnx

        return mlflow.onnx.load_model(str(local_path))

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        return native

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        # The "native" runtime of an ONNX model is onnxruntime itself; parity then checks that
        # the graph survived the builder's rewrites (output shapes) and the copy to the repo.
        import onnxruntime as ort

        session = ort.InferenceSession(native.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds), strict=True))
