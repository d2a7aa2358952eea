"""The output written whole or not at all: Parquet into a hidden temporary folder beside the
target, checked, then renamed into place, through Hadoop's FileSystem API (so the same code
writes a local folder, HDFS or an object store under spark-submit).

A reader never sees a half-written output: before the rename there is no folder at the target
(or the previous one, with ``--overwrite``); the temporary folder's leading ``.`` keeps Spark's
and Hive's listings of the parent from reading it. A failure (a check, the job, an interrupt)
removes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from builder.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class HadoopPath:
    """A path on its Hadoop filesystem (py4j objects behind a small typed face)."""

    def __init__(self, spark: SparkSession, uri: str) -> None:
        jvm: Any = spark.sparkContext._jvm
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._jvm = jvm
        self.path = jvm.org.apache.hadoop.fs.Path(uri)
        self.fs = self.path.getFileSystem(conf)
        self.uri = str(self.fs.makeQualified(self.path).toString())

    def sibling(self, name: str) -> HadoopPath:
        clone = object.__new__(HadoopPath)
        clone._jvm, clone.fs = self._jvm, self.fs
        clone.path = self._jvm.org.apache.hadoop.fs.Path(self.path.getParent(), name)
        clone.uri = str(self.fs.makeQualified(clone.path).toString())
        return clone

    @property
    def name(self) -> str:
        return str(self.path.getName())

    def exists(self) -> bool:
        return bool(self.fs.exists(self.path))

    def delete(self) -> None:
        self.fs.delete(self.path, True)

    def rename(self, to: HadoopPath) -> None:
        if not self.fs.rename(self.path, to.path):
            raise OSError(f"cannot rename {self.uri} to {to.uri}")


def refuse_existing(spark: SparkSession, output: str, overwrite: bool) -> HadoopPath:
    """The output's path, refused when it exists and ``overwrite`` is not set."""
    target = HadoopPath(spark, output)
    if target.exists() and not overwrite:
        raise UsageError(
            f"output {output} already exists",
            hint="pass --overwrite to replace it (the old one stays until the new one is whole), or "
            "another --output",
        )
    return target


def write_whole(frame: DataFrame, target: HadoopPath, check: Callable[[str], None]) -> None:
    """``frame`` as Parquet at ``target``: written to a temporary sibling, ``check(temp_uri)``
    (which raises to stop), then renamed over the target."""
    token = uuid.uuid4().hex[:12]
    temp = target.sibling(f".{target.name}.tmp-{token}")
    aside = target.sibling(f".{target.name}.old-{token}")
    try:
        frame.write.parquet(temp.uri)
        check(temp.uri)
        replaced = target.exists()
        if replaced:
            target.rename(aside)
        try:
            temp.rename(target)
        except BaseException:
            if replaced:  # the old output back where it was
                aside.rename(target)
            raise
        if replaced:
            aside.delete()
    finally:
        if temp.exists():
            temp.delete()
