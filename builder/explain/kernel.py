"""Exact SHAP values over arrays, numpy only: the code the Triton explainer model runs.

This module is copied as it is into the explainer's version folder and imported by its
``model.py`` in Triton's Python-backend environment (numpy 1.26, no project package), and
imported by the builder at export to check the explainer against ``shap`` before anything is
written: one implementation, checked where it is built and run where it is served. It uses only
numpy APIs that numpy 1.26 and 2.x share.

Trees (``tree_path_dependent`` TreeSHAP). For one leaf ``l`` with value ``v`` whose path
splits on the features ``P`` (``m`` of them, a feature split on twice counted once), the
path-dependent expectation ``E[f | x_S]`` restricted to that leaf is a product game:
``v * prod_{j in P} (s_j if j in S else r_j)``, where ``s_j`` is 1 when the row satisfies every
split on ``j`` along the path (an interval ``lo < x_j <= hi``, or the default direction for a
missing value) and ``r_j`` is the product of the cover fractions of those splits. The Shapley
value of a product game is closed: ``phi_i = v (s_i - r_i) sum_k w(k, m) [t^k] prod_{j != i}
(s_j t + r_j)`` with ``w(k, m) = k! (m-k-1)! / m!``. Summed over every leaf of every tree it
is TreeSHAP's answer (Lundberg et al. 2020, Algorithm 2, which computes the same polynomial
with its extend/unwind steps), so it is exact, not an approximation. Here it is computed for
all leaves at once: the polynomial ``G = prod_j (s_j t + r_j)`` in ``D`` steps, then divided by
each slot's own factor (``t + r_i`` or ``r_i``) in ``D`` more.

Linear models (``shap.LinearExplainer`` with an independent masker, interventional):
``phi_i = coef_i (x_i - mean_i)``, base ``intercept + coef . mean``.
"""

from __future__ import annotations

import numpy as np

# The arrays an explainer is made of (explainer.npz), by kind.
TREE_ARRAYS = ("feat", "lo", "hi", "nan_ok", "ratio", "weight", "leaf_values", "base", "groups")
LINEAR_ARRAYS = ("coef", "mean", "intercept", "groups")


# Rows are explained in chunks whose working arrays (rows x leaves x depth) stay near this many
# float64 values (~32 MB each): a batch of 64 rows of a 500-tree model would otherwise need GBs.
_CHUNK_VALUES = 4_000_000


