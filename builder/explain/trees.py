"""A tree ensemble as the kernel's arrays (builder/explain/kernel.py): every leaf's path, with
its splits grouped by feature into an interval, a missing-value rule and a cover ratio.

The trees are read through ``shap``'s own ``TreeEnsemble`` (the parser its ``TreeExplainer``
uses for scikit-learn, XGBoost and LightGBM models), so the thresholds, default directions,
covers, leaf values and base offset are the ones shap explains with; LightGBM's per-feature
missing rules, which shap's parser leaves out, are read from the booster's own dump. CatBoost's
oblivious trees are read from its own JSON and expanded to full binary trees by oblivious.py,
which walks them with the same ``leaf_paths``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from builder.errors import ConversionError, first_line

# What the leaf values are, by shap's ``tree_output``; the contract's units of the explanation.
UNITS = {"log_odds": "log_odds", "raw_value": "raw", "probability": "probability"}


@dataclass(frozen=True)
class TreeArrays:
    arrays: dict[str, np.ndarray]
    units: str  # log_odds, probability or raw (a regressor's prediction, a booster's margin)
    outputs: int  # the ensemble's outputs (classes for a multi-output forest or booster)


def import_shap() -> Any:
    """shap, imported with its import-time warnings (matplotlib's deprecations) silenced: they
    are about shap's plotting, which the builder does not use, and warnings are errors in tests."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import shap
        import shap.explainers._tree

    return shap


def _ensemble(model: Any) -> Any:
    import warnings

    shap = import_shap()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shap.explainers._tree.TreeEnsemble(model, model_output="raw")


def tree_arrays(model: Any, what: str, features: int) -> TreeArrays:
    """The kernel's arrays for ``model`` (the final estimator, reading ``features`` columns);
    ``what`` names it in refusals."""
    try:
        ens = _ensemble(model)
    except Exception as exc:  # shap's parser refusing a model it has no TreeExplainer for
        raise ConversionError(
            f"{what} has no exact explainer: shap's TreeExplainer refuses it ({first_line(exc)})",
            hint="export it without --explain (docs/explain.md lists what is covered)",
        ) from exc
    if np.any(ens.threshold_types == 1):
        raise ConversionError(
            f"{what} has categorical splits, which the exact explainer does not cover",
            hint="one-hot encode the categories in a Pipeline step, or export it without --explain",
        )
    limit = ens.tree_limit if ens.tree_limit is not None else ens.values.shape[0]
    paths = []
    for t in range(int(limit)):
        paths += leaf_paths(ens, t)
    arrays = pack_paths(paths, ens.values.shape[2], features)
    offset = _xgboost_intercepts(model, ens.values.shape[2])
    if offset is None:
        offset = np.asarray(ens.base_offset, dtype=np.float64).reshape(-1)
    arrays["base"] = offset + arrays.pop("_expected")
    arrays["input_dtype"] = np.array(np.dtype(ens.input_dtype).name)
    _lightgbm_missing(model, arrays)
    # A booster's objective shap does not name (multi:softprob, multiclass) answers margins.
    return TreeArrays(arrays, UNITS.get(str(ens.tree_output), "raw"), int(ens.values.shape[2]))


def leaf_paths(ens: Any, t: int) -> list[tuple[np.ndarray, dict[int, list[float]]]]:
    """Each leaf of tree ``t``: its values and, per feature on its path, ``[lo, hi, nan_ok, r]``.
    ``ens``: shap's ``TreeEnsemble``, or anything with its per-tree node arrays (a node goes left
    when ``value <= threshold``; a leaf has ``children_left < 0``)."""
    left, right, default = ens.children_left[t], ens.children_right[t], ens.children_default[t]
    feature, threshold, cover = ens.features[t], ens.thresholds[t], ens.node_sample_weight[t]
    values = ens.values[t]
    out = []
    stack: list[tuple[int, dict[int, list[float]]]] = [(0, {})]
    while stack:
        node, path = stack.pop()
        if left[node] < 0:
            out.append((values[node], path))
            continue
        f, thr, parent = int(feature[node]), float(threshold[node]), float(cover[node])
        for child, goes_left in ((int(left[node]), True), (int(right[node]), False)):
            lo, hi, nan_ok, r = path.get(f, [-math.inf, math.inf, 1.0, 1.0])
            ratio = float(cover[child]) / parent if parent > 0 else 0.0
            entry = [
                lo if goes_left else max(lo, thr),
                min(hi, thr) if goes_left else hi,
                nan_ok if int(default[node]) == child else 0.0,
                r * ratio,
            ]
            stack.append((child, {**path, f: entry}))
    return out


def pack_paths(
    paths: list[tuple[np.ndarray, dict[int, list[float]]]], outputs: int, features: int
) -> dict[str, np.ndarray]:
    depth = max((len(p) for _, p in paths), default=0)
    leaves = len(paths)
    feat = np.full((leaves, depth), features, dtype=np.int64)  # padding reads the extra column
    lo = np.full((leaves, depth), np.inf)  # padding: no value lies in (inf, inf]
    hi = np.full((leaves, depth), np.inf)
    nan_ok = np.zeros((leaves, depth), dtype=bool)
    ratio = np.ones((leaves, depth))
    weight = np.zeros((leaves, depth))
    leaf_values = np.zeros((leaves, outputs))
    expected = np.zeros(outputs)
    for i, (value, path) in enumerate(paths):
        leaf_values[i] = value
        m = len(path)
        for d, (f, (a, b, ok, r)) in enumerate(sorted(path.items())):
            feat[i, d], lo[i, d], hi[i, d], nan_ok[i, d], ratio[i, d] = f, a, b, bool(ok), r
        for k in range(m):
            weight[i, k] = math.factorial(k) * math.factorial(m - k - 1) / math.factorial(m)
        expected += value * float(np.prod(ratio[i, :m]))
    return {
        "feat": feat,
        "lo": lo,
        "hi": hi,
        "nan_ok": nan_ok,
        "ratio": ratio,
        "weight": weight,
        "leaf_values": leaf_values,
        "features": np.array(features),
        "_expected": expected,
    }


def _xgboost_intercepts(model: Any, outputs: int) -> np.ndarray | None:
    """A multi-class XGBoost model's per-class intercepts (margins), which shap's parser
    reads as one number: its base value would miss the margin by their spread."""
    get_booster = getattr(model, "get_booster", None)
    booster = get_booster() if get_booster is not None else model
    if type(booster).__module__.split(".")[0] != "xgboost" or outputs < 2:
        return None
    import json

    params = json.loads(booster.save_config())["learner"]["learner_model_param"]
    text = str(params.get("base_score", "")).strip("[]")
    values = [float(v) for v in text.split(",") if v.strip()]
    return np.asarray(values, dtype=np.float64) if len(values) == outputs else None


def _lightgbm_missing(model: Any, arrays: dict[str, np.ndarray]) -> None:
    """LightGBM's missing rules per feature (its ``missing_type``): ``None`` reads NaN as 0,
    ``Zero`` reads 0 as missing, ``NaN`` sends NaN the default way (as shap's parser does)."""
    booster = getattr(model, "booster_", model)
    if type(booster).__module__.split(".")[0] != "lightgbm":
        return
    kinds: dict[int, set[str]] = {}
    stack = [t["tree_structure"] for t in booster.dump_model()["tree_info"]]
    while stack:
        node = stack.pop()
        if "split_index" in node:
            kinds.setdefault(int(node["split_feature"]), set()).add(str(node.get("missing_type", "NaN")))
            stack += [node["left_child"], node["right_child"]]
    features = int(arrays["features"])
    nan_to_zero, zero_to_nan = np.zeros(features, dtype=bool), np.zeros(features, dtype=bool)
    for f, found in kinds.items():
        if len(found) > 1:
            raise ConversionError(
                f"LightGBM model: feature {f} has splits with different missing-value rules {sorted(found)}",
                hint="export it without --explain",
            )
        (kind,) = found
        if f < features:
            nan_to_zero[f], zero_to_nan[f] = kind == "None", kind == "Zero"
    arrays["nan_to_zero"], arrays["zero_to_nan"] = nan_to_zero, zero_to_nan
