"""One served batch's sampled rows as an Arrow table in Feast's feature-logging layout.

Feast's feature server logs a feature service's rows with the columns
``feast.feature_logging.FeatureServiceLoggingSource.get_schema`` lists: each join key, then per
feature ``{view}__{feature}``, ``{view}__{feature}__timestamp`` and ``{view}__{feature}__status``
(``FieldStatus``: 1 PRESENT, 3 NOT_FOUND), then ``__log_timestamp``, ``__log_date`` and
``__request_id`` (the id the gateway returned with the answer). We write the same, so Feast's
monitoring (pointed at the folder as a ``FileLoggingDestination``) and any Parquet reader
(pandas, Evidently, DuckDB) read it, plus:

- request-time fields under their own names (as Feast names a request source's fields);
- our prediction columns: ``__model``, ``__model_version``, ``__answered_by`` (the model that
  answered) and ``__fallback`` (true while the model is switched to its fallback,
  gateway/fallback/: ``__answered_by``/``__model_version`` then name the fallback), and by
  kind ``__score`` (binary, outlier), ``__label`` (classifiers, the class value in its own
  type; outlier, -1 or 1; cluster, the cluster id), ``__distances`` (cluster),
  ``__probabilities`` (classifiers, in ``classes`` order), ``__scores`` (classifiers without
  probabilities: decision-function values), ``__value`` (regression), ``__values`` (regression
  with several targets), ``__outlier`` (outlier), and ``__defaults_used``;
- ``__prediction_id``, the id returned with each prediction (``{request id}-{row}``), which
  labels name (gateway/quality/);
- with shadow traffic (gateway/shadow/), the challenger's answer beside the champion's:
  ``__challenger_model``, ``__challenger_version`` and ``__challenger_score`` (``_label``,
  ``_probabilities``, ...), null in rows it did not answer.

Values are what the model was sent (float32 in the matrix layout), except that a missing online
value is null with status NOT_FOUND, where Triton got its stand-in (NaN, ``""``). ``__log_date``
(UTC) is a column of every file, as in Feast's schema, and also the Hive partition folder
``log_date=YYYY-MM-DD`` (gateway/payload_log/sink.py says why not ``__log_date=``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gateway.catalog import ModelSpec
from gateway.observe import ChallengerAnswer, Observation
from gateway.responses import Prediction

PRESENT: Final = 1  # feast.protos.feast.serving.ServingService_pb2.FieldStatus
NOT_FOUND: Final = 3
LOG_TIMESTAMP: Final = "__log_timestamp"  # feast.feature_logging.LOG_TIMESTAMP_FIELD
LOG_DATE: Final = "__log_date"  # feast.feature_logging.LOG_DATE_FIELD
REQUEST_ID: Final = "__request_id"  # feast.feature_logging.REQUEST_ID_FIELD
CHALLENGER_MODEL: Final = "__challenger_model"
CHALLENGER_VERSION: Final = "__challenger_version"
PREDICTION_ID: Final = "__prediction_id"  # the id the caller got with the prediction
MODEL: Final = "__model"
VERSION: Final = "__model_version"
ANSWERED_BY: Final = "__answered_by"  # the model that answered: a fallback may be another
FALLBACK: Final = "__fallback"  # the row was served by the model's fallback (gateway/fallback/)
TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")

_ARROW: Final = {"float32": pa.float32(), "int64": pa.int64(), "bool": pa.bool_(), "string": pa.string()}


def feature_column(view: str, feature: str) -> str:
    """The log column of an online feature, as Feast's feature logging names it."""
    return f"{view}__{feature}"


def log_date(epoch_s: float) -> dt.date:
    """The UTC day a row logged at ``epoch_s`` belongs to (its ``__log_date`` and folder)."""
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).date()


def hash_key(salt: bytes, value: object) -> str:
    """An entity key as the log keeps it when hashing is on: HMAC-SHA256(salt, str(value)), hex."""
    return hmac.new(salt, str(value).encode(), hashlib.sha256).hexdigest()


