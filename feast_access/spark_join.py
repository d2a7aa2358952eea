"""Feast's point-in-time join, on Spark, over the feature views' offline Parquet sources: what
``builder score`` and the gateway's Spark engine (``gateway skew-check --engine spark``) join
features with, for tables no one machine holds. pyspark is imported only when called (the
``spark`` extra).

Per view and entity row (feast_access/offline.py states the rule): the source row with the
row's join keys whose event timestamp is the latest at or before the row's timestamp, and not
older than the view's TTL (no bound when it is 0); between rows of one event timestamp, the
latest created timestamp; none: the view's features are null. The rows are joined per distinct
(keys, timestamp), so entity rows that repeat one get the same features, and every entity row
comes out once, in no particular order (Spark's), with its own columns unchanged.

The time bounds are part of the join's condition, so Spark filters the candidates while it
joins; one window per view keeps the latest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feast_access.offline import OfflineView

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SPARK_KINDS = {"int64": "long", "float64": "double", "string": "string", "bool": "boolean"}
_SOURCE = "_source__"  # a view's own columns while it is joined


def spark_uri(uri: str) -> str:
    """A source URI as Hadoop reads it: Feast's ``s3://`` is Hadoop's S3A connector."""
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri


def as_timestamp(frame: DataFrame, column: str) -> Column:
    """A time column as a timestamp: a long is a Parquet nanosecond timestamp, which Spark reads
    as nanoseconds since the epoch (session.py says why)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    if isinstance(frame.schema[column].dataType, LongType):
        return F.timestamp_micros(F.expr(f"`{column}` div 1000"))
    return F.col(f"`{column}`").cast("timestamp")


def read_view(spark: SparkSession, view: OfflineView, key_types: dict[str, str], prefix: str) -> DataFrame:
    """A view's source rows: its join keys (as the entity table's types), timestamps and features
    (``prefix`` + name), each under a name of its own."""
    from pyspark.sql import functions as F

    source = spark.read.parquet(spark_uri(view.uri))
    columns = [
        *(
            F.col(f"`{column}`").cast(key_types[key]).alias(_SOURCE + key)
            for key, column in zip(view.join_keys, view.source_keys, strict=True)
        ),
        as_timestamp(source, view.timestamp_column).alias(_SOURCE + "ts"),
        (
            as_timestamp(source, view.created_column)
            if view.created_column
            else F.lit(None).cast("timestamp")
        ).alias(_SOURCE + "created"),
        *(
            F.col(f"`{f.source_column}`").cast(SPARK_KINDS[f.kind]).alias(prefix + f.name)
            for f in view.features
        ),
    ]
    return source.select(*columns)


def point_in_time(
    spark: SparkSession, entities: DataFrame, views: list[OfflineView], timestamp: str, prefix: str = ""
) -> DataFrame:
    """``entities`` with every view's features (``prefix`` + name) as of ``timestamp``; the
    entities' join-key columns must be of the types the views' keys are compared as."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key_types = {f.name: f.dataType.simpleString() for f in entities.schema.fields}
    joined = entities
    for view in views:
        keys = list(view.join_keys)
        source = read_view(spark, view, key_types, prefix)
        asked = entities.select(*(F.col(f"`{k}`") for k in keys), F.col(f"`{timestamp}`")).distinct()
        at = F.col(f"`{timestamp}`")
        condition = [asked[f"`{k}`"] == source[_SOURCE + k] for k in keys]
        condition.append(source[_SOURCE + "ts"] <= at)
        if view.ttl_seconds > 0:
            ttl_us = round(view.ttl_seconds * 1_000_000)
            condition.append(F.unix_micros(source[_SOURCE + "ts"]) >= F.unix_micros(at) - F.lit(ttl_us))
        candidates = asked.join(source, condition, "inner")
        order = Window.partitionBy(*(F.col(f"`{k}`") for k in keys), at).orderBy(
            F.col(_SOURCE + "ts").desc(), F.col(_SOURCE + "created").desc_nulls_last()
        )
        latest = (
            candidates.withColumn("_rank", F.row_number().over(order))
            .where(F.col("_rank") == 1)
            .select(*keys, timestamp, *(prefix + f.name for f in view.features))
        )
        joined = joined.join(latest, on=[*keys, timestamp], how="left")
    return joined
