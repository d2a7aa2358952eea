"""Online features from Feast, in-process (no feature-server hop).

Redis has an async read path, used directly, with a timeout: a store that cannot be reached is
a 503, a slow one a 504. Its client retries a failed connection once, at once: redis-py's
default (3 retries, back-off of 1, 2, 4 s) spent the whole deadline on a refused port, so a
killed Redis held every batch for the deadline, requests queued behind them waited for two,
and one read that outlived the outage by a moment was called slow (504, no ``Retry-After``).

The Feast SDK's SQLite reads are blocking, ~0.2 ms of mostly-GIL Python on a local file. By
default (``GATEWAY_FEATURE_READS=inline``) they run on the event loop itself: handing them to a
worker thread made each one wait for the GIL behind the loop, and at 16 concurrent clients a
read took 3-4 ms instead of 0.6 (``make bench``, measured side by side). The price is that a
read stuck on a locked database file blocks the loop, and the timeout is checked only after it
returns; ``thread`` keeps the loop free (and the timeout exact) for a SQLite store that
something writes to while the gateway serves.

A read Feast raises on because of the keys themselves (ValueError, TypeError, OverflowError
while it encodes them) is a ``RefusedByStore`` (422), not a 503: the store is up, and retrying
would fail the same way. The request path validates keys first (gateway/request.py), so this is
the remainder nobody foresaw; gateway/core.py keeps it to the request that caused it.

A missing online value (the entity is unknown to the store, or the value expired) is told here,
once, at the read: Feast says "no value" with None, or with NaN in a float feature. ``FeatureRows``
lists each row's missing features (the missing-entity policy in gateway/core.py reads them) and
carries every missing value as None, so assembly (gateway/assemble.py) only reads that marker.
"""

from __future__ import annotations

import asyncio
import functools
import math
import sqlite3
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gateway.clients.online_read import Columns, ReadPlan, plan_for
from gateway.errors import DeadlineExceeded, RefusedByStore, SpecError, Unavailable
from gateway.request import EntityRow

T = TypeVar("T")


@dataclass(frozen=True)
class FeatureRows:
    values: dict[str, list[Any]]  # feature name -> one value per row (None when missing, never NaN)
    missing: list[list[str]]  # per row: the features the store had no value for
    oldest_epoch_s: list[float | None]  # per row: event time of its oldest value
    # feature name -> per row, the event time of its value (None when missing); for watchers
    times: dict[str, list[int]] = field(default_factory=dict)


class FeatureClient(Protocol):
    """What the gateway asks of a feature client: OnlineFeatures (the Feast SDK) or
    DirectFeatures (gateway/clients/direct_features.py: Feast's store layout, read directly)."""

    async def key_types(self, service_name: str) -> dict[str, str]: ...

    async def fetch(self, service_name: str, entity_rows: list[EntityRow]) -> FeatureRows: ...

    def feature_views(self, service_name: str) -> dict[str, str]: ...

    def redis_connection(self) -> str | None: ...

    async def prepare(self) -> None: ...

    async def ping(self, service_name: str, entity_row: EntityRow) -> bool: ...

    async def close(self) -> None: ...

    @property
    def store(self) -> Any: ...


def is_missing(value: object) -> bool:
    """How the online store says "no value": None, or NaN for a float feature."""
    return value is None or (isinstance(value, float) and math.isnan(value))


