"""What the demo and the gateway call: open a profile, apply, materialize, read training data.

Profiles: ``sqlite`` (``feature_store.yaml``, the default) and ``redis`` (``feature_store.redis.yaml``).
The profile is the ``profile`` argument, else ``FEAST_ONLINE_STORE``, else ``sqlite``. The Redis
address is the ``redis_url`` argument, else ``REDIS_CONNECTION_STRING`` (Feast's format, e.g.
``localhost:6379`` or ``host:6379,password=...,ssl=true``), else ``localhost:6379``.

Feature names are the plain feature names (``merchant_risk``, not ``merchant_stats__merchant_risk``):
they are the column names of the training frame and the keys of an online read with
``full_feature_names=False``, and they are unique across this repository's views (checked).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pandas as pd
import yaml
from feast import FeatureService, FeatureStore, RepoConfig
from feast.types import String

from feature_repo import definitions

REPO_PATH = Path(__file__).resolve().parent
PROFILE_ENV = "FEAST_ONLINE_STORE"
REDIS_ENV = "REDIS_CONNECTION_STRING"
REDIS_DEFAULT = "localhost:6379"
PROFILE_FILES = {"sqlite": "feature_store.yaml", "redis": "feature_store.redis.yaml"}
SERVICE = definitions.fraud_v1.name
ENTITY_COLUMNS = ["user_id", "merchant_id"]  # the demo service's join keys (entity_columns reads any)


def profile_file(repo_path: Path | str = REPO_PATH, profile: str | None = None) -> Path:
    """The feature_store yaml of a profile (argument, else $FEAST_ONLINE_STORE, else sqlite)."""
    name = (profile or os.environ.get(PROFILE_ENV) or "sqlite").lower()
    if name not in PROFILE_FILES:
        raise ValueError(
            f"unknown Feast profile {name!r} (from {PROFILE_ENV}?); choose one of {sorted(PROFILE_FILES)}"
        )
    return Path(repo_path) / PROFILE_FILES[name]


def open_store(
    repo_path: Path | str = REPO_PATH, profile: str | None = None, redis_url: str | None = None
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


def apply(repo_path: Path | str = REPO_PATH, profile: str | None = None) -> FeatureStore:
    """Register this repository's entities, views and services (what `feast apply` does); idempotent."""
    store = open_store(repo_path, profile)
    store.apply(list(definitions.OBJECTS))
    return store


def materialize(
    repo_path: Path | str | FeatureStore = REPO_PATH, end: datetime | None = None, profile: str | None = None
) -> FeatureStore:
    """Load the online store incrementally up to end (default now).

    The first run of a view starts at ``now - ttl`` (Feast's rule), so it loads the latest snapshot of
    every entity that is still fresh; later runs start where the previous one ended.
    """
    store = repo_path if isinstance(repo_path, FeatureStore) else open_store(repo_path, profile)
    store.materialize_incremental(end_date=end or datetime.now().astimezone())
    return store


def feature_names(store: FeatureStore, service_name: str = SERVICE) -> list[str]:
    """The service's features as plain names, in the service's order (the model's input order)."""
    service = store.get_feature_service(service_name)
    names = [
        feature.name for projection in service.feature_view_projections for feature in projection.features
    ]
    if len(set(names)) != len(names):
        raise ValueError(f"feature service {service_name!r} has duplicate plain feature names: {names}")
    return names


def string_features(store: FeatureStore, service_name: str = SERVICE) -> list[str]:
    """The service's features of Feast type String, in the service's order.

    Training encodes these as categories (and fills their nulls with ``""``); every other feature
    is numeric. Read from the registered schema, so a new string feature needs no second list.
    """
    service = store.get_feature_service(service_name)
    return [
        feature.name
        for projection in service.feature_view_projections
        for feature in projection.features
        if feature.dtype == String
    ]


