"""The entity table: where it is read from, and what it must hold.

A Parquet file or folder, a CSV file with a header (``.csv``), or a table of the session's
catalog (``table:db.name``). It needs the as-of timestamp column (a timestamp, a date, or
ISO-8601 text), the feature service's join keys and the model's request-time fields; the join
keys are cast to their Feast types and the request fields to the model's column types (a value
that does not cast is missing, and its row is not scored). Every other column is kept as it is
and comes out beside the predictions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from builder.errors import first_line
from builder.score.errors import ScoreInputError
from builder.score.inputs import FEATURE_PREFIX
from feast_access.spark_join import as_timestamp

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TABLE_PREFIX = "table:"
SPARK_TYPES = {"float32": "double", "int64": "long", "bool": "boolean", "string": "string"}
_KEY_TYPES = {"int64": "long", "string": "string"}


def read_entities(spark: SparkSession, source: str) -> DataFrame:
    """The table at ``source`` (see the module docstring); ScoreInputError when it cannot be read."""
    from pyspark.errors import PySparkException

    try:
        if source.startswith(TABLE_PREFIX):
            return spark.table(source[len(TABLE_PREFIX) :])
        if "://" not in source and not Path(source).exists():
            raise ScoreInputError(
                f"entity table {source} does not exist",
                hint="pass a Parquet file or folder, a .csv file with a header, or table:NAME",
            )
        if source.lower().endswith(".csv"):
            return spark.read.option("header", True).option("inferSchema", True).csv(source)
        return spark.read.parquet(source)
    except PySparkException as exc:
        raise ScoreInputError(
            f"entity table {source} cannot be read: {first_line(exc, 200)}",
            hint="pass a Parquet file or folder, a .csv file with a header, or table:NAME",
        ) from exc


def prepare(
    table: DataFrame,
    source: str,
    timestamp: str,
    keys: dict[str, str],
    fields: dict[str, str],
    reserved: list[str],
) -> DataFrame:
    """The table checked and cast: ``timestamp`` as a timestamp (every row must have one),
    ``keys`` (name -> Feast kind) and ``fields`` (name -> model dtype) as their types;
    ScoreInputError naming what is missing or wrong. ``reserved``: the output's own columns,
    which the table must not have."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, LongType, StringType, TimestampNTZType, TimestampType

    columns = table.columns
    if timestamp not in columns:
        raise ScoreInputError(
            f"entity table {source} has no {timestamp!r} column: each row needs the time to score it as "
            f"of (its columns: {', '.join(columns)})",
            hint="add the column (a timestamp, or ISO-8601 text), or name yours with --timestamp-column",
        )
    absent = [c for c in [*keys, *fields] if c not in columns]
    if absent:
        raise ScoreInputError(
            f"entity table {source} lacks {', '.join(absent)} (the feature service's join keys and the "
            "model's request-time fields)",
            hint="add the columns: the entity keys, and the values a request carries besides them",
        )
    clash = [c for c in columns if c in reserved or c.startswith(FEATURE_PREFIX)]
    if clash:
        raise ScoreInputError(
            f"entity table {source} already has column(s) {', '.join(clash)}, which the output writes",
            hint="rename or drop them before scoring",
        )
    kind = table.schema[timestamp].dataType
    if isinstance(kind, StringType):
        at = F.to_timestamp(F.col(f"`{timestamp}`"))
    elif isinstance(kind, TimestampType | TimestampNTZType | DateType | LongType):
        at = as_timestamp(table, timestamp)
    else:
        raise ScoreInputError(
            f"entity table {source}: {timestamp!r} is {kind.simpleString()}, not a timestamp",
            hint="store it as a timestamp, a date, or ISO-8601 text",
        )
    casts = {timestamp: at}
    casts |= {k: F.col(f"`{k}`").cast(_KEY_TYPES.get(kind_, "string")) for k, kind_ in keys.items()}
    casts |= {f: F.col(f"`{f}`").cast(SPARK_TYPES[dtype]) for f, dtype in fields.items() if f not in keys}
    prepared = table.withColumns(casts)
    _refuse_untimed(table, prepared, source, timestamp)
    return prepared


def _refuse_untimed(raw: DataFrame, prepared: DataFrame, source: str, timestamp: str) -> None:
    """A row without a time cannot be joined as of anything: refused, with an example."""
    from pyspark.sql import functions as F

    bad = prepared.where(F.col(f"`{timestamp}`").isNull()).limit(1).count()
    if bad:
        raw_bad = raw.where(F.to_timestamp(F.col(f"`{timestamp}`").cast("string")).isNull()).limit(3)
        shown = ", ".join(repr(r[0]) for r in raw_bad.select(F.col(f"`{timestamp}`")).collect())
        raise ScoreInputError(
            f"entity table {source} has rows without a readable {timestamp!r} (e.g. {shown})",
            hint="give every row a timestamp (ISO-8601 text such as 2026-11-30T12:00:00Z, or a timestamp)",
        )
