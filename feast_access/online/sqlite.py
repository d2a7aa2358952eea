"""The SQLite online store read directly, in Feast 0.67's table layout
(feast/infra/online_stores/sqlite.py):

one table per view, ``<project>_<view>``, one row per (entity, feature): ``entity_key`` (the
serialized entity key, ``keys.py``), ``feature_name``, ``value`` (a serialized ValueProto),
``event_ts`` (integer epoch seconds: Feast's datetime adapter stores ``int(naive_utc.timestamp())``,
that is the UTC wall time read as local time, and reads it back the same way, so on a machine
whose zone is not UTC the stored integer is off by the zone and is corrected here as Feast's
read corrects it).

A read asks every view, in one statement, what Feast asks it (every feature row of each distinct
entity, through the same index), so that an entity's event time is the one Feast reports: that
of its last row in the store's order. Blocking, like Feast's: ~25 µs for the demo's two views
on a local file (docs/feature-reads.md).
"""

from __future__ import annotations

import calendar
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from feast_access.online.errors import LayoutError
from feast_access.online.plan import Columns, distinct_keys, fill, plans
from feast_access.online.spec import ServiceSpec

# the columns a read depends on; Feast 0.67's table has these and others (value_text, ...)
_COLUMNS = frozenset({"entity_key", "feature_name", "value", "event_ts"})


def _quote_id(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteReader:
    """A feature service's reads from Feast's SQLite online store, read-only."""

    def __init__(self, spec: ServiceSpec, path: Path | str | None = None) -> None:
        """Opens ``path`` (default: the spec's) read-only and checks that every view's table is
        in the layout read here: a LayoutError now, not at the first request."""
        self.spec = spec
        self._plans = plans(spec)
        db = Path(path or spec.store.path or "")
        if spec.store.type != "sqlite":
            raise LayoutError(f"feature spec {spec.service!r} is for a {spec.store.type} store, not sqlite")
        if not db.is_file():
            raise LayoutError(f"SQLite online store {db} does not exist (run feast apply and materialize)")
        # read-only: the reader never creates a file or a table, nor takes a write lock
        self._conn = sqlite3.connect(
            f"file:{quote(str(db.resolve()))}?mode=ro",
            uri=True,
            check_same_thread=False,
            isolation_level=None,
        )
        self._tables: list[str] = []
        self._sql: dict[tuple[int, ...], str] = {}
        for plan in self._plans:
            table = f"{spec.project}_{plan.spec.name}"
            columns = {row[1] for row in self._conn.execute(f"PRAGMA table_info({_quote_id(table)})")}
            if not columns:
                self._conn.close()
                raise LayoutError(f"SQLite online store {db} has no table {table!r} (run feast apply)")
            if not columns >= _COLUMNS:
                self._conn.close()
                raise LayoutError(
                    f"table {table!r} lacks {sorted(_COLUMNS - columns)}: not Feast 0.67's SQLite layout"
                )
            self._tables.append(table)
        self._ones = (1,) * len(self._plans)
        # Feast stores the UTC wall time as local epoch seconds (module docstring): off UTC, undo it
        self._local_is_utc = time.timezone == 0 and time.altzone == 0

    def _query(self, sizes: tuple[int, ...]) -> str:
        """One statement for every view: per view Feast's own selection (``entity_key IN (...)``,
        every feature row of the entity, through the same ``<table>_ek`` index, so an entity's
        rows come in the order Feast's ``ORDER BY entity_key`` sees them), joined by UNION ALL:
        one execute per read instead of one per view (~10 µs each)."""
        sql = self._sql.get(sizes)
        if sql is None:
            if len(self._sql) > 256:  # one statement per batch shape; keep the cache small
                self._sql.clear()
            sql = self._sql[sizes] = " UNION ALL ".join(
                f"SELECT {at}, entity_key, feature_name, value, event_ts FROM {_quote_id(table)} "
                f"WHERE entity_key IN ({','.join('?' * n)})"
                for at, (table, n) in enumerate(zip(self._tables, sizes, strict=True))
            )
        return sql

    def read(self, rows: Sequence[Mapping[str, Any]]) -> Columns:
        """The service's features for ``rows`` (entity rows: join key -> value)."""
        if len(rows) == 1:
            return self._read_one(rows[0])
        keyed = [distinct_keys(plan, rows) for plan in self._plans]
        sizes = tuple(len(keys) for keys, _ in keyed)
        params = [key for keys, _ in keyed for key in keys]
        found = self._conn.execute(self._query(sizes), params).fetchall()
        where = [{key: i for i, key in enumerate(keys)} for keys, _ in keyed]
        raw = [
            [[None] * len(plan.names) for _ in range(n)] for plan, n in zip(self._plans, sizes, strict=True)
        ]
        stamps: list[list[Any]] = [[None] * n for n in sizes]
        positions = [plan.position for plan in self._plans]
        for at, key, name, value, event_ts in found:
            i = where[at][key]
            stamps[at][i] = event_ts  # the entity's last row's, as Feast reports it
            j = positions[at].get(name)
            if j is not None:
                raw[at][i][j] = value
        out = Columns({}, {})
        for at, plan in enumerate(self._plans):
            times = [0 if s is None else self._seconds(s) for s in stamps[at]]
            fill(plan, raw[at], times, keyed[at][1], out)
        return out

    def _read_one(self, row: Mapping[str, Any]) -> Columns:
        """``read`` of one row (the gateway's usual request), without the fan-out's bookkeeping."""
        plans_ = self._plans
        found = self._conn.execute(self._query(self._ones), [plan.encode(row) for plan in plans_]).fetchall()
        raw: list[list[bytes | None]] = [[None] * len(plan.names) for plan in plans_]
        stamps: list[Any] = [None] * len(plans_)
        for at, _, name, value, event_ts in found:
            stamps[at] = event_ts
            j = plans_[at].position.get(name)
            if j is not None:
                raw[at][j] = value
        values: dict[str, list[Any]] = {}
        times: dict[str, list[int]] = {}
        for plan, got, stamp in zip(plans_, raw, stamps, strict=True):
            time_ = [0 if stamp is None else self._seconds(stamp)]
            for name, decode, value in zip(plan.outputs, plan.decoders, got, strict=True):
                values[name] = [None if value is None else decode(value)]
                times[name] = time_
        return Columns(values, times)

    def _seconds(self, event_ts: Any) -> int:
        if type(event_ts) is not int:
            raise LayoutError(
                f"event_ts holds a {type(event_ts).__name__}; Feast 0.67 writes integer epoch seconds"
            )
        if self._local_is_utc:
            return event_ts
        return calendar.timegm(time.localtime(event_ts))

    def close(self) -> None:
        self._conn.close()