class OnlineFeatures:
    def __init__(
        self,
        repo: Path,
        profile: str,
        timeout_s: float,
        reads: str = "inline",
        redis_url: str | None = None,
    ) -> None:
        """``redis_url``: the Redis profile's connection string (GATEWAY_REDIS_URL), over an
        inherited ``REDIS_CONNECTION_STRING``; passed to the store's config, not the environment."""
        # here, not at the top: Feast's import takes seconds (test_gateway_isolation.py fakes it)
        from feast_access.store import open_store

        # One worker thread, not the default pool: reads are ~0.2 ms of mostly-GIL Python, so
        # more threads only contend for the GIL with the event loop (measured in make bench).
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="feast-read")
        self.profile = profile
        self.timeout_s = timeout_s
        self._store = open_store(repo, profile, redis_url)
        self._services: dict[str, Any] = {}
        self._plans: dict[str, ReadPlan | None] = {}
        self._key_types: dict[str, dict[str, str]] = {}
        self._async = profile == "redis"
        self._inline = reads == "inline"

    async def close(self) -> None:
        """Stop the read thread and close the store's clients: Feast's ``close()`` (a no-op for
        its Redis and SQLite stores today), then the clients Feast built lazily and keeps on its
        online store object (redis-py's async and sync clients; SQLite's connection)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        try:
            await self._store.close()
            online_store: Any = self._store._get_provider().online_store
        except Exception:  # a store that never opened has nothing to close
            return
        client_async = getattr(online_store, "_client_async", None)
        if client_async is not None:
            online_store._client_async = None
            await client_async.aclose()
        for name in ("_client", "_conn"):  # redis-py's sync client; the SQLite store's connection
            client = getattr(online_store, name, None)
            if client is not None:
                setattr(online_store, name, None)
                client.close()

    @property
    def store(self) -> Any:
        """The FeatureStore (for the skew check's training-path read)."""
        return self._store

    def service(self, name: str) -> Any:
        """The FeatureService object (a registry read), cached: it is resolved once per name."""
        if name not in self._services:
            self._services[name] = self._store.get_feature_service(name)
        return self._services[name]

    async def _in_thread(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(
            loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs)), self.timeout_s
        )

    def entity_key_types(self, service_name: str) -> dict[str, str]:
        """The service's join keys and their types (``int64``, ``string``, or Feast's type name
        for any other), from each view's entity columns under the projection's join-key map.
        A registry read, cached: a service's keys are resolved once per name."""
        from feast.errors import FeatureViewNotFoundException

        if service_name not in self._key_types:
            types: dict[str, str] = {}
            for projection in self.service(service_name).feature_view_projections:
                try:
                    view = self._store.get_feature_view(projection.name)
                except FeatureViewNotFoundException:  # on-demand views have no entities
                    continue
                for column in view.entity_columns:
                    key = projection.join_key_map.get(column.name, column.name)
                    types[key] = key_type(column.dtype.to_value_type().name)
            self._key_types[service_name] = types
        return self._key_types[service_name]

    def feature_views(self, service_name: str) -> dict[str, str]:
        """The service's features -> the name of the view each comes from, as Feast's feature
        logging names it (the projection's alias, else the view's name). Registry read, cached
        with the service."""
        return {
            feature.name: projection.name_to_use()
            for projection in self.service(service_name).feature_view_projections
            for feature in projection.features
        }

    async def key_types(self, service_name: str) -> dict[str, str]:
        """``entity_key_types`` off the event loop (the first call reads the registry)."""
        from feast.errors import FeatureServiceNotFoundException

        cached = self._key_types.get(service_name)
        if cached is not None:
            return cached
        try:
            types: dict[str, str] = await self._in_thread(self.entity_key_types, service_name)
        except FeatureServiceNotFoundException as exc:
            raise SpecError(f"feature service {service_name!r} is not in the feature repository") from exc
        return types

    def plan(self, name: str) -> ReadPlan | None:
        """The service's pre-resolved read (gateway/clients/online_read.py), or None where the SDK reads
        it; a registry read, resolved once per name with the service."""
        if name not in self._plans:
            self._plans[name] = plan_for(self._store, self.service(name))
        return self._plans[name]

    async def fetch(self, service_name: str, entity_rows: list[EntityRow]) -> FeatureRows:
        if service_name not in self._plans:  # a registry read, once per service name
            await self._in_thread(self.plan, service_name)
        plan = self._plans[service_name]
        if plan is not None:
            columns = await guarded(self._read(plan, entity_rows), self._reachable)
        else:
            service = self._services[service_name]
            response = await guarded(self._sdk_read(service, entity_rows), self._reachable)
            columns = _columns(response, set(entity_rows[0]) if entity_rows else set())
        return rows_of(columns, len(entity_rows))

    async def _read(self, plan: ReadPlan, entity_rows: list[EntityRow]) -> Columns:
        """The plan's read: Redis asynchronously, SQLite inline or in the worker thread."""
        result: Columns = await self._call(plan.read, plan.read_async, entity_rows)
        return result

    async def _sdk_read(self, service: Any, entity_rows: list[EntityRow]) -> Any:
        """The Feast SDK's ``get_online_features``, for a service without a plan."""
        store = self._store

        def read(rows: list[EntityRow]) -> Any:
            return store.get_online_features(features=service, entity_rows=rows)

        async def read_async(rows: list[EntityRow]) -> Any:
            return await store.get_online_features_async(features=service, entity_rows=rows)

        return await self._call(read, read_async, entity_rows)

    async def _call(self, read: Any, read_async: Any, entity_rows: list[EntityRow]) -> Any:
        """One store read under the deadline: the async form for Redis, else the sync one inline
        (timed after the fact) or in the worker thread."""
        if self._async:
            return await asyncio.wait_for(read_async(entity_rows), self.timeout_s)
        if self._inline:
            start = time.monotonic()
            result = read(entity_rows)
            if time.monotonic() - start > self.timeout_s:
                raise TimeoutError  # late, but the caller's deadline has passed all the same
            return result
        return await self._in_thread(read, entity_rows)

    async def prepare(self) -> None:
        """Once, on the event loop, before the first read (Service.open): the Redis profile's
        async client retries once without back-off (the one every read here goes through; Feast
        builds it, lazily, without I/O). The deadline is the gateway's, and a retry still
        reconnects a pooled connection a restarted Redis dropped."""
        if not self._async:
            return
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        online_store: Any = self._store._get_provider().online_store  # Feast's RedisOnlineStore
        get_client = getattr(online_store, "_get_client_async", None)  # Feast's, not public API
        if get_client is None:  # another Feast: its own retries, the deadline still holds
            return
        client = await get_client(self._store.config.online_store)
        if hasattr(client, "set_retry"):  # redis-py's Redis and RedisCluster
            client.set_retry(Retry(NoBackoff(), 1))

    def redis_connection(self) -> str | None:
        """The Redis profile's connection string as the store was opened with it (Feast's form,
        ``host:port[,password=...]``); None for another online store."""
        if self.profile != "redis":
            return None
        return str(self._store.config.online_store.connection_string)

    async def _reachable(self) -> bool:
        if self.profile != "redis":
            return True
        # the address the store itself was opened with (GATEWAY_REDIS_URL, else the environment's)
        return await redis_answers(str(self.redis_connection()))

    async def ping(self, service_name: str, entity_row: EntityRow) -> bool:
        """The online store answers a read of ``service_name`` for ``entity_row`` (for /readyz)."""
        try:
            await self.fetch(service_name, [entity_row])
            return True
        except Exception:
            return False


