"""CatBoost's oblivious (symmetric) trees as the kernel's arrays (builder/explain/kernel.py).

CatBoost explains itself (``get_feature_importance(type="ShapValues")``, what ``shap``'s
TreeExplainer answers with for a CatBoost model) by path-dependent TreeSHAP over each oblivious
tree expanded to a full binary tree whose root is the tree's **last** split (the leaf index's
highest bit) and whose node covers are the sums of the leaf weights below them. The same
expansion is built here from the model's JSON (``save_model(format="json")``) and walked by the
common path walk (trees.py), so the values are CatBoost's own (checked at every export):

- a float split sends a row right when ``value > border``, compared in float32 as CatBoost does:
  left is ``value <= border``, the kernel's intervals;
- a missing value goes where its feature's ``nan_value_treatment`` says: ``AsTrue`` right
  (``nan_mode="Max"``), ``AsFalse`` (``"Min"``) and ``AsIs`` (``"Forbidden"``, or a feature with
  no NaN in training: ``NaN > border`` is false) left;
- leaf ``l`` of a depth-``d`` tree holds ``leaf_values[l * k : (l + 1) * k]`` (``k`` outputs: one
  for Logloss, CrossEntropy and the regression losses, one per class for MultiClass), and bit
  ``i`` of ``l`` is split ``i``'s answer;
- the raw output is ``scale * sum(leaf values) + bias`` (``scale_and_bias``).

Refused: categorical features (one-hot and CTR splits, feature combinations: their splits test
categories and statistics learned from the targets, not a threshold on one column), text and
embedding features (splits on computed features), and non-symmetric trees (``grow_policy``
Depthwise/Lossguide, which CatBoost's ONNX export refuses before this is reached).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from builder.errors import ConversionError, first_line
from builder.explain.trees import TreeArrays, leaf_paths, pack_paths

# Losses whose raw output is the log-odds of the positive class; the others' is a margin per
# class (MultiClass) or the prediction (the regression losses).
_LOG_ODDS_LOSSES = ("Logloss", "CrossEntropy")
_HINT = "export it without --explain (docs/explain.md lists what is covered)"


def is_catboost(model: Any) -> bool:
    return type(model).__module__.split(".")[0] == "catboost"


def catboost_arrays(model: Any, what: str, features: int) -> TreeArrays:
    """The kernel's arrays for a CatBoost model reading ``features`` float columns."""
    _refuse_non_float(model, what)
    doc = _model_json(model, what)
    if "oblivious_trees" not in doc:
        raise ConversionError(
            f"{what} has non-symmetric trees (grow_policy Depthwise or Lossguide), which the exact "
            "explainer does not cover",
            hint="train with grow_policy='SymmetricTree' (the default), or " + _HINT,
        )
    floats = {int(f["feature_index"]): f for f in doc.get("features_info", {}).get("float_features", [])}
    scale, bias = doc.get("scale_and_bias", [1.0, [0.0]])
    bias = np.asarray(bias, dtype=np.float64).reshape(-1)
    trees = doc["oblivious_trees"]
    outputs = _outputs(trees, bias)
    if bias.size == 1 and outputs > 1:
        bias = np.full(outputs, bias[0])
    expanded = SimpleNamespace(
        children_left=[],
        children_right=[],
        children_default=[],
        features=[],
        thresholds=[],
        node_sample_weight=[],
        values=[],
    )
    layout = _Layout(floats, outputs, float(scale), features, what)
    for index, tree in enumerate(trees):
        _expand(tree, index, layout, expanded)
    paths = []
    for t in range(len(trees)):
        paths += leaf_paths(expanded, t)
    arrays = pack_paths(paths, outputs, features)
    arrays["base"] = bias + arrays.pop("_expected")
    arrays["input_dtype"] = np.array("float32")  # CatBoost compares float32 values with its borders
    units = "log_odds" if _loss(model) in _LOG_ODDS_LOSSES else "raw"
    return TreeArrays(arrays, units, outputs)


def catboost_unscaled(model: Any) -> tuple[Any, float, np.ndarray]:
    """``model`` with scale 1, its scale and its bias: CatBoost's ShapValues refuses a model
    whose scale is not 1 (``set_scale_and_bias``), whose values are the unscaled model's times
    the scale (SHAP values are linear in the leaf values), base ``scale * (base - bias) + bias``."""
    if not is_catboost(model):
        return model, 1.0, np.zeros(1)
    scale, bias = model.get_scale_and_bias()
    if float(scale) == 1.0:
        return model, 1.0, np.zeros(1)
    unscaled = model.copy()
    unscaled.set_scale_and_bias(1.0, bias)
    return unscaled, float(scale), np.asarray(bias, dtype=np.float64).reshape(-1)


