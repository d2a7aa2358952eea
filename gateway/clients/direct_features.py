"""Online features read straight from Feast's online store, without the Feast SDK in the process.

``gateway compile-features`` (or ``gateway serve`` itself, in a child process, at start) reads
Feast's registry once and writes one spec per feature service into a folder
(feast_access/online/). This client opens those specs and reads SQLite and Redis in Feast's own
layout: ~20 µs of CPU for the demo's two views where the SDK's read costs ~200 µs, and the
serving process imports neither Feast, pandas nor pyarrow for it (``import feast`` alone is
~210 MiB: docs/feature-reads.md).

A service the compile step refused (an on-demand view, a store the readers do not know: its
``refused.json``) is read through the Feast SDK (gateway/clients/features.py), opened in a
thread the first time such a service is asked for; so is one the folder does not know, which
the SDK then answers or refuses as before. The answer and its errors are the SDK client's: the
same FeatureRows, the same 422/503/504 (``guarded``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from feast_access.online.errors import OnlineReadError
from feast_access.online.reader import Reader, open_reader
from feast_access.online.spec import REFUSED_FILE, ServiceSpec
from gateway.clients.features import FeatureRows, OnlineFeatures, guarded, key_type, redis_answers, rows_of
from gateway.errors import SpecError
from gateway.request import EntityRow
from gateway.settings import FeatureSettings

log = logging.getLogger("gateway")


class FeatureSpecError(SpecError):
    """A folder of specs the gateway cannot serve from (raised at start, never per request)."""


class DirectFeatures:
    """The feature client of ``gateway serve`` when it reads the store directly (the default)."""

    def __init__(self, folder: Path, settings: FeatureSettings) -> None:
        """Opens every spec in ``folder`` and checks its store now: a FeatureSpecError (one line)
        for a spec of a layout the readers do not know or a store not as Feast left it."""
        self.settings = settings
        self.timeout_s = settings.timeout_s
        self._readers: dict[str, Reader] = {}
        self._sdk: OnlineFeatures | None = None
        self._sdk_opening: asyncio.Lock | None = None
        refused = folder / REFUSED_FILE
        self.refused: dict[str, str] = json.loads(refused.read_text()) if refused.is_file() else {}
        try:
            for path in sorted(folder.glob("*.json")):
                if path.name != REFUSED_FILE:
                    reader = open_reader(path, redis_url=settings.redis_url, timeout_s=settings.timeout_s)
                    self._readers[reader.spec.service] = reader
        except OnlineReadError as exc:
            self._close_readers()
            raise FeatureSpecError(f"feature specs in {folder}: {exc}") from exc
        for service, why in sorted(self.refused.items()):
            log.info("feature service %s is read through the Feast SDK: %s", service, why)

    def spec(self, service: str) -> ServiceSpec | None:
        reader = self._readers.get(service)
        return reader.spec if reader is not None else None

    async def _fallback(self) -> OnlineFeatures:
        """The Feast SDK's client, for services without a spec; opened once, off the event loop."""
        if self._sdk is None:
            if self._sdk_opening is None:
                self._sdk_opening = asyncio.Lock()
            async with self._sdk_opening:
                if self._sdk is None:
                    s = self.settings
                    sdk = await asyncio.to_thread(
                        OnlineFeatures, s.repo, s.online_store, s.timeout_s, s.reads, s.redis_url
                    )
                    await sdk.prepare()
                    self._sdk = sdk
        return self._sdk

    async def key_types(self, service: str) -> dict[str, str]:
        spec = self.spec(service)
        if spec is None:
            return await (await self._fallback()).key_types(service)
        return {k.request_name: key_type(k.value_type) for v in spec.views for k in v.keys}

    def feature_views(self, service: str) -> dict[str, str]:
        """Feature -> the view it comes from, as Feast's feature logging names it (the payload log)."""
        spec = self.spec(service)
        if spec is None:
            if self._sdk is None:  # the payload log asks after a read, which opened it
                raise SpecError(f"feature service {service!r} has not been read yet")
            return self._sdk.feature_views(service)
        return {f.output: v.name_to_use for v in spec.views for f in v.features}

    async def fetch(self, service: str, entity_rows: list[EntityRow]) -> FeatureRows:
        reader = self._readers.get(service)
        if reader is None:
            return await (await self._fallback()).fetch(service, entity_rows)
        columns = await guarded(self._read(reader, entity_rows), self._reachable)
        return rows_of(columns, len(entity_rows))

    async def _read(self, reader: Any, entity_rows: Sequence[Mapping[str, Any]]) -> Any:
        """Redis asynchronously on this loop; SQLite (~20 µs) inline, or in a thread when asked."""
        if reader.spec.store.type == "redis":
            # asyncio.timeout, not wait_for: no task of its own per read (~8 µs of the ~30 a read cost)
            async with asyncio.timeout(self.timeout_s):
                return await reader.read_async(entity_rows)
        if self.settings.reads == "thread":
            return await asyncio.wait_for(asyncio.to_thread(reader.read, entity_rows), self.timeout_s)
        start = time.monotonic()
        columns = reader.read(entity_rows)
        if time.monotonic() - start > self.timeout_s:
            raise TimeoutError  # late, but the caller's deadline has passed all the same
        return columns

    async def _reachable(self) -> bool:
        """Redis answers a PING (the SDK client's probe); SQLite is a local file."""
        address = self.redis_connection()
        return True if address is None else await redis_answers(address)

    def redis_connection(self) -> str | None:
        """The Redis store's connection string (Feast's form), as the evidence store's default."""
        if self.settings.online_store != "redis":
            return None
        if self.settings.redis_url:
            return self.settings.redis_url
        for reader in self._readers.values():
            if reader.spec.store.connection_string:
                return reader.spec.store.connection_string
        return None

    async def prepare(self) -> None:
        """Nothing to prepare: a Redis reader connects on its first read, and reconnects after."""

    async def ping(self, service: str, entity_row: EntityRow) -> bool:
        try:
            await self.fetch(service, [entity_row])
            return True
        except Exception:
            return False

    @property
    def store(self) -> Any:
        """The Feast SDK's FeatureStore, for the offline commands (skew check): opened on demand."""
        if self._sdk is None:
            s = self.settings
            self._sdk = OnlineFeatures(s.repo, s.online_store, s.timeout_s, s.reads, s.redis_url)
        return self._sdk.store

    def _close_readers(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    async def close(self) -> None:
        for reader in self._readers.values():
            aclose = getattr(reader, "aclose", None)  # Redis: its event-loop connection too
            if aclose is not None:
                await aclose()
        self._close_readers()
        if self._sdk is not None:
            await self._sdk.close()
