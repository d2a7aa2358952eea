"""``gateway skew-check --payload-log … --engine spark``: the rows the gateway served, checked
on Spark against the training path, for windows of the log no one process holds.

The rows of the window (every one, or ``--sample`` of them drawn by Spark) keep what the model
was sent (the logged ``{view}__{feature}`` columns, request fields under their names); their
features are joined again at each row's ``__log_timestamp`` by Feast's point-in-time rule over
the views' offline sources (feast_access/spark_join.py, the rule ``builder score`` joins by and
tested against Feast's ``get_historical_features``); each value is compared on the executors by
the pandas engine's own rule (gateway/skew.py ``_same``: numbers within ``rtol`` as float32,
strings exactly, a logged null as its stand-in), and only the mismatches come back. The report
is the pandas engine's ``SkewReport``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from feast_access.offline import OfflineView
from gateway.catalog import ModelSpec
from gateway.payload_log.layout import LOG_TIMESTAMP, feature_column
from gateway.skew import SkewInputError, SkewReport, _plain, _same, _stand_in

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SERVED = "__served__"
TRAINED = "__trained__"
AT = "__at"
HASHED = "^[0-9a-f]{64}$"  # a key the payload log hashed (gateway/skew.py's rule)


@dataclass(frozen=True)
class LoggedWindow:
    """Which logged rows to check: the model's, ``since <= __log_timestamp < until``."""

    location: str
    model: str
    since: dt.datetime
    until: dt.datetime
    sample: int | None = None  # at most this many rows (drawn by Spark with ``seed``); None: all
    seed: int = 0


@dataclass(frozen=True)
class Checked:
    """The model as the check reads it: its spec, its features' views (feature -> view name,
    as the log names its columns) and the service's offline sources."""

    spec: ModelSpec
    views: dict[str, str]
    offline: list[OfflineView]


def _folder(window: LoggedWindow) -> str:
    location, model = window.location, window.model
    if "://" in location:
        scheme, rest = location.split("://", 1)
        return f"{'s3a' if scheme == 's3' else scheme}://{rest.rstrip('/')}/{model}"
    from pathlib import Path

    folder = Path(location).expanduser().resolve() / model
    if not folder.is_dir():
        raise SkewInputError(f"no payload log of model {model!r} at {location} (no folder {folder})")
    return str(folder)


def logged_rows(spark: SparkSession, window: LoggedWindow, model: Checked) -> DataFrame:
    """The window's rows: the entity keys (as the store's types), the time, and what each model
    column was sent as (``SERVED`` + name); SkewInputError for a log the check cannot use."""
    from pyspark.sql import functions as F

    log = spark.read.option("mergeSchema", "true").parquet(_folder(window))
    since, until = (pd.Timestamp(t).tz_convert("UTC").to_pydatetime() for t in (window.since, window.until))
    log = log.where((F.col(LOG_TIMESTAMP) >= F.lit(since)) & (F.col(LOG_TIMESTAMP) < F.lit(until)))
    where = f"the payload log at {window.location}"
    spec = model.spec
    columns = []
    for column in spec.columns:
        name = column.name
        logged = name if name in spec.request_fields else feature_column(model.views.get(name, ""), name)
        if logged not in log.columns:
            raise SkewInputError(f"{where} has no column {logged} (model {spec.name!r} input {name})")
        columns.append(F.col(f"`{logged}`").alias(SERVED + name))
    missing = [k.name for k in spec.entity_keys if k.name not in log.columns]
    if missing:
        raise SkewInputError(
            f"{where} has no column {', '.join(missing)} (model {spec.name!r}'s entity keys)"
        )
    keys = [
        F.col(f"`{k.name}`").cast("long" if k.dtype == "int64" else "string").alias(k.name)
        for k in spec.entity_keys
    ]
    rows = log.select(*keys, F.col(LOG_TIMESTAMP).cast("timestamp").alias(AT), *columns)
    if window.sample is not None:
        total = rows.count()
        if total > window.sample:
            fraction = min(1.0, 2.0 * window.sample / total)
            rows = rows.sample(fraction=fraction, seed=window.seed).limit(window.sample)
    return rows


