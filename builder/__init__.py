"""builder: MLflow registry models -> Triton model repositories (ONNX, configs, ensembles)."""

__version__ = "0.1.0"
