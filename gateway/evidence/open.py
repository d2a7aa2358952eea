"""Which shared store a gateway opens (settings ``GATEWAY_STATE_URL``, else a default).

- ``redis://host:port[/db]`` / ``rediss://`` (or Feast's ``host:port,password=...``): Redis.
- ``sqlite:///path/to/file``: a SQLite file (one machine).
- unset: the Feast online store's Redis on the Redis profile (the chart's: every replica
  reaches it), else a SQLite file in the temp folder named after the port and the feature
  repository, which every ``--workers`` process of this gateway opens, and a gateway restarted
  on the same port finds again.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from gateway.evidence.sqlite_store import SqliteEvidence
from gateway.evidence.store import EvidenceStore
from gateway.settings import GatewaySettings


def default_sqlite(settings: GatewaySettings) -> Path:
    repo = hashlib.sha256(str(settings.features.repo.resolve()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"gateway-evidence-{settings.server.port}-{repo}.sqlite"


def open_store(settings: GatewaySettings, feast_redis: str | None) -> EvidenceStore | None:
    """``feast_redis``: the online store's Redis connection string, None on another store.
    None: ``GATEWAY_STATE_URL=off``."""
    ttl, cap = settings.state.ttl_s, settings.state.pairs_per_version
    url = settings.state.url
    if url == "off":
        return None
    if url is None:
        if feast_redis is not None:
            return _redis(feast_redis, ttl, cap)
        return SqliteEvidence(default_sqlite(settings), ttl, cap)
    if url.startswith("sqlite:///"):
        return SqliteEvidence(Path(url.removeprefix("sqlite://")), ttl, cap)
    return _redis(url, ttl, cap)


def _redis(url: str, ttl_s: int, cap: int) -> EvidenceStore:
    # Imported only for a Redis store: redis-py (with the OpenTelemetry SDK it loads where that is
    # installed) is 13 MiB of a gateway's memory and half a second of its start.
    from gateway.evidence.redis_store import RedisEvidence

    return RedisEvidence(url, ttl_s, cap)
