"""The serving process's door: a compiled spec in, a reader of its online store out.

Imports neither Feast, pandas nor pyarrow (tests/feast_access/ checks it in a fresh process), so
the serving process pays for none of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from feast_access.online.errors import LayoutError
from feast_access.online.plan import Columns, to_feast_dict
from feast_access.online.spec import ServiceSpec, load_spec

__all__ = ["Columns", "Reader", "load_spec", "open_reader", "to_feast_dict"]


class Reader(Protocol):
    spec: ServiceSpec

    def read(self, rows: Sequence[Mapping[str, Any]]) -> Columns: ...

    def close(self) -> None: ...


def open_reader(
    spec: ServiceSpec | Path | str,
    *,
    sqlite_path: Path | str | None = None,
    redis_url: str | None = None,
    timeout_s: float = 5.0,
) -> Reader:
    """The reader of ``spec`` (a ServiceSpec or the path of its JSON), checked at open: a
    LayoutError (one line) for a Feast layout it does not know or a store not as Feast left it.
    ``sqlite_path`` / ``redis_url`` override the spec's store location (a mounted path, a
    connection string with a password kept out of the spec); a Redis reader also has
    ``read_async``."""
    if not isinstance(spec, ServiceSpec):
        spec = load_spec(spec)
    spec.check_layout()
    if spec.store.type == "sqlite":
        from feast_access.online.sqlite import SqliteReader

        return SqliteReader(spec, sqlite_path)
    if spec.store.type == "redis":
        from feast_access.online.redis import RedisReader

        return RedisReader(spec, redis_url, timeout_s=timeout_s)
    raise LayoutError(f"online store type {spec.store.type!r} has no direct reader")