async def redis_answers(connection: str) -> bool:
    """Redis at ``connection`` (Feast's form, ``host:port[,...]``) answers a PING within 0.25 s.
    Any answer counts (a PONG, a NOAUTH error, a TLS port closing on plain text): a connect alone
    does not, as the kernel accepts it for a Redis that is stopped (SIGSTOP) or hung, which then
    never answers."""
    host, _, port = connection.split(",")[0].rpartition(":")

    async def ping() -> None:
        reader, writer = await asyncio.open_connection(host or "localhost", int(port))
        try:
            writer.write(b"PING\r\n")
            await reader.read(64)
        finally:
            writer.close()

    try:
        await asyncio.wait_for(ping(), 0.25)
    except (OSError, TimeoutError, ValueError):
        return False
    return True


async def guarded(read: Awaitable[T], reachable: Callable[[], Awaitable[bool]]) -> T:
    """One online-store read, its failures as the gateway's errors: no answer in time is a 503
    when ``reachable`` says the store is down, else a 504; a SQLite file a writer holds is slow
    (504), any other store failure a 503; keys the store cannot encode are the request's (422)."""
    try:
        return await read
    except TimeoutError as exc:
        # No answer in time: probe the store to tell "down" (503) from "slow" (504).
        if not await reachable():
            raise Unavailable("the online store is unreachable", cause="feature_store_unavailable") from exc
        raise DeadlineExceeded("the online store did not answer in time", cause="feature_timeout") from exc
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY:
            raise Unavailable(f"the online store failed: {exc}", cause="feature_store_unavailable") from exc
        # A writer (a materialize run) held the file past SQLite's busy timeout: slow, not down.
        raise DeadlineExceeded("the online store is locked by a writer", cause="feature_timeout") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # Raised while encoding the keys (an int64 out of range, a string that is not UTF-8):
        # these rows' fault, not the store's, and no reason to retry later.
        raise RefusedByStore(
            f"the online store refused these entity keys ({type(exc).__name__}: {exc})", field="rows"
        ) from exc
    except Exception as exc:  # redis/sqlite connection errors surface as many types
        raise Unavailable(
            f"the online store is unreachable ({type(exc).__name__})", cause="feature_store_unavailable"
        ) from exc


def key_type(value_type: str) -> str:
    """A Feast ValueType name as the gateway's dtype (Feast reads INT32 keys from Python ints too)."""
    if value_type in ("INT64", "INT32"):
        return "int64"
    if value_type == "STRING":
        return "string"
    return value_type.lower()


def _columns(response: Any, keys: set[str]) -> Columns:
    """An SDK OnlineResponse as the plan's Columns (the features and their times, not ``keys``)."""
    data = response.to_dict(include_event_timestamps=True)
    names = [k for k in data if not k.endswith("__ts") and k not in keys]
    return Columns({k: data[k] for k in names}, {k: data[f"{k}__ts"] for k in names if f"{k}__ts" in data})


def rows_of(columns: Any, n: int) -> FeatureRows:
    """A read's Columns (``values`` and ``times`` per feature) as FeatureRows, each missing value
    marked None once."""
    missing: list[list[str]] = [[] for _ in range(n)]
    oldest: list[float | None] = [None] * n
    for name, values in columns.values.items():
        for i, value in enumerate(values):
            if not is_missing(value):
                continue
            missing[i].append(name)
            values[i] = None  # NaN too: after the read, None is the one "missing" marker
        for i, ts in enumerate(columns.times.get(name, ())):
            first = oldest[i]
            if ts:
                oldest[i] = ts if first is None else min(ts, first)
    return FeatureRows(columns.values, missing, oldest, columns.times)


def age_seconds(oldest_epoch_s: list[float | None]) -> float:
    """Age of the oldest value among these rows; -1 when none has a timestamp."""
    known = [t for t in oldest_epoch_s if t is not None]
    return -1.0 if not known else max(0.0, time.time() - min(known))
