"""Which project extra each flavor's converter needs, and the refusal when it is missing.

The core install (``make demo``, requirements/core.lock) converts scikit-learn and ONNX models;
PyTorch, Keras/TensorFlow, XGBoost/LightGBM and CatBoost are extras (pyproject.toml's optional
dependencies), so a model of those flavors is refused at once, before anything is loaded, with
the extra's name.
"""

from __future__ import annotations

import importlib
import os

from builder.errors import MissingExtraError, first_line

# flavor -> (extra, the modules its load, conversion and parity import)
FLAVOR_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pytorch": ("torch", ("torch", "onnxscript")),
    # mlflow.keras and mlflow.tensorflow (given a Keras model) log the same Keras 3 model; both
    # import TensorFlow (Keras' backend), so a missing tensorflow-cpu is named by their refusal
    "keras": ("keras", ("keras", "tf2onnx")),
    "tensorflow": ("keras", ("keras", "tf2onnx")),
    "xgboost": ("boosting", ("xgboost", "onnxmltools")),
    "lightgbm": ("boosting", ("lightgbm", "onnxmltools")),
    "catboost": ("catboost", ("catboost",)),
}
# extra -> its packages, as pyproject.toml's optional dependencies name them (the refusal's hint
# installs these; tests/builder/convert/test_missing_extras.py keeps the two equal)
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "onnxscript"),
    "keras": ("tensorflow-cpu", "keras", "tf2onnx"),
    "boosting": ("xgboost-cpu", "lightgbm", "onnxmltools"),
    "catboost": ("catboost",),
}


def require_extra(flavor: str) -> None:
    """Import the libraries ``flavor`` needs; raise MissingExtraError naming its extra when one
    cannot be imported. A flavor of the core (sklearn, onnx) needs none."""
    if flavor not in FLAVOR_EXTRAS:
        return
    extra, modules = FLAVOR_EXTRAS[flavor]
    if extra == "keras":
        # TensorFlow prints INFO lines on stderr when it is first imported (its CPU features; that
        # oneDNN's kernels are on, which only TF_ENABLE_ONEDNN_OPTS=0 silences), around the
        # builder's own lines. Parity compares the model with ONNX Runtime either way; a user's
        # setting wins.
        for name, value in (("TF_CPP_MIN_LOG_LEVEL", "2"), ("TF_ENABLE_ONEDNN_OPTS", "0")):
            os.environ.setdefault(name, value)
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:  # ModuleNotFoundError too: absent, or a dependency of it is
            raise MissingExtraError(flavor, extra, first_line(exc, 200), EXTRA_PACKAGES[extra]) from exc