def _refuse_non_float(model: Any, what: str) -> None:
    for kind, method in (
        ("categorical", "get_cat_feature_indices"),
        ("text", "get_text_feature_indices"),
        ("embedding", "get_embedding_feature_indices"),
    ):
        indices = list(getattr(model, method)())
        if indices:
            names = list(getattr(model, "feature_names_", None) or [])
            shown = ", ".join(repr(names[i]) if i < len(names) else str(i) for i in indices[:5])
            raise ConversionError(
                f"{what} has {kind} features ({shown}), whose splits are not thresholds on one column "
                "(categories, CTR statistics, feature combinations): no exact per-column SHAP values",
                hint="encode them as numbers before the model and train without "
                "cat_features/text_features/embedding_features, or " + _HINT,
            )


def _model_json(model: Any, what: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="builder-explain-catboost-") as tmp:
        path = Path(tmp) / "model.json"
        try:
            model.save_model(str(path), format="json")
            found: dict[str, Any] = json.loads(path.read_text())
        except Exception as exc:  # CatBoostError, with CatBoost's reason
            raise ConversionError(
                f"{what}: CatBoost cannot write its trees for the explainer: {first_line(exc, 200)}",
                hint=_HINT,
            ) from exc
    return found


def _outputs(trees: list[dict[str, Any]], bias: np.ndarray) -> int:
    """Values per leaf: one, or one per class (MultiClass)."""
    for tree in trees:
        leaves = 2 ** len(tree["splits"])
        return max(1, len(tree["leaf_values"]) // leaves)
    return int(bias.size)


@dataclass(frozen=True)
class _Layout:
    """What every tree of one model is read with."""

    floats: dict[int, dict[str, Any]]  # float_feature_index -> CatBoost's features_info entry
    outputs: int
    scale: float
    features: int
    what: str


def _expand(tree: dict[str, Any], index: int, layout: _Layout, into: SimpleNamespace) -> None:
    """Tree ``index`` as a full binary tree in heap order (node ``n``'s children ``2n+1``,
    ``2n+2``), split ``depth - 1 - level`` at each level, covers from the leaf weights."""
    floats, outputs, features, what = layout.floats, layout.outputs, layout.features, layout.what
    splits = tree["splits"]
    depth = len(splits)
    leaves = 2**depth
    if "leaf_weights" not in tree or len(tree["leaf_weights"]) != leaves:
        raise ConversionError(
            f"{what}: tree {index} has no leaf weights, which path-dependent TreeSHAP needs as covers",
            hint=_HINT,
        )
    values = np.asarray(tree["leaf_values"], dtype=np.float64)
    if values.size != leaves * outputs:
        raise ConversionError(
            f"{what}: tree {index} has {values.size} leaf values for {leaves} leaves x {outputs} outputs",
            hint=_HINT,
        )
    nodes, first_leaf = 2 * leaves - 1, leaves - 1
    left = np.full(nodes, -1, dtype=np.int64)
    right = np.full(nodes, -1, dtype=np.int64)
    default = np.full(nodes, -1, dtype=np.int64)
    feature = np.zeros(nodes, dtype=np.int64)
    threshold = np.zeros(nodes, dtype=np.float64)
    cover = np.zeros(nodes, dtype=np.float64)
    node_values = np.zeros((nodes, outputs), dtype=np.float64)
    cover[first_leaf:] = np.asarray(tree["leaf_weights"], dtype=np.float64)
    node_values[first_leaf:] = values.reshape(leaves, outputs) * layout.scale
    for node in range(first_leaf - 1, -1, -1):
        level = (node + 1).bit_length() - 1
        split = splits[depth - 1 - level]
        if split.get("split_type") != "FloatFeature" or int(split["float_feature_index"]) not in floats:
            raise ConversionError(
                f"{what}: tree {index} splits on {split.get('split_type')!r}, not a float feature",
                hint=_HINT,
            )
        info = floats[int(split["float_feature_index"])]
        f = int(info["flat_feature_index"])
        if f >= features:
            raise ConversionError(
                f"{what}: tree {index} reads feature {f}, past the {features} it takes", hint=_HINT
            )
        left[node], right[node] = 2 * node + 1, 2 * node + 2
        default[node] = right[node] if info.get("nan_value_treatment") == "AsTrue" else left[node]
        feature[node] = f
        threshold[node] = float(np.float32(split["border"]))
        cover[node] = cover[left[node]] + cover[right[node]]
    into.children_left.append(left)
    into.children_right.append(right)
    into.children_default.append(default)
    into.features.append(feature)
    into.thresholds.append(threshold)
    into.node_sample_weight.append(cover)
    into.values.append(node_values)


def _loss(model: Any) -> str:
    return str(model.get_all_params().get("loss_function", "")).split(":")[0]
