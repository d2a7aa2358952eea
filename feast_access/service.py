"""What a feature service serves, read from the registry: its features and its join keys.

Feature names are the plain feature names (``merchant_risk``, not ``merchant_stats__merchant_risk``):
they are the column names of the training frame and the keys of an online read with
``full_feature_names=False``, so ``feature_names`` refuses a service where two views share one.
"""

from __future__ import annotations

from feast import FeatureStore
from feast.types import String


def feature_names(store: FeatureStore, service_name: str) -> list[str]:
    """The service's features as plain names, in the service's order (the model's input order)."""
    service = store.get_feature_service(service_name)
    names = [
        feature.name for projection in service.feature_view_projections for feature in projection.features
    ]
    if len(set(names)) != len(names):
        raise ValueError(f"feature service {service_name!r} has duplicate plain feature names: {names}")
    return names


def string_features(store: FeatureStore, service_name: str) -> list[str]:
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


def feature_refs(store: FeatureStore, service_name: str) -> list[str]:
    """The service's features as ``view:feature`` references, in the service's order."""
    service = store.get_feature_service(service_name)
    return [
        f"{projection.name_to_use()}:{feature.name}"
        for projection in service.feature_view_projections
        for feature in projection.features
    ]


def entity_columns(store: FeatureStore, service_name: str) -> list[str]:
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
