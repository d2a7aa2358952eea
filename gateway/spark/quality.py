"""``gateway quality report --engine spark``: the label join on Spark, for a payload log (weeks,
partitioned by date, in an object store) that does not fit one process.

The log never comes to the driver: Spark reads it (every file, under the union of their
schemas, as the pandas engine does), joins the labels to it (by prediction id: an equi-join on
the first logged row of each id; by entity and time: per label the latest logged row of its
entity at or before its time, as ``merge_asof(direction="backward")``), and the driver gets the
joined rows only (one per label) with a few aggregates of the whole log (its versions, the
challengers that shadowed it, its time span, its size). From there the report is the pandas
engine's own code (gateway/quality/offline.py): each label's outcome, each version's metrics
and calibration, the notes; so on the same rows both engines give the same report.

Labels come from a file (``read_labels``, the pandas engine's, with its checks); labels read
from a Feast feature view are asked for the log's rows, which is the pandas engine's job.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from feast_access import EVENT_TIMESTAMP
from gateway.payload_log.layout import ANSWERED_BY, LOG_TIMESTAMP, MODEL, VERSION
from gateway.payload_log.sink import open_filesystem
from gateway.quality.offline import (
    ANSWERS,
    CHALLENGER,
    CHALLENGER_MODEL,
    CHALLENGER_VERSION,
    ID,
    PREDICTION_ID,
    SERVED,
    Labels,
    OfflineError,
    OfflineReport,
    _challengers,
    _contracts,
    _quality,
    _served,
    _stand_ins,
    _truths,
    _version_key,
)
from gateway.quality.report import QualityReport

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROW_ID = "__log_row"  # a logged row's id within this run (the join's and the driver's)
ORDER = "__order"  # a label's place in its file
AT_US = "__at_us"  # a label's time, microseconds since the epoch
# Spark's types as the pandas dtypes the pandas engine casts the labels' keys to
_PANDAS = {"bigint": "int64", "int": "int32", "smallint": "int16", "double": "float64", "float": "float32",
           "string": "object", "boolean": "bool"}  # fmt: skip


def _uri(location: str, model: str) -> str:
    """The model's log folder as Spark reads it, refused as the pandas engine refuses it."""
    import pyarrow.fs as pafs

    fs, root = open_filesystem(location)
    folder = f"{root.rstrip('/')}/{model}"
    if fs.get_file_info(folder).type != pafs.FileType.Directory:
        raise OfflineError(f"no payload log of model {model!r} at {location} (no folder {folder})")
    if "://" not in location:
        return folder
    scheme = location.split("://", 1)[0]
    return f"{'s3a' if scheme == 's3' else scheme}://{folder}"


def read_log(spark: SparkSession, location: str, model: str, keys: tuple[str, ...]) -> DataFrame:
    """The model's log with the columns the report reads, each row with its ``ROW_ID``."""
    from pyspark.sql import functions as F

    log = spark.read.option("mergeSchema", "true").parquet(_uri(location, model))
    names = log.columns
    missing = [k for k in keys if k not in names]
    if missing:
        raise OfflineError(
            f"the labels' key column(s) {missing} are not in the payload log of {model!r} "
            f"(its keys and features: {[n for n in names if not n.startswith('__')][:12]})"
        )
    if VERSION not in names or LOG_TIMESTAMP not in names:
        raise OfflineError(f"the payload log of {model!r} has no {VERSION}/{LOG_TIMESTAMP} columns")
    wanted = {
        PREDICTION_ID,
        LOG_TIMESTAMP,
        MODEL,
        VERSION,
        ANSWERED_BY,
        CHALLENGER_MODEL,
        CHALLENGER_VERSION,
        *keys,
    }
    wanted |= {f"__{a}" for a in ANSWERS} | {f"{CHALLENGER}{a}" for a in ANSWERS}
    return log.select(*(F.col(f"`{n}`") for n in names if n in wanted)).withColumn(
        ROW_ID, F.monotonically_increasing_id()
    )