def to_table(
    observation: Observation,
    rows: np.ndarray,
    views: Mapping[str, str],
    salt: bytes | None,
    explanations: bool = False,
) -> pa.Table:
    """The ``rows`` (indices) of ``observation`` as log rows; ``views`` maps each online
    feature to its view's name (``OnlineFeatures.feature_views``); ``salt`` hashes the keys;
    ``explanations`` adds the reason codes predictions were asked for."""
    spec = observation.spec
    n = len(rows)
    columns: dict[str, pa.Array] = {}
    picked = [observation.entity_rows[i] for i in rows]
    for key in spec.entity_keys:
        values = [r[key.name] for r in picked]
        if salt is None:
            columns[key.name] = pa.array(values, type=_ARROW[key.dtype])
        else:
            columns[key.name] = pa.array([hash_key(salt, v) for v in values], type=pa.string())
    for name in spec.online_features:
        column = feature_column(views.get(name, spec.feature_service), name)
        values, missing = _served(spec, observation.column(name)[rows], spec.dtype(name))
        columns[column] = pa.array(values, type=_ARROW[spec.dtype(name)], mask=missing)
        times = observation.feature_times.get(name)
        picked_times = [times[i] or None for i in rows] if times is not None else [None] * n
        columns[f"{column}__timestamp"] = pa.array(
            [None if t is None else int(t * 1_000_000) for t in picked_times], type=pa.int64()
        ).cast(TIMESTAMP_TYPE)
        columns[f"{column}__status"] = pa.array(np.where(missing, NOT_FOUND, PRESENT).astype(np.int32))
    for name in spec.request_fields:
        values, _ = _served(spec, observation.column(name)[rows], spec.dtype(name))
        columns[name] = pa.array(values, type=_ARROW[spec.dtype(name)])
    columns[MODEL] = pa.array([spec.name] * n, type=pa.string())
    columns[VERSION] = pa.array([observation.version] * n, type=pa.string())
    columns[ANSWERED_BY] = pa.array([spec.answered_by or spec.name] * n, type=pa.string())
    columns[FALLBACK] = pa.array([bool(spec.answered_by)] * n, type=pa.bool_())
    columns.update(_predictions(spec, [observation.predictions[i] for i in rows]))
    if explanations:
        columns.update(_explanations([observation.predictions[i] for i in rows]))
    if observation.challenger is not None:
        columns.update(_challenger(observation.challenger, rows))
    at = int(observation.at * 1_000_000)
    columns[LOG_TIMESTAMP] = pa.array(np.full(n, at, dtype=np.int64)).cast(TIMESTAMP_TYPE)
    columns[LOG_DATE] = pa.array([log_date(observation.at)] * n, type=pa.date32())
    if observation.prediction_ids:
        ids = np.asarray(observation.prediction_ids, dtype=object)[rows]
        columns[REQUEST_ID] = pa.array([i.rpartition("-")[0] for i in ids], type=pa.string())
        columns[PREDICTION_ID] = pa.array(ids, type=pa.string())
    else:
        columns[REQUEST_ID] = pa.array(_request_ids(observation)[rows], type=pa.string())
    return pa.table(columns)


def _served(spec: ModelSpec, values: np.ndarray, dtype: str) -> tuple[Any, np.ndarray]:
    """Values as served, and which were the stand-in for a missing one (NaN, or "" for strings)."""
    if dtype == "float32":
        array = np.asarray(values, dtype=np.float32)
        return array, np.isnan(array)
    if dtype == "string":
        listed = [v.decode() if isinstance(v, bytes) else str(v) for v in values]
        return listed, np.array([v == "" for v in listed], dtype=bool)
    return np.asarray(values), np.zeros(len(values), dtype=bool)  # int64/bool are never missing


_REASON: Final = pa.struct([("column", pa.string()), ("value", pa.string()), ("contribution", pa.float64())])


