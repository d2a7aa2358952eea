"""Reference statistics of a version's inputs and prediction (docs/drift.md, section 1).

``builder export`` bins the training rows of the run (``serving/reference.parquet``, or
``--reference FILE``) the way the gateway will bin what it serves: numeric columns in at most
10 quantile bins, categorical ones as their top 20 values plus "other", nulls apart, and the
prediction of the exported ONNX graph (what Triton serves) on the same rows. The result is
recorded with the version (metadata.json ``drift``, config parameter ``drift.reference``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from builder.errors import UsageError, first_line
from builder.kinds import ModelKind
from builder.parity.compare import GraphSession
from builder.parity.rows import example_tensors
from builder.registry.run_artifacts import Refusal, fetch_run_artifact
from builder.registry.signature import Column, ModelInputs

FORMAT = 1
RUN_ARTIFACT = "serving/reference.parquet"
MAX_ROWS = 20_000
SEED = 0
TOP_CATEGORIES = 20
QUANTILES = [i / 10 for i in range(1, 10)]
_BATCH = 4096  # rows per onnxruntime call (one session, many calls): bounded memory for wide models
_HINT = "write the model's input columns as the model was trained on them (see support/train.py model_frame)"


@dataclass(frozen=True)
class Drift:
    """What the export records: the reference, or why there is none."""

    reference: dict[str, Any] | None
    reason: str | None = None  # why there is no reference
    prediction_reason: str | None = None  # why a reference has no prediction entry

    def to_metadata(self) -> dict[str, Any]:
        """metadata.json's ``drift``."""
        if self.reference is None:
            return {"reference": None, "reason": self.reason}
        if self.prediction_reason is not None:
            return {"reference": self.reference, "prediction_reason": self.prediction_reason}
        return {"reference": self.reference}

    def parameter(self) -> str | None:
        """The config parameter ``drift.reference``: compact JSON, None without a reference."""
        if self.reference is None:
            return None
        return json.dumps(self.reference, separators=(",", ":"), allow_nan=False)


def numeric_stats(name: str, values: np.ndarray) -> dict[str, Any]:
    """Decile edges (distinct) and counts per bin of ``values`` (float64, NaN = null)."""
    values = np.asarray(values, dtype=np.float64)
    null = np.isnan(values)
    present = values[~null]
    if present.size == 0:
        return {"name": name, "kind": "numeric", "edges": [], "counts": [0], "nulls": int(null.sum())}
    if not np.isfinite(present).all():
        raise UsageError(
            f"reference column {name!r} has infinite values, which no quantile bin can bound",
            hint="replace them (e.g. by NaN, a missing value) in the reference frame",
        )
    edges = np.unique(np.quantile(present, QUANTILES))
    bins = np.searchsorted(edges, present, side="right")
    counts = np.bincount(bins, minlength=len(edges) + 1)
    return {
        "name": name,
        "kind": "numeric",
        "edges": [float(e) for e in edges],
        "counts": [int(c) for c in counts],
        "nulls": int(null.sum()),
    }


def categorical_stats(
    name: str, values: Sequence[Any], categories: Sequence[Any] | None = None
) -> dict[str, Any]:
    """The top categories (or the given ones, in their order) of ``values`` (None = null),
    their counts, then the count of every other value."""
    present = [v for v in values if v is not None]
    counted = Counter(present)
    if categories is None:
        ranked = sorted(counted.items(), key=lambda item: (-item[1], str(item[0])))
        categories = [value for value, _ in ranked[:TOP_CATEGORIES]]
    counts = [counted.get(c, 0) for c in categories]
    return {
        "name": name,
        "kind": "categorical",
        "categories": [_json_value(c) for c in categories],
        "counts": [*counts, len(present) - sum(counts)],
        "nulls": len(values) - len(present),
    }