def _matches(spark: SparkSession, log: DataFrame, labels: Labels) -> DataFrame:
    """(ORDER, ROW_ID) of every label that joins a logged row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if labels.by == ID:
        if PREDICTION_ID not in log.columns:
            raise OfflineError(
                f"the payload log has no {PREDICTION_ID} column (rows logged before prediction ids): "
                f"join by entity and time instead (a labels file with the entity keys and {EVENT_TIMESTAMP})"
            )
        asked = spark.createDataFrame(
            pd.DataFrame({ID: labels.frame[ID].astype(object), ORDER: np.arange(len(labels.frame))}),
            f"`{ID}` string, `{ORDER}` bigint",
        )
        first = (  # the first logged row of each id (the pandas engine keeps the first too)
            log.where(F.col(PREDICTION_ID).isNotNull())
            .groupBy(F.col(PREDICTION_ID).cast("string").alias(ID))
            .agg(F.min(ROW_ID).alias(ROW_ID))
        )
        return asked.join(first, on=ID, how="inner").select(ORDER, ROW_ID)
    if labels.by != "entity and time":
        raise OfflineError(
            "labels from a Feast feature view are joined by the pandas engine (--engine pandas)"
        )
    keys = list(labels.keys)
    frame = labels.frame[keys].copy()
    types = dict(log.select(*keys).dtypes)
    for key in keys:
        try:
            frame[key] = frame[key].astype(_PANDAS.get(types[key], "object"))
        except (ValueError, TypeError):
            raise OfflineError(
                f"the labels' {key!r} values are not of the log's type ({types[key]})"
            ) from None
    times = pd.to_datetime(labels.frame[EVENT_TIMESTAMP], utc=True)
    frame[ORDER] = np.arange(len(frame))
    frame[AT_US] = times.astype("datetime64[ns, UTC]").astype("int64") // 1000
    frame = frame[times.notna().to_numpy() & frame[keys].notna().all(axis=1).to_numpy()]
    schema = ", ".join([*(f"`{k}` {types[k]}" for k in keys), f"`{ORDER}` bigint", f"`{AT_US}` bigint"])
    asked = spark.createDataFrame(frame.astype({k: object for k in keys}), schema)
    ids = [PREDICTION_ID] if PREDICTION_ID in log.columns else []
    logged = log.select(*keys, *ids, ROW_ID, F.unix_micros(F.col(LOG_TIMESTAMP)).alias("__log_us"))
    candidates = asked.join(
        logged, on=[*(asked[k] == logged[k] for k in keys), logged["__log_us"] <= asked[AT_US]]
    )
    # Two predictions of one entity at one microsecond (rows of one batch): the later prediction
    # id, then the later row; the pandas engine's merge_asof leaves that tie to an unstable sort.
    order_by = [F.col("__log_us").desc(), *(F.col(i).desc_nulls_last() for i in ids)]
    latest = Window.partitionBy(ORDER).orderBy(*order_by, F.col(ROW_ID).desc())
    return (
        candidates.select(ORDER, ROW_ID, F.row_number().over(latest).alias("_rank"))
        .where("_rank = 1")
        .drop("_rank")
    )


def build_spark(spark: SparkSession, location: str, labels: Labels, repo: Path, model: str) -> OfflineReport:
    """The offline report of ``model`` on Spark: the pandas engine's ``build`` (same report, same
    refusals), with the log read and joined by Spark (see the module docstring)."""
    from pyspark.sql import functions as F

    log = read_log(spark, location, model, labels.keys).persist()
    try:
        inventory = _frame(
            log.groupBy(VERSION, *([ANSWERED_BY] if ANSWERED_BY in log.columns else []))
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.min(LOG_TIMESTAMP).alias("since"),
                F.max(LOG_TIMESTAMP).alias("until"),
            )
            .toPandas()
        )
        if inventory.empty:
            raise OfflineError(f"the payload log of {model!r} at {location} has no rows")
        pairs = _pairs(log)
        matched = _matches(spark, log, labels).persist()
        rows = _frame(log.join(F.broadcast(matched.select(ROW_ID).distinct()), on=ROW_ID).toPandas())
        order = _frame(matched.toPandas())
        matched.unpersist()
    finally:
        log.unpersist()
    return _report(location, labels, repo, model, (inventory, pairs, rows, order))


def _frame(frame: Any) -> pd.DataFrame:
    """Spark's ``toPandas`` as the pandas DataFrame it is (pyspark types it loosely)."""
    assert isinstance(frame, pd.DataFrame)
    return frame


def _pairs(log: DataFrame) -> pd.DataFrame:
    """The challengers (model, version) that shadowed any logged row."""
    from pyspark.sql import functions as F

    if CHALLENGER_MODEL not in log.columns or CHALLENGER_VERSION not in log.columns:
        return pd.DataFrame()
    both = log.where(F.col(CHALLENGER_MODEL).isNotNull() & F.col(CHALLENGER_VERSION).isNotNull())
    return _frame(both.select(CHALLENGER_MODEL, CHALLENGER_VERSION).distinct().toPandas())


