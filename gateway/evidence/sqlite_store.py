"""The shared evidence store on one machine: a SQLite file every gateway worker opens.

``gateway serve --workers N`` runs N processes behind one port; each opens the same file
(WAL mode: readers never wait for the writer; a write transaction waits up to 10 s for
another's). It is the SQLite profile's counterpart of the Redis store (same contract,
gateway/evidence/store.py); one machine only: a file on a network volume is not a shared
store for several nodes (use Redis).

Calls run in a worker thread (``asyncio.to_thread``), one connection per process behind a
lock. Expired predictions and labels are deleted at most once a minute, in the writer's
thread, never on a read.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final, TypeVar

from gateway.evidence.store import SLOT_TTL_S, Found, Remembered, SlotCounts, StoreUnavailable

T = TypeVar("T")
MAX: Final = -1  # the count field that holds a slot's maximum
PURGE_EVERY_S: Final = 60.0
_CHUNK: Final = 500  # ids per IN (...) clause

_SCHEMA = """
CREATE TABLE IF NOT EXISTS predictions (
  id TEXT PRIMARY KEY, model TEXT NOT NULL, pair TEXT, answer TEXT,
  label TEXT, labeled_at REAL, expires REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS predictions_expires ON predictions (expires);
CREATE TABLE IF NOT EXISTS challengers (
  id TEXT NOT NULL, pair TEXT NOT NULL, answer TEXT NOT NULL, expires REAL NOT NULL,
  PRIMARY KEY (id, pair)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS challengers_expires ON challengers (expires);
CREATE TABLE IF NOT EXISTS labeled (pair TEXT NOT NULL, at REAL NOT NULL, id TEXT NOT NULL,
  label TEXT NOT NULL, answer TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS labeled_pair_at ON labeled (pair, at);
CREATE TABLE IF NOT EXISTS pairs (model TEXT NOT NULL, pair TEXT NOT NULL, info TEXT NOT NULL,
  PRIMARY KEY (model, pair)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counts (name TEXT NOT NULL, slot INTEGER NOT NULL, field INTEGER NOT NULL,
  value REAL NOT NULL, PRIMARY KEY (name, slot, field)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (name TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL) WITHOUT ROWID;
"""


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


class SqliteEvidence:
    def __init__(self, path: Path, ttl_s: int, cap: int) -> None:
        self.path = path
        self.where = f"sqlite {path}"
        self.ttl_s = ttl_s
        self.cap = cap
        self._lock = threading.Lock()
        self._purged = 0.0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=10.0, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # a killed process loses no commit
            self._db.executescript(_SCHEMA)  # idempotent: workers starting together may all run it
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(
                f"cannot open the evidence store {path}: {exc}", cause="evidence_store"
            ) from exc

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._locked, fn)

    def _locked(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(self._db)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                raise StoreUnavailable(
                    f"the shared evidence store ({self.where}) failed: {exc}", cause="evidence_store"
                ) from exc

    # -- predictions and labels -------------------------------------------------------------

    async def remember(self, batches: Sequence[Remembered]) -> None:
        if batches:
            await self._call(lambda db: self._remember(db, batches))

    def _remember(self, db: sqlite3.Connection, batches: Sequence[Remembered]) -> None:
        now = time.time()
        expires = now + self.ttl_s
        for b in batches:
            rows = list(zip(b.ids, b.answers, strict=True))
            late = self._labeled_already(db, b)
            if b.champion:
                db.executemany(
                    "INSERT INTO predictions (id, model, pair, answer, expires) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET model = excluded.model, pair = excluded.pair, "
                    "answer = excluded.answer, expires = excluded.expires",
                    [(i, b.model, b.pair, a, expires) for i, a in rows],
                )
            else:
                db.executemany(
                    "INSERT OR IGNORE INTO predictions (id, model, expires) VALUES (?, ?, ?)",
                    [(i, b.model, expires) for i in b.ids],
                )
                db.executemany(
                    "INSERT OR REPLACE INTO challengers (id, pair, answer, expires) VALUES (?, ?, ?, ?)",
                    [(i, b.pair, a, expires) for i, a in rows],
                )
            answers = dict(rows)
            for item_id, (label, at) in late.items():  # labeled before this version answered
                self._pair(db, b.pair, at, item_id, label, answers[item_id])
        if now - self._purged > PURGE_EVERY_S:
            self._purge(db, now)

    def _labeled_already(self, db: sqlite3.Connection, b: Remembered) -> dict[str, tuple[str, float]]:
        """The ids of ``b`` that have a label and no answer of ``b``'s version yet."""
        found: dict[str, tuple[str, float]] = {}
        for chunk in _chunks(b.ids):
            marks = ",".join("?" * len(chunk))
            if b.champion:
                sql = f"SELECT id, label, labeled_at FROM predictions WHERE id IN ({marks}) AND label IS NOT NULL AND answer IS NULL"  # noqa: E501
                args: list[str] = list(chunk)
            else:
                sql = (
                    f"SELECT p.id, p.label, p.labeled_at FROM predictions p WHERE p.id IN ({marks}) "
                    "AND p.label IS NOT NULL AND NOT EXISTS "
                    "(SELECT 1 FROM challengers c WHERE c.id = p.id AND c.pair = ?)"
                )
                args = [*chunk, b.pair]
            for item_id, label, at in db.execute(sql, args):
                found[item_id] = (label, at)
        return found

    def _pair(
        self, db: sqlite3.Connection, pair: str, at: float, item_id: str, label: str, answer: str
    ) -> None:
        db.execute(
            "INSERT INTO labeled (pair, at, id, label, answer) VALUES (?, ?, ?, ?, ?)",
            (pair, at, item_id, label, answer),
        )

    def _trim(self, db: sqlite3.Connection, pairs: Iterable[str]) -> None:
        for pair in pairs:
            (count,) = db.execute("SELECT COUNT(*) FROM labeled WHERE pair = ?", (pair,)).fetchone()
            if count > self.cap:
                db.execute(
                    "DELETE FROM labeled WHERE rowid IN (SELECT rowid FROM labeled WHERE pair = ? "
                    "ORDER BY at LIMIT ?)",
                    (pair, count - self.cap),
                )

    def _purge(self, db: sqlite3.Connection, now: float) -> None:
        self._purged = now
        db.execute("DELETE FROM predictions WHERE expires < ?", (now,))
        db.execute("DELETE FROM challengers WHERE expires < ?", (now,))
        db.execute("DELETE FROM labeled WHERE at < ?", (now - self.ttl_s,))
        db.execute("DELETE FROM counts WHERE slot < ?", (int((now - SLOT_TTL_S) // 60),))
        db.execute("DELETE FROM kv WHERE expires IS NOT NULL AND expires < ?", (now,))

    async def register(self, model: str, pair: str, info: str) -> None:
        await self._call(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO pairs (model, pair, info) VALUES (?, ?, ?)", (model, pair, info)
            )
        )

    async def pairs(self, model: str) -> dict[str, str]:
        return await self._call(
            lambda db: dict(db.execute("SELECT pair, info FROM pairs WHERE model = ?", (model,)).fetchall())
        )

    async def label(self, model: str, items: Sequence[tuple[str, str]], at: float) -> list[Found]:
        if not items:
            return []
        return await self._call(lambda db: self._label(db, model, items, at))

    def _label(
        self, db: sqlite3.Connection, model: str, items: Sequence[tuple[str, str]], at: float
    ) -> list[Found]:
        """One query per 500 ids for what they have, then the writes in bulk: a batch of labels
        holds the GIL (and so the gateway's event loop) as briefly as it can."""
        ids = list(dict.fromkeys(i for i, _ in items))
        known: dict[str, tuple[str, str | None, str | None, str | None]] = {}
        answers: dict[str, list[tuple[str, str]]] = {}
        now = time.time()
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for item_id, owner, pair, answer, had in db.execute(
                f"SELECT id, model, pair, answer, label FROM predictions WHERE id IN ({marks}) "
                "AND expires >= ?",
                [*chunk, now],
            ):
                known[item_id] = (owner, pair, answer, had)
            for item_id, pair, answer in db.execute(
                f"SELECT id, pair, answer FROM challengers WHERE id IN ({marks})",
                chunk,
            ):
                answers.setdefault(item_id, []).append((pair, answer))
        out: list[Found] = []
        updates: list[tuple[str, float, str]] = []
        pairs: list[tuple[str, float, str, str, str]] = []
        for item_id, label in items:
            found = known.get(item_id)
            if found is None:
                out.append(Found("missing"))
                continue
            owner, pair, answer, had = found
            if owner != model:
                out.append(Found("other", owner))
            elif had is not None:
                out.append(Found("labeled", had))
            else:
                known[item_id] = (owner, pair, answer, label)  # a second label in this batch sees it
                updates.append((label, at, item_id))
                given = answers.get(item_id, [])
                if pair is not None and answer is not None:
                    given = [*given, (pair, answer)]
                pairs += [(version, at, item_id, label, text) for version, text in given]
                out.append(Found("accepted"))
        db.executemany("UPDATE predictions SET label = ?, labeled_at = ? WHERE id = ?", updates)
        db.executemany("INSERT INTO labeled (pair, at, id, label, answer) VALUES (?, ?, ?, ?, ?)", pairs)
        self._trim(db, {p[0] for p in pairs})
        return out

    async def labeled(self, pair: str, since: float) -> list[tuple[str, str]]:
        return await self._call(
            lambda db: db.execute(
                "SELECT label, answer FROM labeled WHERE pair = ? AND at >= ? ORDER BY at", (pair, since)
            ).fetchall()
        )

    # -- counts and named values ------------------------------------------------------------

    async def add_counts(self, updates: Sequence[SlotCounts]) -> None:
        if updates:
            await self._call(lambda db: self._add_counts(db, updates))

    def _add_counts(self, db: sqlite3.Connection, updates: Sequence[SlotCounts]) -> None:
        rows = [(u.name, u.slot, f, float(v)) for u in updates for f, v in u.fields.items() if v]
        db.executemany(
            "INSERT INTO counts (name, slot, field, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name, slot, field) DO UPDATE SET value = value + excluded.value",
            rows,
        )
        db.executemany(
            "INSERT INTO counts (name, slot, field, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name, slot, field) DO UPDATE SET value = MAX(value, excluded.value)",
            [(u.name, u.slot, MAX, float(u.maximum)) for u in updates if u.maximum > 0],
        )

    async def counts(self, name: str, first: int, last: int) -> dict[int, tuple[dict[int, float], float]]:
        rows = await self._call(
            lambda db: db.execute(
                "SELECT slot, field, value FROM counts WHERE name = ? AND slot BETWEEN ? AND ?",
                (name, first, last),
            ).fetchall()
        )
        out: dict[int, tuple[dict[int, float], float]] = {}
        for slot, field, value in rows:
            fields, maximum = out.get(slot, ({}, 0.0))
            if field == MAX:
                maximum = value
            else:
                fields[field] = value
            out[slot] = (fields, maximum)
        return out

    async def get(self, name: str) -> str | None:
        def read(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT value FROM kv WHERE name = ? AND (expires IS NULL OR expires >= ?)",
                (name, time.time()),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._call(read)

    async def put(self, name: str, value: str) -> None:
        await self._call(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO kv (name, value, expires) VALUES (?, ?, NULL)", (name, value)
            )
        )

    async def swap(self, name: str, expect: str | None, value: str) -> bool:
        def swap(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT value FROM kv WHERE name = ?", (name,)).fetchone()
            current = None if row is None else row[0]
            if current != expect:
                return False
            db.execute("INSERT OR REPLACE INTO kv (name, value, expires) VALUES (?, ?, NULL)", (name, value))
            return True

        return await self._call(swap)

    async def claim(self, name: str, seconds: float) -> bool:
        def claim(db: sqlite3.Connection) -> bool:
            now = time.time()
            row = db.execute("SELECT expires FROM kv WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] is not None and row[0] >= now:
                return False
            db.execute(
                "INSERT OR REPLACE INTO kv (name, value, expires) VALUES (?, '1', ?)", (name, now + seconds)
            )
            return True

        return await self._call(claim)

    async def ping(self) -> None:
        await self._call(lambda db: db.execute("SELECT 1").fetchone())

    async def close(self) -> None:
        with self._lock:
            self._db.close()