def feature_refs(store: FeatureStore, service_name: str = SERVICE) -> list[str]:
    """The service's features as ``view:feature`` references, in the service's order."""
    service = store.get_feature_service(service_name)
    return [
        f"{projection.name_to_use()}:{feature.name}"
        for projection in service.feature_view_projections
        for feature in projection.features
    ]


def entity_columns(store: FeatureStore, service_name: str = SERVICE) -> list[str]:
    """The service's join keys, in the order its views name them (under each projection's
    join-key map); on-demand views have none."""
    from feast.errors import FeatureViewNotFoundException

    keys: list[str] = []
    for projection in store.get_feature_service(service_name).feature_view_projections:
        try:
            view = store.get_feature_view(projection.name)
        except FeatureViewNotFoundException:
            continue
        for column in view.entity_columns:
            key = projection.join_key_map.get(column.name, column.name)
            if key not in keys:
                keys.append(key)
    return keys


def load_transactions(store: FeatureStore) -> pd.DataFrame:
    """The labeled transactions the generator wrote beside the feature tables."""
    return pd.read_parquet(Path(store.repo_path) / definitions.TRANSACTIONS_PATH)


def training_frame(
    store: FeatureStore, service_name: str = SERVICE, entity_df: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Point-in-time join of the entity rows (default: the transactions) with the service's features.

    ``entity_df`` holds the service's join keys (``entity_columns``) and ``event_timestamp``.
    One row per entity row, in entity_df's order; columns are entity_df's, then the features in the
    service's order. A feature with no row at or before the entity timestamp, or only rows older than
    its view's TTL, is null (NaN; integer features then come back as float).
    """
    service: FeatureService = store.get_feature_service(service_name)
    rows = load_transactions(store) if entity_df is None else entity_df
    names = feature_names(store, service_name)
    ts = definitions.EVENT_TIMESTAMP
    keys = [*entity_columns(store, service_name), ts]
    request = rows[keys].copy()
    request[ts] = pd.to_datetime(request[ts], utc=True)
    # Feast's file store collapses entity rows that share join keys and timestamp (feast#6787) and
    # returns rows in its own order: ask once per distinct key, merge back onto every row.
    unique = request.drop_duplicates().reset_index(drop=True)
    got = store.get_historical_features(entity_df=unique, features=service).to_df()[[*keys, *names]]
    if len(got) < len(unique):
        dropped = _refetch_dropped(store, service, unique, got[keys], keys)
        got = pd.concat([got, dropped], ignore_index=True)
    merged = request.merge(got, on=keys, how="left", validate="many_to_one")
    out = rows.reset_index(drop=True).copy()
    for name in names:
        out[name] = merged[name].to_numpy()
    return out


def _refetch_dropped(
    store: FeatureStore,
    service: FeatureService,
    unique: pd.DataFrame,
    returned: pd.DataFrame,
    keys: list[str],
) -> pd.DataFrame:
    """Features of the entity rows Feast 0.67's file offline store left out, one view at a time.

    That store drops an entity row outright when an entity has source rows but none inside
    [timestamp - ttl, timestamp] in some view, instead of returning nulls for that view; each view
    asked alone loses only its own features, which are then the nulls they should be.
    """
    ts = definitions.EVENT_TIMESTAMP
    flagged = unique.merge(returned, on=keys, how="left", indicator=True)
    missing = flagged.loc[flagged["_merge"] == "left_only", keys].reset_index(drop=True)
    for projection in service.feature_view_projections:
        view = store.get_feature_view(projection.name)
        view_keys = [*(projection.join_key_map.get(c.name, c.name) for c in view.entity_columns), ts]
        refs = [f"{projection.name_to_use()}:{f.name}" for f in projection.features]
        ask = missing[view_keys].drop_duplicates().reset_index(drop=True)
        part = store.get_historical_features(entity_df=ask, features=refs).to_df()
        part = part[[*view_keys, *(f.name for f in projection.features)]]
        missing = missing.merge(part, on=view_keys, how="left", validate="many_to_one")
    return missing