def _refuse_bad_keys(rows: DataFrame, spec: ModelSpec, where: str) -> int:
    """The rows' count; SkewInputError when a key is empty or every key is hashed."""
    from pyspark.sql import functions as F

    checks = [F.count(F.lit(1)).alias("rows")]
    for key in spec.entity_keys:
        checks.append(F.sum(F.col(key.name).isNull().cast("long")).alias(f"null:{key.name}"))
        checks.append(
            F.sum((~F.col(key.name).cast("string").rlike(HASHED)).cast("long")).alias(f"plain:{key.name}")
        )
    found = rows.agg(*checks).first()
    assert found is not None
    if not found["rows"]:
        raise SkewInputError(f"no rows of {spec.name!r} in {where} in the window (--since)")
    for key in spec.entity_keys:
        if found[f"null:{key.name}"]:
            raise SkewInputError(f"{where}: column {key.name} has empty values")
        if found[f"plain:{key.name}"] == 0 and key.dtype == "string":
            raise SkewInputError(
                f"{where}: the keys in {key.name} are hashed (GATEWAY_PAYLOAD_LOG_HASH_KEYS): the offline "
                "store cannot be asked for them"
            )
    return int(found["rows"])


def _mismatches(spec: ModelSpec, rtol: float) -> Any:
    """The mapInPandas function: each row's columns compared by the pandas engine's rule; one
    output row per mismatch (the entity as JSON, the time, the column, both values as JSON)."""
    keys = [k.name for k in spec.entity_keys]
    columns = [(c.name, c.dtype, c.name in spec.request_fields) for c in spec.columns]

    def compare(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            out = []
            for row in frame.to_dict("records"):
                for name, dtype, field in columns:
                    served = _plain(_stand_in(dtype, row[SERVED + name]))
                    trained = served if field else _plain(row[TRAINED + name])
                    if not _same(dtype, served, trained, rtol):
                        entity = {k: _plain(row[k]) for k in keys}
                        at = (
                            pd.Timestamp(row[AT]).tz_localize("UTC")
                            if pd.Timestamp(row[AT]).tzinfo is None
                            else pd.Timestamp(row[AT])
                        )
                        out.append(
                            (
                                json.dumps(entity),
                                at.isoformat(),
                                name,
                                json.dumps(_json(served)),
                                json.dumps(_json(trained)),
                            )
                        )
            yield pd.DataFrame(out, columns=["entity", "at", "column", "online", "training"])

    return compare


def _json(value: Any) -> Any:
    if value is None or (isinstance(value, float) and value != value):
        return None if value is None else "NaN"
    return value


def check_logged(spark: SparkSession, window: LoggedWindow, model: Checked, rtol: float = 1e-6) -> SkewReport:
    """The skew report of the window's logged rows (see the module docstring)."""
    from feast_access.spark_join import point_in_time

    spec = model.spec
    rows = logged_rows(spark, window, model).persist()
    try:
        count = _refuse_bad_keys(rows, spec, f"the payload log at {window.location}")
        joined = point_in_time(spark, rows, model.offline, AT, TRAINED)
        schema = "entity string, at string, column string, online string, training string"
        found = joined.mapInPandas(_mismatches(spec, rtol), schema).collect()
    finally:
        rows.unpersist()
    report = SkewReport(spec.name, spec.feature_service, count, list(spec.feature_names))
    for m in sorted(found, key=lambda r: (r["at"], r["entity"], r["column"])):
        report.mismatches.append(
            {
                "entity": json.loads(m["entity"]),
                "at": m["at"],
                "column": m["column"],
                "online": _value(json.loads(m["online"])),
                "training": _value(json.loads(m["training"])),
            }
        )
    return report


def _value(value: Any) -> Any:
    return float("nan") if value == "NaN" else value


async def skew_check_spark(service: Any, model: str, spark: SparkSession, window: LoggedWindow) -> SkewReport:
    """``check_logged`` for a model the gateway's service serves (its spec from Triton, its
    views from the registry); the Spark jobs run off the event loop."""
    import asyncio

    from feast_access.offline import OfflineError, views

    spec = await service.predictor.spec(model)
    features = service.predictor.features
    try:
        offline = views(features.store, spec.feature_service)
    except OfflineError as exc:
        raise SkewInputError(str(exc)) from None
    checked = Checked(spec, features.feature_views(spec.feature_service), offline)
    return await asyncio.to_thread(check_logged, spark, window, checked)


async def run_logged(
    settings: Any, model: str, location: str, window: tuple[dt.datetime, dt.datetime], master: str | None
) -> SkewReport:
    """``gateway skew-check --payload-log … --engine spark``: every logged row of ``window``;
    SkewInputError for whatever keeps the check from running (Spark included)."""
    from pyspark.errors import PySparkException

    from gateway.service import Service
    from gateway.spark.session import SparkUnavailable, spark_session

    try:
        spark = spark_session(master)
    except SparkUnavailable as exc:
        raise SkewInputError(f"{exc} ({exc.hint})") from None
    service = await Service.open(settings, (model,))
    try:
        return await skew_check_spark(service, model, spark, LoggedWindow(location, model, *window))
    except PySparkException as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise SkewInputError(f"Spark cannot check the payload log at {location}: {first}") from None
    finally:
        await service.close()