def _json_value(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def sample(frame: pd.DataFrame) -> pd.DataFrame:
    """At most MAX_ROWS rows, a seeded sample of more (the same rows on every export)."""
    if len(frame) <= MAX_ROWS:
        return frame.reset_index(drop=True)
    return frame.sample(n=MAX_ROWS, random_state=SEED).reset_index(drop=True)


def _described(series: pd.Series) -> str:
    return f"{series.dtype}" if series.dtype != object else "object (" + _kinds(series) + ")"


def _kinds(series: pd.Series) -> str:
    return ", ".join(sorted({type(v).__name__ for v in series.dropna()})) or "empty"


def column_values(series: pd.Series, column: Column, label: str) -> Any:
    """One reference column as the gateway will bin it: float64 with NaN for ``float32`` and
    ``int64``, a list with None for nulls for ``bool`` and ``string``; a column whose type does
    not fit its served dtype is refused, naming it."""
    present = series.dropna()
    kind = column.dtype

    def refuse() -> UsageError:
        return UsageError(
            f"{label}: column {column.name!r} is {_described(series)}, but the model takes it as {kind}",
            hint=_HINT,
        )

    if kind in ("float32", "int64"):
        if series.dtype == object:
            if not all(isinstance(v, int | float | np.number) for v in present):
                raise refuse()
            series = pd.to_numeric(series)
        if pd.api.types.is_bool_dtype(series.dtype) and kind == "float32":
            series = series.astype("float64")  # a boolean column in the matrix layout is 0/1
        if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
            raise refuse()
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        if kind == "float32":
            # Binned as served: the float32 value the model and the gateway see.
            return values.astype(np.float32).astype(np.float64)
        if not np.all(np.isnan(values) | (values == np.round(values))):
            raise refuse()
        return values
    if kind == "bool":
        if not all(isinstance(v, bool | np.bool_) for v in present):
            raise refuse()
        return [None if pd.isna(v) else bool(v) for v in series.astype(object)]
    if not all(isinstance(v, str) for v in present):
        raise refuse()
    # A missing string is "" on the wire (docs/serving-contract.md): a null here too.
    return [None if pd.isna(v) or v == "" else v for v in series.astype(object)]


def compute_reference(
    frame: pd.DataFrame, inputs: ModelInputs, kind: ModelKind, graph: GraphSession, source: str
) -> dict[str, Any]:
    """The reference object of docs/drift.md from ``frame`` (the model's input columns; others
    are ignored), the served columns, the model kind and the exported graph (its session)."""
    missing = [c.name for c in inputs.columns if c.name not in frame.columns]
    if missing:
        raise UsageError(f"{source} lacks the model column(s) {', '.join(missing)}", hint=_HINT)
    frame = sample(frame[[c.name for c in inputs.columns]])
    if frame.empty:
        raise UsageError(f"{source} has no rows", hint=_HINT)
    features, clean = [], {}
    for column in inputs.columns:
        values = column_values(frame[column.name], column, source)
        if column.dtype in ("float32", "int64"):
            features.append(numeric_stats(column.name, values))
        else:
            features.append(categorical_stats(column.name, values))
        clean[column.name] = values
    reference: dict[str, Any] = {
        "format": FORMAT,
        "rows": len(frame),
        "source": source,
        "features": features,
    }
    # The graph is fed the checked values (one dtype per column), not the file's own types.
    prediction = prediction_stats(kind, _predict(pd.DataFrame(clean), inputs, graph, source))
    if prediction is not None:
        reference["prediction"] = prediction
    return reference


def _predict(
    frame: pd.DataFrame, inputs: ModelInputs, graph: GraphSession, source: str
) -> dict[str, np.ndarray]:
    """The graph's outputs on the rows Triton could be sent: an int64 or bool column has no
    missing value on the wire, so rows with a null there are left out of the prediction."""
    exact = [c.name for c in inputs.columns if c.dtype in ("int64", "bool")]
    rows = frame[frame[exact].notna().all(axis=1)] if exact else frame
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, len(rows), _BATCH):
        feeds = example_tensors(rows.iloc[start : start + _BATCH], inputs)
        assert feeds is not None  # every model column is in the frame (checked above)
        try:
            parts.append(graph.run(feeds))
        except Exception as exc:  # onnxruntime refusing these rows
            first = first_line(exc)
            raise UsageError(f"the exported model cannot score the rows of {source}: {first}") from exc
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def no_prediction_reason(kind: ModelKind) -> str | None:
    """Why the reference of a model of this kind records no prediction; None when it does."""
    if kind.kind == "regression" and kind.targets > 1:
        return "a multi-target regressor: prediction drift is per target and not recorded"
    return None


