"""What the explainer is checked against, and the linear explainer's background.

``shap_reference``: shap's own answer on the native model (TreeExplainer, path-dependent; or
LinearExplainer, interventional, over the training mean), its outputs kept and its features
summed into columns as the explainer does. For a CatBoost model shap answers with CatBoost's own
``get_feature_importance(type="ShapValues")``, which refuses a model whose ``scale_and_bias``
scale is not 1: there it is the unscaled copy's values times the scale. ``background_mean``:
the training rows' mean after the preprocessing, from the run's ``serving/reference.parquet``
(or ``--reference``), which a linear model's SHAP values are measured from.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from builder.errors import UsageError

if TYPE_CHECKING:
    from builder.export.context import ExportContext


def background_mean(ctx: ExportContext, pre: Any | None, width: int) -> np.ndarray:
    """The mean of the training rows as the linear model reads them."""
    from builder.export.drift_reference import RUN_ARTIFACT, read_frame, run_reference_file

    path = ctx.request.reference or run_reference_file(ctx.model.run_id, ctx.workdir / "explain")
    if path is None:
        raise UsageError(
            f"{ctx.model.ref}: a linear model's SHAP values are measured from the training rows' "
            f"mean, and the run has no {RUN_ARTIFACT}",
            hint="log the training frame with builder.reference.log_reference(frame) in the "
            "training run, or pass --reference FILE.parquet",
        )
    frame = read_frame(path, str(path))
    columns = [c.name for c in ctx.inputs.columns]
    missing = [c for c in columns if c not in frame.columns]
    if missing or frame.empty:
        raise UsageError(
            f"{ctx.model.ref}: the reference rows {path.name} lack the model's columns {missing}"
            if missing
            else f"{ctx.model.ref}: the reference rows {path.name} are empty",
            hint="log the model's input columns as fitted (builder.reference.log_reference)",
        )
    frame = frame[columns]
    x = pre.transform(frame) if pre is not None else frame.to_numpy(dtype=np.float64)
    if hasattr(x, "toarray"):
        x = x.toarray()
    mean = np.asarray(x, dtype=np.float64).mean(axis=0)
    if mean.shape != (width,) or not np.all(np.isfinite(mean)):
        raise UsageError(
            f"{ctx.model.ref}: the reference rows give no finite mean of the {width} features",
            hint="log reference rows without missing values the model cannot take",
        )
    return mean


def shap_reference(
    final: Any,
    family: str,
    x: np.ndarray,
    mean: np.ndarray | None,
    keep: list[int],
    groups: np.ndarray,
    columns: int,
) -> tuple[np.ndarray, np.ndarray]:
    """shap's SHAP values per column ``(rows, columns, outputs)`` and base values
    ``(rows, outputs)`` of ``final`` on its features ``x``."""
    from builder.explain.oblivious import catboost_unscaled
    from builder.explain.trees import import_shap

    shap = import_shap()
    scale, bias = 1.0, np.zeros(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if family == "tree":
            # A CatBoost model's ShapValues refuse a scale other than 1: its unscaled copy's, scaled.
            model, scale, bias = catboost_unscaled(final)
            explainer = shap.TreeExplainer(model, feature_perturbation="tree_path_dependent")
            values = explainer.shap_values(x, check_additivity=False)
        else:
            assert mean is not None
            explainer = shap.LinearExplainer(final, (mean, np.eye(len(mean))))
            values = explainer.shap_values(x)
    phi = np.asarray(values, dtype=np.float64)
    if isinstance(values, list):  # older shap: one array per output
        phi = np.stack(values, axis=-1)
    if phi.ndim == 2:
        phi = phi[:, :, None]
    base = np.atleast_1d(np.asarray(explainer.expected_value, dtype=np.float64)).reshape(-1)
    if scale != 1.0:
        phi, base = phi * scale, scale * (base - bias) + bias
    if phi.shape[2] > max(keep):  # a forest's both classes, of which the explainer keeps one
        phi, base = phi[:, :, keep], base[keep]
    out = np.zeros((x.shape[0], columns, phi.shape[2]))
    for f, column in enumerate(groups):
        out[:, column, :] += phi[:, f, :]
    return out, np.broadcast_to(base, (x.shape[0], phi.shape[2])).copy()
