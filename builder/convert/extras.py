"""Which project extra each flavor's converter needs, and the refusal when it is missing.

The core install (``make demo``, requirements/core.lock) converts scikit-learn and ONNX models;
PyTorch, XGBoost/LightGBM and CatBoost are extras (pyproject.toml's optional dependencies), so a
model of those flavors is refused at once, before anything is loaded, with the extra's name.
"""

from __future__ import annotations

import importlib

from builder.errors import MissingExtraError, first_line

# flavor -> (extra, the modules its load, conversion and parity import)
FLAVOR_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pytorch": ("torch", ("torch", "onnxscript")),
    "xgboost": ("boosting", ("xgboost", "onnxmltools")),
    "lightgbm": ("boosting", ("lightgbm", "onnxmltools")),
    "catboost": ("catboost", ("catboost",)),
}
# extra -> its packages, as pyproject.toml's optional dependencies name them (the refusal's hint
# installs these; tests/unit/test_missing_extras.py keeps the two equal)
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "onnxscript"),
    "boosting": ("xgboost", "lightgbm", "onnxmltools"),
    "catboost": ("catboost",),
}


def require_extra(flavor: str) -> None:
    """Import the libraries ``flavor`` needs; raise MissingExtraError naming its extra when one
    cannot be imported. A flavor of the core (sklearn, onnx) needs none."""
    if flavor not in FLAVOR_EXTRAS:
        return
    extra, modules = FLAVOR_EXTRAS[flavor]
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:  # ModuleNotFoundError too: absent, or a dependency of it is
            raise MissingExtraError(flavor, extra, first_line(exc, 200), EXTRA_PACKAGES[extra]) from exc