def prediction_stats(kind: ModelKind, outputs: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The prediction's distribution by model kind: binary the probability of ``classes[1]``,
    multiclass (and a classifier without probabilities, whose decision scores have no scale
    shared across models) the predicted class over every class, regression the value, an
    outlier detector its score (the decision function), a clusterer the cluster id over its
    clusters, other and multi-target regressors none (``no_prediction_reason``)."""
    if kind.kind == "other" or no_prediction_reason(kind) is not None:
        return None
    empty = not outputs
    if kind.kind == "outlier":
        scores = np.empty(0) if empty else outputs[kind.outputs["score"]].ravel()
        return numeric_stats("score", scores)
    if kind.kind == "binary" and "probabilities" in kind.outputs:
        probs = np.empty((0, 2)) if empty else outputs[kind.outputs["probabilities"]]
        return numeric_stats("score", probs[:, 1])
    if kind.is_classifier or kind.kind == "cluster":
        labels = [] if empty else [_json_value(v) for v in outputs[kind.outputs["label"]].ravel()]
        # a clusterer's ids are 0..K-1 (its top ids when K is unknown)
        ids = list(range(kind.clusters)) if kind.clusters is not None else None
        categories = list(kind.classes or ()) if kind.is_classifier else ids
        return categorical_stats("label", labels, categories=categories)
    values = np.empty(0) if empty else outputs[kind.outputs["value"]].ravel()
    return numeric_stats("value", values)


def read_frame(path: Path, label: str) -> pd.DataFrame:
    """A reference frame from a Parquet file, or a one-line reason it cannot be read."""
    try:
        return pd.read_parquet(path)
    except FileNotFoundError as exc:
        raise UsageError(f"reference {label} does not exist", hint="pass a Parquet file") from exc
    except Exception as exc:  # pyarrow's errors for a file that is not Parquet, or is truncated
        reason = first_line(exc, 200)
        raise UsageError(f"reference {label} is not a readable Parquet file: {reason}") from exc


def run_reference_file(run_id: str, workdir: Path) -> Path | None:
    """The run's ``serving/reference.parquet``, downloaded into the export's scratch folder;
    None when the run has none."""
    if not run_id:
        return None
    refusal = Refusal(f"cannot download runs:/{run_id}/{RUN_ARTIFACT}")
    return fetch_run_artifact(run_id, RUN_ARTIFACT, workdir / "reference", refusal, optional=True)


@dataclass(frozen=True)
class Source:
    """Where an export's reference rows come from, and what the export needs to score them."""

    run_id: str
    inputs: ModelInputs
    kind: ModelKind
    graph: GraphSession  # the export's one session of the final graph
    reference_file: Path | None  # --reference; None: the run's artifact
    workdir: Path


def drift_for(source: Source) -> tuple[Drift, str | None]:
    """The version's drift record, and a warning when the run has no reference (drift is then
    off for the version, and the export goes on). A bad reference file is refused."""
    if not source.inputs.tabular:
        if source.reference_file is not None:
            raise UsageError(
                f"--reference {source.reference_file}: the model takes tensors, and drift covers "
                "column inputs only (docs/drift.md)"
            )
        return Drift(None, "the model takes tensors (layout tensors); drift covers column inputs"), None
    if source.reference_file is not None:
        path, label = source.reference_file, str(source.reference_file)
    else:
        label = f"runs:/{source.run_id}/{RUN_ARTIFACT}"
        found = run_reference_file(source.run_id, source.workdir)
        if found is None:
            reason = f"the run {source.run_id} has no {RUN_ARTIFACT}"
            return Drift(None, reason), (
                f"drift is off for this version: {reason} "
                f"(log the training frame's model columns there, or pass --reference FILE.parquet)"
            )
        path = found
    frame = read_frame(path, label)
    reference = compute_reference(frame, source.inputs, source.kind, source.graph, label)
    return Drift(reference, prediction_reason=no_prediction_reason(source.kind)), None


def log_reference(frame: pd.DataFrame) -> None:
    """For training code: log ``frame`` (the model's input columns, as fitted) as the active
    MLflow run's ``serving/reference.parquet``, which ``builder export`` bins for drift."""
    import tempfile

    import mlflow

    folder, _, name = RUN_ARTIFACT.rpartition("/")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        frame.to_parquet(path, index=False)
        mlflow.log_artifact(str(path), artifact_path=folder)