def tree_shap(arrays: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SHAP values ``(rows, features, outputs)`` and base values ``(rows, outputs)`` of the
    model's features ``x`` (rows, features), float64, NaN for missing."""
    leaves, depth = arrays["feat"].shape
    step = max(1, _CHUNK_VALUES // max(1, leaves * (depth + 1)))
    if x.shape[0] <= step:
        return _tree_shap(arrays, x)
    parts = [_tree_shap(arrays, x[i : i + step]) for i in range(0, x.shape[0], step)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _tree_shap(arrays: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    feat, lo, hi = arrays["feat"], arrays["lo"], arrays["hi"]
    nan_ok, ratio, weight = arrays["nan_ok"], arrays["ratio"], arrays["weight"]
    values = arrays["leaf_values"]  # (leaves, outputs)
    n, features = x.shape
    leaves, depth = feat.shape
    outputs = values.shape[1]
    # One extra column, always 0, that padding slots read (their interval excludes every value,
    # so a padding slot is an unsatisfied split with ratio 1: a factor of 1 in every product).
    padded = np.zeros((n, features + 1), dtype=np.float64)
    padded[:, :features] = x
    xs = padded[:, feat]  # (n, leaves, depth)
    with np.errstate(invalid="ignore"):
        hit = ((xs > lo) & (xs <= hi)) | (np.isnan(xs) & nan_ok)
    s = hit.astype(np.float64)
    # G(t) = prod_d (s_d t + r_d), coefficients 0..depth
    g = np.zeros((n, leaves, depth + 1), dtype=np.float64)
    g[:, :, 0] = 1.0
    for d in range(depth):
        r_d = ratio[:, d][None, :, None]
        s_d = s[:, :, d][:, :, None]
        shifted = g[:, :, :-1] * s_d
        g *= r_d
        g[:, :, 1:] += shifted
    # Per slot i: H_i = G / (s_i t + r_i), and sum_k w(k, m) H_i[k]. Both divisions for every
    # slot at once; the one that applies is kept. Top-down synthetic division by (t + r) with
    # 0 <= r <= 1 is stable; dividing by r == 0 happens only for an unsatisfied slot of a leaf
    # no row reaches in expectation, whose terms are all 0.
    r = ratio[None, :, :]
    safe = np.where(ratio > 0, ratio, 1.0)[None, :, :]
    total_hit = np.zeros((n, leaves, depth), dtype=np.float64)
    total_miss = np.zeros((n, leaves, depth), dtype=np.float64)
    h = np.repeat(g[:, :, depth][:, :, None], depth, axis=2)  # H[depth-1]
    for k in range(depth - 1, -1, -1):
        w_k = weight[:, k][None, :, None]
        total_hit += w_k * h
        total_miss += w_k * (g[:, :, k][:, :, None] / safe)
        if k > 0:
            h = g[:, :, k][:, :, None] - r * h
    total = np.where(hit, total_hit, np.where(ratio[None] > 0, total_miss, 0.0))
    contrib = (s - r) * total  # (n, leaves, depth), in units of each leaf's value
    order, starts, present = arrays["_order"], arrays["_starts"], arrays["_present"]
    flat = contrib.reshape(n, leaves * depth)[:, order]
    slot_values = arrays["_slot_values"]  # (leaves * depth, outputs), in `order`
    phi = np.zeros((n, features + 1, outputs), dtype=np.float64)
    if flat.shape[1]:
        phi[:, present, :] = np.add.reduceat(flat[:, :, None] * slot_values[None], starts, axis=1)
    base = np.broadcast_to(arrays["base"], (n, outputs)).copy()
    return phi[:, :features, :], base


def prepare(arrays: dict) -> dict:
    """The run-time indexes (slots ordered by feature) computed once when the model loads."""
    out = dict(arrays)
    if "feat" not in arrays:
        return out
    feat, values = arrays["feat"], arrays["leaf_values"]
    _leaves, depth = feat.shape
    flat = feat.reshape(-1)
    order = np.argsort(flat, kind="stable")
    sorted_feat = flat[order]
    starts = np.flatnonzero(np.r_[True, sorted_feat[1:] != sorted_feat[:-1]]) if flat.size else flat
    out["_order"] = order
    out["_starts"] = starts
    out["_present"] = sorted_feat[starts]
    out["_slot_values"] = np.repeat(values, depth, axis=0)[order]
    return out


def linear_shap(arrays: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``coef (outputs, features)``, ``mean (features,)``, ``intercept (outputs,)``."""
    coef, mean, intercept = arrays["coef"], arrays["mean"], arrays["intercept"]
    phi = (x - mean)[:, :, None] * coef.T[None, :, :]
    base = np.broadcast_to(intercept + coef @ mean, (x.shape[0], coef.shape[0])).copy()
    return phi, base


def explain(arrays: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SHAP values per original column ``(rows, columns, outputs)`` and the base values
    ``(rows, outputs)`` of the model's features ``x``; ``arrays`` as ``prepare`` left them."""
    x = _condition(arrays, x)
    phi, base = tree_shap(arrays, x) if "feat" in arrays else linear_shap(arrays, x)
    groups = arrays["groups"]  # (features,): the original column each feature comes from
    columns = int(arrays["columns"])
    out = np.zeros((phi.shape[0], columns, phi.shape[2]), dtype=np.float64)
    for f in range(groups.shape[0]):  # a few dozen features at most; one add each
        out[:, groups[f], :] += phi[:, f, :]
    return out, base


def _condition(arrays: dict, x: np.ndarray) -> np.ndarray:
    """The features as the model compares them: cast to its input dtype (scikit-learn's trees
    and XGBoost compare float32 values), and LightGBM's per-feature missing rules (NaN read as
    0 where the feature saw no missing value in training; 0 read as missing where it treats
    zero as missing)."""
    x = np.asarray(x, dtype=str(arrays["input_dtype"])).astype(np.float64)
    nan_to_zero = arrays.get("nan_to_zero")
    if nan_to_zero is not None and nan_to_zero.any():
        x[:, nan_to_zero] = np.where(np.isnan(x[:, nan_to_zero]), 0.0, x[:, nan_to_zero])
    zero_to_nan = arrays.get("zero_to_nan")
    if zero_to_nan is not None and zero_to_nan.any():
        sub = x[:, zero_to_nan]
        x[:, zero_to_nan] = np.where(np.abs(sub) <= 1e-35, np.nan, sub)
    return x
