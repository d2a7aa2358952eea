"""Which original column each model feature comes from, through a scikit-learn Pipeline.

A SHAP value of a model feature belongs to one column the user sent only where that feature
is computed from that column alone; then the column's value is the sum of its features'
(SHAP values are additive over features, so a one-hot group summed is the column's exact
value, and a per-column scaler or imputer passes it through unchanged). The transforms known
to work column by column are listed here; anything else (PCA, PolynomialFeatures, a
FunctionTransformer, an unknown class) is refused rather than guessed: a column's reason code
must never be an approximation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from builder.errors import ConversionError

# Each output feature computed from the one input column of the same position.
ONE_TO_ONE = {
    "StandardScaler",
    "MinMaxScaler",
    "MaxAbsScaler",
    "RobustScaler",
    "QuantileTransformer",
    "PowerTransformer",
    "OrdinalEncoder",
    "TargetEncoder",  # per column; a multi-class target widens it, checked by the width
}
_HINT = (
    "explanations are per original column, which needs transforms that work column by column "
    "(scalers, imputers, one-hot and ordinal encoders, ColumnTransformer); export without "
    "--explain, or move the mixing step into training"
)


class Refused(ConversionError):
    """A transform whose features mix columns: no exact per-column explanation."""


def split_pipeline(model: Any) -> tuple[Any | None, Any]:
    """``(preprocessing, final estimator)``: the Pipeline's steps before the last (None when
    there are none) and its last step; a bare estimator is ``(None, model)``."""
    steps = getattr(model, "steps", None)
    if not steps:
        return None, model
    from sklearn.pipeline import Pipeline

    pre = [(n, s) for n, s in steps[:-1] if s is not None and s != "passthrough"]
    final = steps[-1][1]
    if hasattr(final, "steps"):  # a Pipeline whose last step is a Pipeline
        inner_pre, final = split_pipeline(final)
        if inner_pre is not None:
            pre.append(("inner", inner_pre))
    return (Pipeline(pre) if pre else None), final


def column_groups(pre: Any | None, columns: Sequence[str], width: int) -> np.ndarray:
    """For each of the ``width`` features the final estimator reads, the index in ``columns``
    (the model's input columns, signature order) of the column it is computed from."""
    sources = list(range(len(columns)))
    fitted_on = getattr(pre, "feature_names_in_", None)
    if fitted_on is not None:  # fitted on a DataFrame: its columns by name, in its own order
        by_name = {c: i for i, c in enumerate(columns)}
        missing = [str(n) for n in fitted_on if str(n) not in by_name]
        if missing:
            raise Refused(f"the preprocessing reads columns {missing} the signature lacks", hint=_HINT)
        sources = [by_name[str(n)] for n in fitted_on]
    if pre is not None:
        sources = _groups(pre, sources, columns)
    if len(sources) != width:
        raise Refused(
            f"the preprocessing yields {len(sources)} features by its fitted state, and the model "
            f"reads {width}: the feature-to-column map cannot be trusted",
            hint=_HINT,
        )
    return np.asarray(sources, dtype=np.int64)


def _groups(step: Any, sources: list[int], columns: Sequence[str]) -> list[int]:
    """The source column of each output feature of ``step`` fed features whose sources are
    ``sources``."""
    if step is None or (isinstance(step, str) and step == "passthrough"):
        return sources
    if isinstance(step, str) and step == "drop":
        return []
    name = type(step).__name__
    if hasattr(step, "steps"):
        for _, sub in step.steps:
            sources = _groups(sub, sources, columns)
        return sources
    if name == "ColumnTransformer":
        return _column_transformer(step, sources, columns)
    if name in ONE_TO_ONE:
        return _same_width(step, sources, name)
    if name == "SimpleImputer":
        return _imputer(step, sources)
    if name == "OneHotEncoder":
        counts = getattr(step, "_n_features_outs", None)
        if counts is None or len(counts) != len(sources):
            raise Refused("cannot read which column each OneHotEncoder output comes from", hint=_HINT)
        return [src for src, n in zip(sources, counts, strict=True) for _ in range(int(n))]
    if name == "KBinsDiscretizer":
        if step.encode == "ordinal":
            return list(sources)
        return [src for src, n in zip(sources, step.n_bins_, strict=True) for _ in range(int(n))]
    raise Refused(f"{name} mixes columns (or is not known to keep them apart)", hint=_HINT)


def _same_width(step: Any, sources: list[int], name: str) -> list[int]:
    width = getattr(step, "n_features_in_", len(sources))
    if width != len(sources) or (name == "TargetEncoder" and len(getattr(step, "classes_", ())) > 2):
        raise Refused(f"{name} does not keep one feature per column here", hint=_HINT)
    return list(sources)


def _imputer(step: Any, sources: list[int]) -> list[int]:
    stats = np.asarray(getattr(step, "statistics_", []))
    kept = list(sources)
    if not getattr(step, "keep_empty_features", False) and stats.dtype.kind == "f" and stats.size:
        kept = [s for s, v in zip(sources, stats, strict=True) if not np.isnan(v)]
    indicator = getattr(step, "indicator_", None)
    if indicator is not None:  # one 0/1 feature per column with missing values, from that column
        kept += [sources[int(i)] for i in indicator.features_]
    return kept


def _column_transformer(ct: Any, sources: list[int], columns: Sequence[str]) -> list[int]:
    selected: dict[str, list[int]] = getattr(ct, "_transformer_to_input_indices", {})
    out: list[tuple[int, list[int]]] = []
    for name, transformer, _ in ct.transformers_:
        picks = selected.get(name)
        if picks is None:
            raise Refused("cannot read which columns a ColumnTransformer step takes", hint=_HINT)
        chunk = ct.output_indices_[name]
        mapped = _groups(transformer, [sources[i] for i in picks], columns)
        if chunk.stop - chunk.start != len(mapped):
            raise Refused(
                f"ColumnTransformer step {name!r} yields {chunk.stop - chunk.start} features, "
                f"and {len(mapped)} are accounted for",
                hint=_HINT,
            )
        out.append((chunk.start, mapped))
    return [src for _, mapped in sorted(out, key=lambda item: item[0]) for src in mapped]
