"""Open a Feast repository on one of its profiles; apply its definitions; materialize it.

Profiles: ``sqlite`` (``feature_store.yaml``, the default) and ``redis`` (``feature_store.redis.yaml``),
two files in the repository. The profile is the ``profile`` argument, else ``FEAST_ONLINE_STORE``,
else ``sqlite``. The Redis address is the ``redis_url`` argument, else ``REDIS_CONNECTION_STRING``
(Feast's format, e.g. ``localhost:6379`` or ``host:6379,password=...,ssl=true``), else
``localhost:6379``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from feast import FeatureStore, RepoConfig

PROFILE_ENV = "FEAST_ONLINE_STORE"
REDIS_ENV = "REDIS_CONNECTION_STRING"
REDIS_DEFAULT = "localhost:6379"
PROFILE_FILES = {"sqlite": "feature_store.yaml", "redis": "feature_store.redis.yaml"}


def profile_file(repo_path: Path | str, profile: str | None = None) -> Path:
    """The feature_store yaml of a profile (argument, else $FEAST_ONLINE_STORE, else sqlite)."""
    name = (profile or os.environ.get(PROFILE_ENV) or "sqlite").lower()
    if name not in PROFILE_FILES:
        raise ValueError(
            f"unknown Feast profile {name!r} (from {PROFILE_ENV}?); choose one of {sorted(PROFILE_FILES)}"
        )
    return Path(repo_path) / PROFILE_FILES[name]


def open_store(
    repo_path: Path | str, profile: str | None = None, redis_url: str | None = None
) -> FeatureStore:
    """A FeatureStore on repo_path with the profile's online store; ``redis_url``, when given, is
    the Redis profile's connection string, over any inherited ``REDIS_CONNECTION_STRING``."""
    repo = Path(repo_path).resolve()
    yaml_path = profile_file(repo, profile)
    # Feast's own loader expands ${VAR} with os.path.expandvars, which leaves an unset variable as the
    # literal text; expand here with the documented defaults instead, without touching os.environ.
    env = {REDIS_ENV: REDIS_DEFAULT, **os.environ}
    if redis_url:
        env[REDIS_ENV] = redis_url
    text = yaml_path.read_text()
    for key, value in env.items():
        text = text.replace("${" + key + "}", value)
    config = RepoConfig(**yaml.safe_load(text))
    config.repo_path = repo
    return FeatureStore(repo_path=str(repo), config=config)


def apply(repo_path: Path | str, objects: Iterable[Any], profile: str | None = None) -> FeatureStore:
    """Register ``objects`` (entities, views, services: a repository's definitions, in dependency
    order) in the profile's registry, as `feast apply` does; idempotent."""
    store = open_store(repo_path, profile)
    store.apply(list(objects))
    return store


def materialize(
    repo_path: Path | str | FeatureStore, end: datetime | None = None, profile: str | None = None
) -> FeatureStore:
    """Load the online store incrementally up to end (default now).

    The first run of a view starts at ``now - ttl`` (Feast's rule), so it loads the latest snapshot of
    every entity that is still fresh; later runs start where the previous one ended.
    """
    store = repo_path if isinstance(repo_path, FeatureStore) else open_store(repo_path, profile)
    store.materialize_incremental(end_date=end or datetime.now().astimezone())
    return store
