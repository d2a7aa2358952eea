"""A feature service's online read, resolved once: the online store's own ``online_read`` per view.

``FeatureStore.get_online_features`` re-derives, on every call, what the service reads (its
cached request context, join-key maps, per-row ``ValueProto`` conversion of the keys), builds a
``GetOnlineFeaturesResponse`` protobuf feature by feature, and ``to_dict`` then converts every
value back to Python: ~0.2 ms of GIL per call, a quarter of the gateway's time per request at 16
clients (py-spy, ``make bench``). Here the service is resolved once, through the Feast SDK's
public objects (its projections, each view ``with_projection`` as Feast reads it), into one
``ViewRead`` per feature view; a read then only builds each distinct entity's key proto, calls the
store's ``online_read`` (SQLite, Redis, any store: the method every Feast online store has, and
whose rows, ``(event time, {feature: ValueProto})``, the SDK itself decodes) and decodes the
values the way ``OnlineResponse.to_dict(include_event_timestamps=True)`` does: a plain scalar is
its protobuf field, anything else goes through Feast's own ``feast_value_type_to_python_type``;
a row's event time is its entity's, in whole epoch seconds, 0 when the store has no row.

A service this does not cover (an on-demand view, an entityless view, a key of a type other than
int or string, a versioned projection, pre-computed vectors) has no plan: ``plan_for`` returns
None and gateway/clients/features.py keeps the SDK's ``get_online_features`` for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.request import EntityRow

# a join key's Feast value type -> the ValueProto field Feast encodes it in
_KEY_FIELDS = {"INT64": "int64_val", "INT32": "int32_val", "STRING": "string_val"}
# ValueProto fields whose Python value Feast returns as is (feast/type_map.py)
_PLAIN = frozenset(
    {"float_val", "double_val", "int32_val", "int64_val", "bool_val", "string_val", "bytes_val"}
)
_UUID_TYPES = frozenset({"UUID", "TIME_UUID"})  # a string_val Feast turns into uuid.UUID


@dataclass(frozen=True)
class ViewRead:
    """One feature view of the service, as ``online_read`` is asked for it."""

    table: Any  # the FeatureView with the service's projection applied
    features: tuple[str, ...]  # what the service takes from it, in its order
    keys: tuple[tuple[str, str, str], ...]  # (request key, the view's join key, ValueProto field)
    value_types: tuple[Any, ...]  # per feature: its Feast ValueType (for values off the fast path)
    plain: tuple[bool, ...]  # per feature: a plain scalar decodes as its protobuf field


@dataclass(frozen=True)
class Columns:
    """What a read returns: per feature, a value (None when missing) and an event time (epoch
    seconds, 0 when missing) per requested row."""

    values: dict[str, list[Any]]
    times: dict[str, list[int]]


class ReadPlan:
    """The resolved reads of one feature service against one online store."""

    def __init__(self, views: Sequence[ViewRead], online_store: Any, config: Any) -> None:
        self.views = tuple(views)
        self.online_store = online_store
        self.config = config

    def read(self, entity_rows: Sequence[EntityRow]) -> Columns:
        """A blocking read (SQLite), every view in turn."""
        out = Columns({}, {})
        for view in self.views:
            protos, index = _entity_keys(view, entity_rows)
            rows = self.online_store.online_read(self.config, view.table, protos, list(view.features))
            _decode(view, rows, index, out)
        return out

    async def read_async(self, entity_rows: Sequence[EntityRow]) -> Columns:
        """The store's async read (Redis), the views concurrently."""
        keyed = [_entity_keys(view, entity_rows) for view in self.views]
        answers = await asyncio.gather(
            *(
                self.online_store.online_read_async(self.config, view.table, protos, list(view.features))
                for view, (protos, _) in zip(self.views, keyed, strict=True)
            )
        )
        out = Columns({}, {})
        for view, (_, index), rows in zip(self.views, keyed, answers, strict=True):
            _decode(view, rows, index, out)
        return out


def _entity_keys(view: ViewRead, entity_rows: Sequence[EntityRow]) -> tuple[list[Any], list[int]]:
    """Each distinct entity's EntityKeyProto (read once, as the SDK dedups), and per request row
    the position of its entity among them. A value the proto field cannot hold (an int64 out of
    range) raises ValueError, as the SDK's own encoding does."""
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey

    join_keys = [store_key for _, store_key, _ in view.keys]
    seen: dict[tuple[Any, ...], int] = {}
    protos: list[Any] = []
    index: list[int] = []
    for row in entity_rows:
        ident = tuple(row[request_key] for request_key, _, _ in view.keys)
        at = seen.get(ident)
        if at is None:
            at = seen[ident] = len(protos)
            key = EntityKey(join_keys=join_keys)
            for (_, _, field), v in zip(view.keys, ident, strict=True):
                setattr(key.entity_values.add(), field, v)
            protos.append(key)
        index.append(at)
    return protos, index


def _decode(view: ViewRead, rows: Sequence[tuple[Any, Any]], index: list[int], out: Columns) -> None:
    from feast.type_map import feast_value_type_to_python_type

    seconds = [0 if ts is None else int(ts.timestamp()) for ts, _ in rows]
    times = [seconds[i] for i in index]
    for name, value_type, plain in zip(view.features, view.value_types, view.plain, strict=True):
        decoded: list[Any] = []
        for _, data in rows:
            proto = None if data is None else data.get(name)
            if proto is None:
                decoded.append(None)
                continue
            kind = proto.WhichOneof("val")
            if kind is None:
                decoded.append(None)
            elif plain and kind in _PLAIN:
                decoded.append(getattr(proto, kind))
            else:
                decoded.append(feast_value_type_to_python_type(proto, value_type))
        out.values[name] = [decoded[i] for i in index]
        out.times[name] = times


def plan_for(store: Any, service: Any) -> ReadPlan | None:
    """``service``'s reads on ``store`` (a FeatureStore), or None where the SDK must do them."""
    if getattr(service, "precompute_online", False):
        return None
    try:
        online_store = store._get_provider().online_store  # the store every SDK read ends in
        config = store.config
    except AttributeError:
        return None
    if not hasattr(online_store, "online_read"):
        return None
    from feast.errors import FeatureViewNotFoundException

    views = []
    for projection in service.feature_view_projections:
        if getattr(projection, "version_tag", None) is not None:
            return None
        try:
            view = store.get_feature_view(projection.name)
        except FeatureViewNotFoundException:  # an on-demand view: computed, not read
            return None
        table = view.with_projection(projection)
        columns = list(view.entity_columns)
        if not columns:  # entityless: Feast's dummy key
            return None
        keys = []
        for column in columns:
            field = _KEY_FIELDS.get(column.dtype.to_value_type().name)
            if field is None:
                return None
            # the request names the key as the service maps it; the store keys it by the view's name
            keys.append((projection.join_key_map.get(column.name, column.name), column.name, field))
        types = {f.name: f.dtype.to_value_type() for f in view.features}
        names = tuple(f.name for f in projection.features)
        if any(n not in types for n in names):
            return None
        views.append(
            ViewRead(
                table=table,
                features=names,
                keys=tuple(keys),
                value_types=tuple(types[n] for n in names),
                plain=tuple(types[n].name not in _UUID_TYPES for n in names),
            )
        )
    if not views:
        return None
    every = [n for v in views for n in v.features]
    if len(set(every)) != len(every):  # two views, one feature name: the SDK's full names apply
        return None
    return ReadPlan(views, online_store, config)
