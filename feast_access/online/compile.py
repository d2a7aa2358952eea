"""The compile step: Feast's registry read once, a feature service written as a ``ServiceSpec``.

Imports Feast (it reads the registry through the SDK, the one reader of its format); runs at
deploy time, never in the serving process. What the direct readers cannot serve as Feast does
is refused with one ``Unservable`` line, so the caller keeps the SDK's read for that service:
on-demand views (computed at request time), stream views, entityless views, versioned reads,
pre-computed service vectors, stores other than SQLite and plain Redis, join keys other than
int32/int64/string, value types other than the scalars and their lists (spec.VALUE_TYPES), a
Feast whose layout the readers do not know.

    python -m feast_access.online.compile REPO SERVICE [--profile sqlite|redis] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

from feast_access.online.errors import OnlineReadError, StoreConfigError, Unservable
from feast_access.online.spec import (
    KEY_SERIALIZATION_VERSIONS,
    KEY_TYPES,
    KNOWN_FEAST_VERSIONS,
    REFUSED_FILE,
    VALUE_TYPES,
    FeatureSpec,
    KeySpec,
    ServiceSpec,
    StoreSpec,
    ViewSpec,
    spec_path,
)

_SQLITE_TYPES = frozenset({"sqlite", "feast.infra.online_stores.sqlite.SqliteOnlineStore"})
_REDIS_TYPES = frozenset({"redis", "feast.infra.online_stores.redis.RedisOnlineStore"})


def compile_service(store: Any, service_name: str, full_feature_names: bool = False) -> ServiceSpec:
    """``service_name`` of ``store`` (a FeatureStore) as the direct readers serve it, named as
    ``store.get_online_features(service, ..., full_feature_names=...)`` names its output."""
    feast_version = installed_version("feast")
    if feast_version not in KNOWN_FEAST_VERSIONS:
        raise Unservable(
            f"Feast {feast_version} is installed; the direct reader knows the layout of Feast "
            f"{', '.join(sorted(KNOWN_FEAST_VERSIONS))} only"
        )
    config = store.config
    version = config.entity_key_serialization_version
    if version not in KEY_SERIALIZATION_VERSIONS:
        raise Unservable(f"entity key serialization version {version} is not one the direct reader knows")
    if getattr(config.registry, "enable_online_feature_view_versioning", False):
        raise Unservable("online feature-view versioning is on: the direct reader reads unversioned tables")

    from feast.errors import FeatureServiceNotFoundException

    try:
        service = store.get_feature_service(service_name)
    except FeatureServiceNotFoundException as exc:
        raise Unservable(f"feature service {service_name!r} is not in the registry") from exc
    if getattr(service, "precompute_online", False):
        raise Unservable(f"feature service {service_name!r} reads pre-computed vectors")
    views = tuple(
        _view(store, projection, full_feature_names) for projection in service.feature_view_projections
    )
    if not views:
        raise Unservable(f"feature service {service_name!r} has no feature views")
    outputs = [f.output for v in views for f in v.features]
    clashes = sorted({o for o in outputs if outputs.count(o) > 1})
    if clashes:
        raise Unservable(f"two views serve {clashes} under the same name; compile with full feature names")
    return ServiceSpec(
        service=service_name,
        project=config.project,
        feast_version=feast_version,
        entity_key_serialization_version=version,
        full_feature_names=full_feature_names,
        store=_store(config),
        views=views,
    )


def _store(config: Any) -> StoreSpec:
    online = config.online_store
    kind = getattr(online, "type", None)
    if kind in _SQLITE_TYPES:
        path = Path(online.path)
        if not path.is_absolute() and config.repo_path:
            path = Path(config.repo_path) / path  # as Feast resolves it
        return StoreSpec(type="sqlite", path=str(path.resolve()))
    if kind in _REDIS_TYPES:
        redis_type = str(getattr(online.redis_type, "value", online.redis_type))
        if redis_type != "redis":
            raise Unservable(f"Redis type {redis_type!r}: the direct reader reads a single Redis")
        from feast_access.online.redis import parse_connection_string

        try:
            parse_connection_string(online.connection_string)
        except StoreConfigError as exc:
            raise Unservable(str(exc)) from exc
        return StoreSpec(type="redis", connection_string=online.connection_string)
    raise Unservable(f"online store type {kind!r} has no direct reader (sqlite and redis have)")


def _view(store: Any, projection: Any, full_feature_names: bool) -> ViewSpec:
    from feast.errors import FeatureViewNotFoundException
    from feast.stream_feature_view import StreamFeatureView

    name = projection.name
    if getattr(projection, "version_tag", None) is not None:
        raise Unservable(f"view {name!r} is read at version {projection.version_tag}")
    try:
        view = store.get_feature_view(name)
    except FeatureViewNotFoundException:
        raise Unservable(
            f"view {name!r} is {_kind_of(store, name)}: the direct reader reads stored views"
        ) from None
    if isinstance(view, StreamFeatureView):
        raise Unservable(f"view {name!r} is a stream feature view")
    keys = []
    for column in view.entity_columns:
        value_type = column.dtype.to_value_type().name
        if value_type not in KEY_TYPES:
            raise Unservable(f"join key {column.name!r} of view {name!r} is {value_type}")
        keys.append(KeySpec(projection.join_key_map.get(column.name, column.name), column.name, value_type))
    if not keys or any(k.join_key == "__dummy_id" for k in keys):
        raise Unservable(f"view {name!r} has no entities (Feast reads it by a dummy key)")
    served = {f.name for f in view.features}
    alias = projection.name_to_use()
    features = []
    for feature in projection.features:
        value_type = feature.dtype.to_value_type().name
        if feature.name not in served:
            raise Unservable(f"feature {name}:{feature.name} is not in the view")
        if value_type not in VALUE_TYPES:
            raise Unservable(
                f"feature {name}:{feature.name} is {value_type}, which the direct reader does not decode"
            )
        output = f"{alias}__{feature.name}" if full_feature_names else feature.name
        features.append(FeatureSpec(feature.name, output, value_type))
    ttl = int(view.ttl.total_seconds()) if view.ttl else None
    return ViewSpec(name=view.name, name_to_use=alias, keys=tuple(keys), features=tuple(features), ttl_s=ttl)


def _kind_of(store: Any, name: str) -> str:
    """What a projection that is not a stored view names, for the refusal."""
    for getter, kind in (
        ("get_on_demand_feature_view", "an on-demand view"),
        ("get_stream_feature_view", "a stream view"),
    ):
        try:
            getattr(store, getter)(name)
            return kind
        except Exception:  # Feast raises a not-found error per kind
            continue
    return "not a feature view in the registry"


def compile_repository(store: Any, folder: Path, full_feature_names: bool = False) -> dict[str, str]:
    """Every feature service of ``store``'s registry compiled into ``folder`` (one
    ``<service>.json`` each), the ones the direct readers cannot serve listed with their reason
    in ``refused.json``; returns that list. A deploy step: the gateway then opens the folder."""
    refused: dict[str, str] = {}
    for service in sorted(s.name for s in store.list_feature_services()):
        try:
            write_spec(compile_service(store, service, full_feature_names), spec_path(folder, service))
        except Unservable as exc:
            refused[service] = str(exc)
    _write_atomically(folder / REFUSED_FILE, json.dumps(refused, indent=2, sort_keys=True) + "\n")
    return refused


def write_spec(spec: ServiceSpec, path: Path) -> None:
    """``spec`` as JSON at ``path``, atomically: a reader never sees half a file."""
    _write_atomically(path, spec.to_json())


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m feast_access.online.compile",
        description="Compile a Feast feature service into the direct online reader's spec (JSON).",
    )
    parser.add_argument("repo", type=Path, help="the Feast repository (its feature_store yaml)")
    parser.add_argument("service", help="the feature service")
    parser.add_argument("--profile", choices=("sqlite", "redis"), default=None, help="online store profile")
    parser.add_argument("--redis-url", default=None, help="the Redis profile's connection string")
    parser.add_argument("--full-feature-names", action="store_true", help="output names view__feature")
    parser.add_argument("--out", type=Path, default=None, help="where to write the spec (default: stdout)")
    args = parser.parse_args(argv)
    from feast_access.store import open_store

    try:
        store = open_store(args.repo, args.profile, args.redis_url)
        spec = compile_service(store, args.service, args.full_feature_names)
    except OnlineReadError as exc:
        print(f"error: {exc}\nhint: serve {args.service!r} through the Feast SDK's read", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"error: cannot open the Feast repository {args.repo}: {exc}", file=sys.stderr)
        print("hint: give the repository's folder (with feature_store.yaml)", file=sys.stderr)
        return 1
    if args.out is None:
        sys.stdout.write(spec.to_json())
    else:
        write_spec(spec, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
