"""Pre- and postprocessing math shared by training and serving (pure numpy, no imports else).

This one file is imported by training code (``builder.ensemble_models.transforms``) and copied
beside the Python-backend ``model.py`` of the ensemble steps, so the transformation a model
was trained with is, line for line, the one Triton runs. Parameters are plain JSON dicts:

preprocess:  {"impute": [v0, v1, ...] | null, "mean": [...] | null, "scale": [...] | null}
postprocess: {"threshold": 0.5, "positive_index": 1}
"""

from __future__ import annotations

from typing import Any

import numpy as np


def fit_preprocess(x: np.ndarray) -> dict[str, Any]:
    """Imputation values (column medians) and standard scaling fitted on training rows."""
    x = np.asarray(x, dtype=np.float64)
    impute = np.nanmedian(x, axis=0)
    filled = np.where(np.isnan(x), impute, x)
    mean = filled.mean(axis=0)
    scale = filled.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return {"impute": impute.tolist(), "mean": mean.tolist(), "scale": scale.tolist()}


def preprocess(x: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """Missing values (NaN) -> imputation values, then (x - mean) / scale; float32 out."""
    out = np.asarray(x, dtype=np.float64)
    if spec.get("impute") is not None:
        out = np.where(np.isnan(out), np.asarray(spec["impute"], dtype=np.float64), out)
    if spec.get("mean") is not None:
        out = out - np.asarray(spec["mean"], dtype=np.float64)
    if spec.get("scale") is not None:
        out = out / np.asarray(spec["scale"], dtype=np.float64)
    return out.astype(np.float32)


def postprocess(probabilities: np.ndarray, spec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(score, label): the positive class's probability and score >= threshold, as [N, 1]."""
    probs = np.asarray(probabilities, dtype=np.float32)
    score = probs[:, int(spec.get("positive_index", 1))].reshape(-1, 1)
    label = (score >= float(spec.get("threshold", 0.5))).astype(np.int64)
    return score, label
