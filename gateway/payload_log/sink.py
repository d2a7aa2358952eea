"""Where the payload log's Parquet files go: a local folder or an object-store URL.

``{root}/{model}/log_date=YYYY-MM-DD/{time}-{uuid}.parquet``: one folder per model (each
holds one model's columns, so it reads as one table and serves as Feast's
``FileLoggingDestination(path=...)``), Hive-style date partitions inside. The partition key is
``log_date``, not Feast's column name ``__log_date``: pyarrow, pandas and Hadoop-style readers
skip paths that start with ``_`` as hidden, so ``__log_date=...`` folders read as an empty log.
The column ``__log_date`` itself is in every file (Feast's schema has it). A local file is
written under a dot-name and renamed into place, so a reader never sees half a file (readers
skip dot- and underscore-names); an object store's upload appears whole when it is closed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

PARTITION_KEY = "log_date"


class Sink(Protocol):
    def write(self, model: str, date: dt.date, table: pa.Table) -> None:
        """Write one file of ``model``'s rows logged on ``date``; raise when it cannot."""


def open_filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """A path or URL as pyarrow's filesystem and the root path in it (relative paths resolved)."""
    if "://" not in location:
        return pafs.LocalFileSystem(), str(Path(location).expanduser().resolve())
    return pafs.FileSystem.from_uri(location)


def partition(root: str, model: str, date: dt.date) -> str:
    return f"{root.rstrip('/')}/{model}/{PARTITION_KEY}={date.isoformat()}"


class ParquetSink:
    """Parquet files under ``location`` (see the module docstring)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.fs, self.root = open_filesystem(location)
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    def write(self, model: str, date: dt.date, table: pa.Table) -> None:
        folder = partition(self.root, model, date)
        self.fs.create_dir(folder, recursive=True)
        name = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}.parquet"
        if not self._local:
            pq.write_table(table, f"{folder}/{name}", filesystem=self.fs)
            return
        staging = f"{folder}/.{name}.tmp"
        try:
            pq.write_table(table, staging, filesystem=self.fs)
            self.fs.move(staging, f"{folder}/{name}")
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.delete_file(staging)
            raise
