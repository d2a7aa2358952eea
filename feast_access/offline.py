"""A feature service's offline sources as plain facts: what a point-in-time join on another
engine (Spark, ``builder score``) needs to give Feast's answers without Feast.

Feast's rule (its file offline store, ``get_historical_features``), per feature view and entity
row: of the source rows with the row's join keys and an event timestamp in
``[timestamp - ttl, timestamp]`` (no lower bound when the view's TTL is 0), the latest; between
rows of the same event timestamp, the latest ``created_timestamp``; no such row: the view's
features are null. ``views`` reads everything that rule needs from the registry once, so the
engine that runs the join never imports Feast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from feast import FeatureStore
from feast.types import Bool, Float32, Float64, Int32, Int64, String

# Feast's primitive types as the few kinds a join carries them as; anything else (lists, bytes,
# timestamps) is "other", which the scorer refuses by name.
_KINDS = {
    Int32: "int64",
    Int64: "int64",
    Float32: "float64",
    Float64: "float64",
    String: "string",
    Bool: "bool",
}


def _kind(dtype: object) -> str:
    return next((kind for known, kind in _KINDS.items() if dtype == known), "other")


class OfflineError(ValueError):
    """A feature service whose offline sources cannot be joined outside Feast (the message names
    the service or view and what is wrong)."""


@dataclass(frozen=True)
class OfflineFeature:
    name: str  # the plain feature name (the training frame's column)
    source_column: str  # its column in the source (Feast's field_mapping applied backwards)
    kind: str  # int64 | float64 | string | bool | other


@dataclass(frozen=True)
class OfflineView:
    """One feature view of a service, as its source holds it."""

    name: str
    uri: str  # the source's path, resolved against the repository as Feast resolves it
    timestamp_column: str  # in the source
    created_column: str | None  # in the source; None: no tie-break column
    ttl_seconds: float  # 0: no lower bound
    join_keys: tuple[str, ...]  # the entity table's column names (the projection's map applied)
    source_keys: tuple[str, ...]  # the same keys' columns in the source, in the same order
    key_kinds: tuple[str, ...]  # int64 | string | ..., per join key
    features: tuple[OfflineFeature, ...]


def views(store: FeatureStore, service_name: str) -> list[OfflineView]:
    """The service's views in the service's order, each with its source, TTL, keys and features;
    OfflineError for an unknown service, a view that is not a feature view over a file source
    (on-demand and stream views have no offline rows to join), or two views serving one name."""
    from feast.errors import FeatureServiceNotFoundException, FeatureViewNotFoundException
    from feast.infra.offline_stores.file_source import FileSource

    try:
        service = store.get_feature_service(service_name)
    except FeatureServiceNotFoundException:
        known = sorted(s.name for s in store.list_feature_services())
        raise OfflineError(
            f"feature service {service_name!r} is not in the Feast registry of {store.repo_path} "
            f"(it has {', '.join(known) or 'none'})"
        ) from None
    found: list[OfflineView] = []
    seen: set[str] = set()
    for projection in service.feature_view_projections:
        try:
            view = store.get_feature_view(projection.name)
        except FeatureViewNotFoundException:
            raise OfflineError(
                f"feature service {service_name!r}: {projection.name!r} is not a batch feature view "
                "(on-demand views are not joined offline)"
            ) from None
        source = view.batch_source
        if not isinstance(source, FileSource):
            raise OfflineError(
                f"feature view {view.name!r} reads a {type(source).__name__}; the offline join reads "
                "file (Parquet) sources"
            )
        back = {name: column for column, name in (source.field_mapping or {}).items()}
        features = tuple(
            OfflineFeature(f.name, back.get(f.name, f.name), _kind(f.dtype)) for f in projection.features
        )
        clash = seen & {f.name for f in features}
        if clash:
            raise OfflineError(f"feature service {service_name!r} serves {sorted(clash)} from two views")
        seen |= {f.name for f in features}
        entity_columns = list(view.entity_columns)
        found.append(
            OfflineView(
                name=projection.name_to_use(),
                uri=FileSource.get_uri_for_file_path(str(Path(store.repo_path)), source.path),
                timestamp_column=back.get(source.timestamp_field, source.timestamp_field),
                created_column=back.get(source.created_timestamp_column, source.created_timestamp_column)
                or None,
                ttl_seconds=view.ttl.total_seconds() if view.ttl else 0.0,
                join_keys=tuple(projection.join_key_map.get(c.name, c.name) for c in entity_columns),
                source_keys=tuple(back.get(c.name, c.name) for c in entity_columns),
                key_kinds=tuple(_kind(c.dtype) for c in entity_columns),
                features=features,
            )
        )
    return found