def _explanations(predictions: Sequence[Prediction]) -> dict[str, pa.Array]:
    """The reason codes of the predictions that asked (``explain``), null in the others:
    ``__explanation_reasons`` (column, the value as text, contribution; largest first),
    ``__explanation_base_value``, ``__explanation_raw_score`` and ``__explanation_explains``."""
    found = [p.explanation for p in predictions]
    reasons = [
        None
        if e is None
        else [
            {
                "column": r.column,
                "value": None if r.value is None else str(r.value),
                "contribution": r.contribution,
            }
            for r in e.reasons
        ]
        for e in found
    ]
    return {
        "__explanation_explains": pa.array(
            [None if e is None else str(e.explains) for e in found], pa.string()
        ),
        "__explanation_base_value": pa.array(
            [None if e is None else e.base_value for e in found], pa.float64()
        ),
        "__explanation_raw_score": pa.array(
            [None if e is None else e.raw_score for e in found], pa.float64()
        ),
        "__explanation_reasons": pa.array(reasons, type=pa.list_(_REASON)),
    }


def _challenger(answer: ChallengerAnswer, rows: np.ndarray) -> dict[str, pa.Array]:
    """The challenger's answers (shadow traffic) beside the champion's: ``__challenger_model``,
    ``__challenger_version`` and its prediction columns named as the champion's with the
    ``__challenger_`` prefix; null in the rows it did not answer (not mirrored, dropped, failed)."""
    picked = [answer.predictions[i] for i in rows]
    answered = pa.array([p is not None for p in picked], type=pa.bool_())
    stand_in = Prediction(False)
    columns = {
        CHALLENGER_MODEL: pa.array([answer.spec.name] * len(picked), type=pa.string()),
        CHALLENGER_VERSION: pa.array([answer.version] * len(picked), type=pa.string()),
    }
    for name, column in _predictions(answer.spec, [p or stand_in for p in picked]).items():
        if name != "__defaults_used":  # the champion's inputs: the same rows, the same stand-ins
            columns[f"__challenger_{name[2:]}"] = column
    return {
        name: pc.if_else(answered, column, pa.nulls(len(picked), column.type))
        for name, column in columns.items()
    }


def _request_ids(observation: Observation) -> np.ndarray:
    """One id per request the batch served, repeated over that request's rows."""
    sizes = observation.request_rows or (observation.rows,)
    return np.repeat(np.array([uuid.uuid4().hex for _ in sizes], dtype=object), sizes)


def _label_type(spec: ModelSpec) -> pa.DataType:
    classes = spec.classes or ()
    for kind, arrow in ((bool, pa.bool_()), (int, pa.int64()), (float, pa.float64())):
        if classes and all(type(c) is kind for c in classes):
            return arrow
    return pa.string()


def _predictions(spec: ModelSpec, predictions: Sequence[Any]) -> dict[str, pa.Array]:
    out: dict[str, pa.Array] = {}
    probabilities = spec.roles.probabilities is not None or spec.legacy
    if (spec.kind == "binary" and probabilities) or spec.kind == "outlier":
        out["__score"] = pa.array([p.score for p in predictions], type=pa.float64())
    if spec.kind == "outlier":
        out["__label"] = pa.array([p.label for p in predictions], type=pa.int64())
        out["__outlier"] = pa.array([p.outlier for p in predictions], type=pa.bool_())
    if spec.kind in ("binary", "multiclass"):
        label = _label_type(spec)
        labels = [p.label for p in predictions]
        out["__label"] = pa.array(
            [None if v is None else str(v) for v in labels] if label == pa.string() else labels, type=label
        )
        if probabilities:
            out["__probabilities"] = pa.array(
                [list(p.probabilities) for p in predictions], type=pa.list_(pa.float64())
            )
        else:
            scores = [list(p.scores or ()) for p in predictions]
            out["__scores"] = pa.array(scores, type=pa.list_(pa.float64()))
    if spec.kind == "cluster":
        out["__label"] = pa.array([p.label for p in predictions], type=pa.int64())
        if spec.roles.distances is not None:
            distances = [None if p.distances is None else list(p.distances) for p in predictions]
            out["__distances"] = pa.array(distances, type=pa.list_(pa.float64()))
    if spec.kind == "regression" and spec.targets == 1:
        out["__value"] = pa.array([p.value for p in predictions], type=pa.float64())
    if spec.kind == "regression" and spec.targets > 1:
        out["__values"] = pa.array([list(p.values or ()) for p in predictions], type=pa.list_(pa.float64()))
    out["__defaults_used"] = pa.array([p.defaults_used for p in predictions], type=pa.bool_())
    return out
