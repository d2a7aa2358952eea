"""The training frame: the one point-in-time join that training, the skew check and the demo read.

Also where a repository keeps its labeled entity rows (``load_transactions``): the rows training
joins by default, and those ``gateway skew-check`` samples when given no other.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from feast import FeatureService, FeatureStore

from feast_access import EVENT_TIMESTAMP
from feast_access.service import entity_columns, feature_names

# The labeled entity rows (join keys, EVENT_TIMESTAMP, request fields, label), relative to the
# repository as Feast resolves its sources; the demo's generator writes them there.
TRANSACTIONS_PATH = "data/transactions.parquet"


def load_transactions(store: FeatureStore) -> pd.DataFrame:
    """The labeled entity rows the repository of ``store`` keeps at ``TRANSACTIONS_PATH``."""
    return pd.read_parquet(Path(store.repo_path) / TRANSACTIONS_PATH)


def training_frame(
    store: FeatureStore, service_name: str, entity_df: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Point-in-time join of the entity rows (default: ``load_transactions``) with the service's features.

    ``entity_df`` holds the service's join keys (``entity_columns``) and ``EVENT_TIMESTAMP``.
    One row per entity row, in entity_df's order; columns are entity_df's, then the features in the
    service's order. A feature with no row at or before the entity timestamp, or only rows older than
    its view's TTL, is null (NaN; integer features then come back as float).
    """
    service: FeatureService = store.get_feature_service(service_name)
    rows = load_transactions(store) if entity_df is None else entity_df
    names = feature_names(store, service_name)
    keys = [*entity_columns(store, service_name), EVENT_TIMESTAMP]
    request = rows[keys].copy()
    request[EVENT_TIMESTAMP] = pd.to_datetime(request[EVENT_TIMESTAMP], utc=True)
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
    flagged = unique.merge(returned, on=keys, how="left", indicator=True)
    missing = flagged.loc[flagged["_merge"] == "left_only", keys].reset_index(drop=True)
    for projection in service.feature_view_projections:
        view = store.get_feature_view(projection.name)
        view_keys = [
            *(projection.join_key_map.get(c.name, c.name) for c in view.entity_columns),
            EVENT_TIMESTAMP,
        ]
        refs = [f"{projection.name_to_use()}:{f.name}" for f in projection.features]
        ask = missing[view_keys].drop_duplicates().reset_index(drop=True)
        part = store.get_historical_features(entity_df=ask, features=refs).to_df()
        part = part[[*view_keys, *(f.name for f in projection.features)]]
        missing = missing.merge(part, on=view_keys, how="left", validate="many_to_one")
    return missing