def _utc(value: Any) -> Any:
    """A time Spark gave back (naive in the session's UTC, or aware) as an aware UTC datetime."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.to_pydatetime()


def _report(
    location: str, labels: Labels, repo: Path, model: str, parts: tuple[pd.DataFrame, ...]
) -> OfflineReport:
    """The pandas engine's ``build`` from here on, over the joined rows and the aggregates."""
    inventory, pairs, rows, order = parts
    rows = rows.reset_index(drop=True)
    position = pd.Series(rows.index, index=rows[ROW_ID].to_numpy())
    matched = pd.Series(pd.NA, index=range(len(labels.frame)), dtype="Int64")
    if len(order):
        matched.iloc[order[ORDER].to_numpy()] = position.loc[order[ROW_ID].to_numpy()].to_numpy()
    # The pandas engine reads versions and challengers off the whole log: one stand-in row each
    # for those no label joined (their index is no label's, so they are counted in no metric).
    rows[SERVED] = _served(rows, model) if len(rows) else pd.Series(dtype=str)
    inventory[SERVED] = _served(inventory, model)
    extra = [inventory[[VERSION, SERVED]], pairs] if len(pairs) else [inventory[[VERSION, SERVED]]]
    everything = pd.concat([rows, *extra], ignore_index=True)
    own = inventory.loc[inventory[SERVED] == inventory[VERSION].astype(str), VERSION].astype(str)
    versions = sorted(own.unique(), key=_version_key, reverse=True)
    contracts, notes = _contracts(repo, model, versions) if versions else ({}, [])
    stand_ins = _stand_ins(inventory, repo, contracts, notes)
    contracts.update({key: contract for key, (_, _, contract) in stand_ins.items()})
    newest = versions[0] if versions else next(iter(stand_ins))
    truths, outcomes = _truths(rows, labels, matched, contracts, newest)
    if outcomes.counts["accepted"] == 0:
        summary = ", ".join(f"{k} {v}" for k, v in outcomes.counts.items() if v)
        first = next(iter(outcomes.examples.values()), [""])[0]
        raise OfflineError(
            f"no label joined a logged prediction of {model!r} ({summary}){': ' + first if first else ''}"
        )
    out = [
        _quality(rows[rows[SERVED] == v], truths, contracts[v], (model, v, "champion"), "__")
        for v in versions
    ]
    out += [
        _quality(rows[rows[SERVED] == key], truths, contract, (other, version, "champion"), "__")
        for key, (other, version, contract) in stand_ins.items()
    ]
    out += _challengers(everything, truths, repo, contracts[newest], notes)
    since, until = _utc(inventory["since"].min()), _utc(inventory["until"].max())
    window = f"{since:%Y-%m-%dT%H:%M:%SZ}/{until:%Y-%m-%dT%H:%M:%SZ}"
    seconds = math.ceil((until - since).total_seconds())
    report = QualityReport(model, contracts[newest].kind, window, seconds, tuple(out), outcomes.counts)
    log_rows = int(inventory["rows"].sum())
    return OfflineReport(report, location, labels, log_rows, since, until, tuple(notes), outcomes.examples)


def build_with_spark(
    location: str, source: object, repo: Path, model: str, master: str | None
) -> OfflineReport:
    """``gateway quality report --engine spark``: ``build_spark`` on the session (spark-submit's,
    else a local one on ``master``); every refusal an OfflineError, as the pandas engine's."""
    from pyspark.errors import PySparkException

    from gateway.spark.session import SparkUnavailable, spark_session

    if not isinstance(source, Labels) or source.by == "feature view":
        raise OfflineError(
            "--engine spark joins labels from a file (--labels); labels from a Feast feature view are "
            "joined by the pandas engine",
            hint="drop --engine spark, or export the view's labels to a Parquet file",
        )
    try:
        spark = spark_session(master)
    except SparkUnavailable as exc:
        raise OfflineError(str(exc), hint=exc.hint) from None
    try:
        return build_spark(spark, location, source, repo, model)
    except PySparkException as exc:  # a log Spark cannot read (a URL, a permission, a bad file)
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise OfflineError(f"Spark cannot read the payload log at {location}: {first}") from None
