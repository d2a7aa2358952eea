"""A feature service compiled for the direct readers: what they read, where, and in which layout.

``feast_access.online.compile`` writes it from Feast's registry, once, at deploy time; the
readers (``sqlite``, ``redis``) only read it. It is plain JSON so the serving process needs no
Feast to load it, and it names the Feast version whose store layout it was compiled against:
a reader refuses a spec from a Feast it does not know (``check_layout``), rather than read a
layout that may have moved (the table schema, the entity-key bytes, the hash-field names).

Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from feast_access.online.errors import LayoutError

# The spec's own format: bumped when a field changes meaning.
SPEC_FORMAT = 1
# The Feast releases whose online-store layout the readers reproduce (the locks pin 0.67.0):
# SQLite's table (entity_key, feature_name, value, event_ts as integer epoch seconds), Redis'
# hash (serialized entity key + project; mmh3 field names; ``_ts:<view>``), the entity-key
# serialization (versions 2 and 3) and ValueProto's field numbers. A new Feast goes here only
# after the parity suite (tests/feast_access/) passes against it.
KNOWN_FEAST_VERSIONS = frozenset({"0.67.0"})
KEY_SERIALIZATION_VERSIONS = frozenset({2, 3})
STORE_TYPES = frozenset({"sqlite", "redis"})

# Feast value types the readers decode (ValueType names): the scalars and their lists.
SCALAR_TYPES = frozenset({"INT32", "INT64", "FLOAT", "DOUBLE", "BOOL", "STRING", "BYTES", "UNIX_TIMESTAMP"})
VALUE_TYPES = SCALAR_TYPES | frozenset(f"{t}_LIST" for t in SCALAR_TYPES)
# Join-key types the entity-key serialization is reimplemented for.
KEY_TYPES = frozenset({"INT32", "INT64", "STRING"})


@dataclass(frozen=True)
class KeySpec:
    """One join key of a view: as the request names it (the projection's join-key map applied)
    and as the store's entity key names it."""

    request_name: str
    join_key: str
    value_type: str  # one of KEY_TYPES


@dataclass(frozen=True)
class FeatureSpec:
    """One feature a view serves: its name in the store and in ``get_online_features`` output."""

    name: str
    output: str  # ``feature``, or ``<view or alias>__feature`` with full feature names
    value_type: str  # one of VALUE_TYPES


@dataclass(frozen=True)
class ViewSpec:
    """One feature view of the service, with the service's projection applied."""

    name: str  # the view's own name: the SQLite table suffix and the Redis hash-field prefix
    name_to_use: str  # the projection's alias, else the view's name
    keys: tuple[KeySpec, ...]
    features: tuple[FeatureSpec, ...]
    ttl_s: int | None  # the view's TTL; Feast 0.67's online read does not apply it (docs)


@dataclass(frozen=True)
class StoreSpec:
    """The online store: a SQLite file (absolute path) or a Redis connection string."""

    type: str  # one of STORE_TYPES
    path: str | None = None
    connection_string: str | None = None


@dataclass(frozen=True)
class ServiceSpec:
    """A feature service as the direct readers serve it."""

    service: str
    project: str
    feast_version: str
    entity_key_serialization_version: int
    full_feature_names: bool
    store: StoreSpec
    views: tuple[ViewSpec, ...]
    format: int = SPEC_FORMAT

    def check_layout(self) -> None:
        """Raise LayoutError unless a reader of this code knows the layout this spec names."""
        if self.format != SPEC_FORMAT:
            raise LayoutError(f"feature spec format {self.format} is not {SPEC_FORMAT}: recompile it")
        if self.feast_version not in KNOWN_FEAST_VERSIONS:
            raise LayoutError(
                f"feature spec compiled with Feast {self.feast_version}; the direct reader knows the "
                f"store layout of Feast {', '.join(sorted(KNOWN_FEAST_VERSIONS))} only"
            )
        if self.entity_key_serialization_version not in KEY_SERIALIZATION_VERSIONS:
            raise LayoutError(
                f"entity key serialization version {self.entity_key_serialization_version} is not one "
                f"the direct reader knows ({sorted(KEY_SERIALIZATION_VERSIONS)})"
            )
        if self.store.type not in STORE_TYPES:
            raise LayoutError(f"online store type {self.store.type!r} has no direct reader")
        for view in self.views:
            for key in view.keys:
                if key.value_type not in KEY_TYPES:
                    raise LayoutError(f"join key {key.join_key!r} of type {key.value_type} is not readable")
            for feature in view.features:
                if feature.value_type not in VALUE_TYPES:
                    raise LayoutError(
                        f"feature {view.name}:{feature.name} of type {feature.value_type} is not readable"
                    )

    @property
    def outputs(self) -> list[str]:
        """The features' output names, in the service's order."""
        return [f.output for v in self.views for f in v.features]

    @property
    def request_keys(self) -> list[str]:
        """The join keys a request row carries (under the projections' maps), first seen first."""
        seen: dict[str, None] = {}
        for view in self.views:
            for key in view.keys:
                seen.setdefault(key.request_name)
        return list(seen)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ServiceSpec:
        """The spec ``to_json`` wrote; a LayoutError (one line) for anything else."""
        try:
            raw = json.loads(text)
            spec = cls(
                service=raw["service"],
                project=raw["project"],
                feast_version=raw["feast_version"],
                entity_key_serialization_version=int(raw["entity_key_serialization_version"]),
                full_feature_names=bool(raw["full_feature_names"]),
                store=StoreSpec(**raw["store"]),
                views=tuple(_view(v) for v in raw["views"]),
                format=int(raw["format"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise LayoutError(f"not a feature spec ({type(exc).__name__}: {exc})") from exc
        spec.check_layout()
        return spec


def _view(raw: dict[str, Any]) -> ViewSpec:
    return ViewSpec(
        name=raw["name"],
        name_to_use=raw["name_to_use"],
        keys=tuple(KeySpec(**k) for k in raw["keys"]),
        features=tuple(FeatureSpec(**f) for f in raw["features"]),
        ttl_s=None if raw["ttl_s"] is None else int(raw["ttl_s"]),
    )


REFUSED_FILE = "refused.json"  # beside a folder's specs: the services left to the SDK's read, and why


def spec_path(folder: Path, service: str) -> Path:
    """Where a folder of compiled specs keeps ``service``'s (``compile_repository`` writes it)."""
    return folder / f"{service}.json"


def load_spec(path: Path | str) -> ServiceSpec:
    """A spec file, checked (LayoutError, one line, when unreadable or of an unknown layout)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LayoutError(f"cannot read feature spec {path}: {exc.strerror}") from exc
    return ServiceSpec.from_json(text)
