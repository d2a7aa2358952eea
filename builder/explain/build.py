"""``--explain``: the exact explainer of the exported model, built and checked at export.

What is explained is the final estimator's raw output (log-odds, a forest's probability, a
regressor's prediction), per original column (builder/explain/columns.py). Trees get
path-dependent TreeSHAP, linear models the interventional linear formula with the training
rows' mean as background (builder/explain/kernel.py). Before anything is written, the kernel's
answer on the parity rows is compared with ``shap`` itself on the native model, and the
preprocessing graph the explainer runs with the native preprocessing; a model with no exact
explainer is refused, never approximated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from builder.convert.base import native_frame, rename_outputs
from builder.errors import BuilderError, ConversionError, ParityError, first_line
from builder.explain import kernel
from builder.explain.columns import column_groups, split_pipeline
from builder.explain.oblivious import catboost_arrays, is_catboost
from builder.explain.reference import background_mean, shap_reference
from builder.explain.trees import tree_arrays

if TYPE_CHECKING:
    from builder.export.context import ExportContext

TREE_METHOD, LINEAR_METHOD = "tree_path_dependent", "linear_interventional"
# Within this of shap's own values (in the model's raw units, relative above 1): the 1e-5.
TOLERANCE = 1e-5
FEATURES = "features"  # the preprocessing graph's one output
_TREE_MODULES = ("sklearn.tree", "sklearn.ensemble", "xgboost", "lightgbm", "catboost")
_TREE_CLASSES = (
    "DecisionTree",
    "ExtraTree",
    "RandomForest",
    "ExtraTrees",
    "GradientBoosting",
    "HistGradientBoosting",
    "XGB",
    "Booster",
    "LGBM",
    "CatBoost",
)
_NO_EXPLAINER_HINT = (
    "--explain covers tree models (scikit-learn trees and forests, GradientBoosting, "
    "HistGradientBoosting, XGBoost, LightGBM, CatBoost) and linear models, whose SHAP values are exact; "
    "export this one without --explain (docs/explain.md)"
)


@dataclass(frozen=True)
class Explainer:
    """What the export writes as ``<model>_explain``."""

    arrays: dict[str, np.ndarray]  # explainer.npz
    method: str
    units: str
    outputs: tuple[Any, ...]  # what each output explains: a class label, or "prediction"
    columns: tuple[str, ...]
    preprocess: onnx.ModelProto | None
    rows: int  # parity rows it was checked on
    max_abs_err: float  # against shap


def build_explainer(ctx: ExportContext) -> Explainer:
    """The explainer of the exported model, checked against shap; refused with one reason
    where the model has no exact one."""
    ref, kind, inputs = ctx.model.ref, ctx.kind, ctx.inputs
    if kind.kind not in ("binary", "multiclass", "regression"):
        raise ConversionError(
            f"{ref} is a {kind.kind} model: --explain explains classifiers' and regressors' scores",
            hint="export it without --explain",
        )
    if not inputs.tabular:
        raise ConversionError(
            f"{ref} takes tensors (layout tensors): explanations are per input column",
            hint="log the model with a column signature (a DataFrame input example), or export "
            "it without --explain",
        )
    flavor = ctx.model.flavor
    if flavor not in ("sklearn", "xgboost", "lightgbm", "catboost"):
        raise ConversionError(f"{ref}: a {flavor} model has no exact explainer", hint=_NO_EXPLAINER_HINT)
    pre, final = split_pipeline(ctx.native) if flavor == "sklearn" else (None, ctx.native)
    family = _family(final)
    name = type(final).__name__
    if family is None:
        raise ConversionError(f"{ref}: {name} has no exact explainer", hint=_NO_EXPLAINER_HINT)
    columns = tuple(c.name for c in inputs.columns)
    width = _width(final)
    try:
        groups = column_groups(pre, columns, width)
    except ConversionError as exc:
        raise type(exc)(f"{ref}: {exc.message}", hint=exc.hint) from exc
    frame = native_frame(ctx.feeds.arrays, inputs)
    native_x = _dense(pre.transform(frame) if pre is not None else frame)
    graph = _preprocess_graph(ctx, pre, native_x) if pre is not None else None
    if family == "tree":
        # CatBoost's oblivious trees are read from its own JSON, the others through shap's parser
        arrays_of = catboost_arrays if is_catboost(final) else tree_arrays
        found = arrays_of(final, f"{ref}: {name}", width)
        arrays, units = found.arrays, found.units
        method = TREE_METHOD
    else:
        mean = background_mean(ctx, pre, width)
        arrays, units, method = (
            _linear_arrays(final, mean),
            _linear_units(final, kind.kind),
            LINEAR_METHOD,
        )
    keep = _kept_outputs(kind.kind, arrays)
    arrays = _select(arrays, keep)
    arrays["groups"], arrays["columns"] = groups, np.array(len(columns))
    expected = shap_reference(
        final, family, native_x, arrays.get("_mean_for_shap"), keep, groups, len(columns)
    )
    arrays.pop("_mean_for_shap", None)
    phi, base = kernel.explain(kernel.prepare(arrays), native_x)
    err = max(
        float(np.max(np.abs(phi - expected[0]), initial=0.0)), float(np.max(np.abs(base - expected[1])))
    )
    scale = max(1.0, float(np.max(np.abs(expected[0]), initial=0.0)))
    if not err <= TOLERANCE * scale:  # also refuses NaN
        raise ParityError(
            f"{ref}: the explainer differs from shap's TreeExplainer/LinearExplainer by {err:.3g} "
            f"on the parity rows (allowed {TOLERANCE * scale:.2g})",
            hint="report it with the model; export without --explain meanwhile",
        )
    outputs: tuple[Any, ...]
    if kind.kind == "regression":
        outputs = ("prediction",) * len(keep) if len(keep) == 1 else tuple(range(len(keep)))
    else:
        classes = tuple(kind.classes or range(max(2, len(keep))))
        # A binary classifier's one set of values is its positive class's (the second), whether
        # its trees hold one log-odds or both classes' probabilities.
        outputs = (classes[1],) if kind.kind == "binary" else tuple(classes[i] for i in keep)
    return Explainer(arrays, method, units, outputs, columns, graph, ctx.feeds.rows, err)


def _family(final: Any) -> str | None:
    module, name = type(final).__module__, type(final).__name__
    if module.startswith(_TREE_MODULES) and name.startswith(_TREE_CLASSES):
        return "tree"
    linear = module.startswith("sklearn.linear_model") or name in ("LinearSVC", "LinearSVR")
    if linear and hasattr(final, "coef_") and hasattr(final, "intercept_"):
        return "linear"
    return None


def _width(final: Any) -> int:
    if is_catboost(final):  # a CatBoost model loaded from its file says n_features_in_ == 0
        return len(final.feature_names_ or ())
    for attr in ("n_features_in_",):
        if hasattr(final, attr):
            return int(getattr(final, attr))
    for method in ("num_features", "num_feature"):  # XGBoost's and LightGBM's Booster
        if hasattr(final, method):
            return int(getattr(final, method)())
    raise ConversionError(
        f"cannot tell how many features {type(final).__name__} reads", hint=_NO_EXPLAINER_HINT
    )


def _dense(x: Any) -> np.ndarray:
    if hasattr(x, "toarray"):
        x = x.toarray()
    return np.asarray(x, dtype=np.float64)


def _preprocess_graph(ctx: ExportContext, pre: Any, native_x: np.ndarray) -> onnx.ModelProto:
    """The Pipeline's steps before the model as an ONNX graph (the explainer runs it on the
    served inputs), checked against the native steps on the parity rows."""
    from builder.parity.compare import GraphSession

    try:
        graph = ctx.converter.to_onnx(pre, ctx.inputs, ctx.request.opset)
        (out,) = [o.name for o in graph.graph.output]
        graph = rename_outputs(graph, {out: FEATURES})
        converted = GraphSession(graph).run(ctx.feeds.arrays)[FEATURES]
    except BuilderError:
        raise
    except Exception as exc:  # a converter's or onnxruntime's failure on the preprocessing alone
        raise ConversionError(
            f"{ctx.model.ref}: its preprocessing cannot be converted on its own for the explainer: "
            f"{type(exc).__name__}: {first_line(exc)}",
            hint="export it without --explain",
        ) from exc
    converted = np.asarray(converted, dtype=np.float64)
    atol, rtol = ctx.request.atol, ctx.request.rtol
    if converted.shape != native_x.shape or not np.allclose(
        converted, native_x, atol=atol, rtol=rtol, equal_nan=True
    ):
        raise ParityError(
            f"{ctx.model.ref}: the explainer's preprocessing graph differs from the Pipeline's own "
            "steps on the parity rows",
            hint="export it without --explain",
        )
    return graph


def _linear_arrays(final: Any, mean: np.ndarray) -> dict[str, np.ndarray]:
    coef = np.atleast_2d(np.asarray(final.coef_, dtype=np.float64))
    intercept = np.broadcast_to(np.asarray(final.intercept_, dtype=np.float64).reshape(-1), (coef.shape[0],))
    return {
        "coef": coef,
        "mean": np.asarray(mean, dtype=np.float64),
        "intercept": intercept.copy(),
        "input_dtype": np.array("float64"),
        "_mean_for_shap": np.asarray(mean, dtype=np.float64),
    }


def _linear_units(final: Any, kind: str) -> str:
    if kind == "regression":
        return "raw"
    return "log_odds" if type(final).__name__ == "LogisticRegression" else "raw"


def _kept_outputs(kind: str, arrays: dict[str, np.ndarray]) -> list[int]:
    """A binary classifier explains its positive class once: a forest's trees hold both
    classes' probabilities (which mirror each other), so only the second is kept."""
    count = arrays["leaf_values"].shape[1] if "leaf_values" in arrays else arrays["coef"].shape[0]
    if kind == "binary" and count == 2:
        return [1]
    return list(range(count))


def _select(arrays: dict[str, np.ndarray], keep: list[int]) -> dict[str, np.ndarray]:
    out = dict(arrays)
    if "leaf_values" in out:
        out["leaf_values"] = out["leaf_values"][:, keep]
        out["base"] = out["base"][keep]
    else:
        out["coef"], out["intercept"] = out["coef"][keep], out["intercept"][keep]
    return out
