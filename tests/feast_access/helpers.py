"""A Feast repository built for the parity suite: every value type the direct readers serve, two
key types, a composite key, a stale view, services with projections; materialized by Feast's
own ``materialize`` into SQLite or a real Redis.

Feast's data is written relative to ``NOW`` (the first run's clock) so that a view's rows are
fresh or, for ``stale``, older than its TTL.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

NOW = datetime.now(UTC).replace(microsecond=0)
FRESH = NOW - timedelta(hours=1)
OLD = NOW - timedelta(days=3)

USERS = [1, 2, 3, -4, 2**40]  # int64 keys, a negative and a large one among them
DEVICES = ["d-1", "d-2", "ü-ß"]  # string keys, one not ASCII
MISSING_USER = 999
MISSING_DEVICE = "nope"

SCALARS = "scalars"
LISTS = "lists"
PAIRS = "pairs"
STALE = "stale"
EVERYTHING = "everything"
PROJECTED = "projected"
ON_DEMAND = "with_on_demand"


def _user_rows() -> dict[str, list[Any]]:
    long = "x" * 300  # a length that takes two varint bytes
    return {
        "user_id": USERS,
        "event_timestamp": [FRESH] * 5,
        "f_int32": [7, -(2**31), 2**31 - 1, None, 0],
        "f_int64": [1234, -(2**63), 2**63 - 1, 42, 5],  # no null: Feast would make the column float
        "f_float32": [0.1, -1.5, float("inf"), None, 3.0],
        "f_float64": [25.28, -0.0, 1e300, None, 1 / 3],
        "f_bool": [True, False, True, None, False],
        "f_string": ["grocery", "", long, None, "ünïcødé"],
        "f_bytes": [b"\x00\x01", b"", b"\xff" * 200, None, b"abc"],
        "f_ts": [
            OLD,
            datetime(1970, 1, 1, tzinfo=UTC),
            FRESH,
            None,
            datetime(2001, 9, 9, 1, 46, 40, tzinfo=UTC),
        ],
    }


def _device_rows() -> dict[str, list[Any]]:
    return {
        "device_id": DEVICES,
        "event_timestamp": [FRESH, FRESH - timedelta(minutes=5), FRESH],
        "l_int32": [[1, -2, 2**31 - 1], [], None],
        "l_int64": [[2**62, -1], [0], [5]],
        "l_float32": [[0.1, 2.5], [], [1.0]],
        "l_float64": [[1 / 3, -2.0], [float("inf")], []],
        "l_bool": [[True, False], [False], []],
        "l_string": [["a", "", "ü" * 100], [], ["z"]],
        "l_bytes": [[b"\x00", b""], [b"b" * 150], []],
        "l_ts": [[OLD, FRESH], [], [datetime(2001, 9, 9, tzinfo=UTC)]],
    }


def _write_sources(data: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ts = pa.timestamp("us", tz="UTC")
    users = pa.schema(
        [
            ("user_id", pa.int64()),
            ("event_timestamp", ts),
            ("f_int32", pa.int32()),
            ("f_int64", pa.int64()),
            ("f_float32", pa.float32()),
            ("f_float64", pa.float64()),
            ("f_bool", pa.bool_()),
            ("f_string", pa.string()),
            ("f_bytes", pa.binary()),
            ("f_ts", ts),
        ]
    )
    devices = pa.schema(
        [
            ("device_id", pa.string()),
            ("event_timestamp", ts),
            ("l_int32", pa.list_(pa.int32())),
            ("l_int64", pa.list_(pa.int64())),
            ("l_float32", pa.list_(pa.float32())),
            ("l_float64", pa.list_(pa.float64())),
            ("l_bool", pa.list_(pa.bool_())),
            ("l_string", pa.list_(pa.string())),
            ("l_bytes", pa.list_(pa.binary())),
            ("l_ts", pa.list_(ts)),
        ]
    )
    pairs = {
        "user_id": [1, 1, 2],
        "device_id": ["d-1", "d-2", "d-1"],
        "event_timestamp": [FRESH, FRESH, FRESH],
        "score": [0.5, 0.25, None],
    }
    stale = {"user_id": [1, 2], "event_timestamp": [OLD, FRESH], "risk": [0.9, 0.1]}
    data.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pydict(_user_rows(), schema=users), data / "users.parquet")
    pq.write_table(pa.Table.from_pydict(_device_rows(), schema=devices), data / "devices.parquet")
    pq.write_table(pa.Table.from_pydict(pairs), data / "pairs.parquet")
    pq.write_table(pa.Table.from_pydict(stale), data / "stale.parquet")


def definitions() -> list[Any]:
    """The repository's objects, in dependency order."""
    from feast import Entity, FeatureService, FeatureView, Field, FileSource, RequestSource, ValueType
    from feast.on_demand_feature_view import on_demand_feature_view
    from feast.types import (
        Array,
        Bool,
        Bytes,
        Float32,
        Float64,
        Int32,
        Int64,
        String,
        UnixTimestamp,
    )

    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
    device = Entity(name="device", join_keys=["device_id"], value_type=ValueType.STRING)

    def source(name: str) -> Any:
        return FileSource(
            name=f"{name}_source", path=f"data/{name}.parquet", timestamp_field="event_timestamp"
        )

    scalar_types = {
        "int32": Int32,
        "int64": Int64,
        "float32": Float32,
        "float64": Float64,
        "bool": Bool,
        "string": String,
        "bytes": Bytes,
        "ts": UnixTimestamp,
    }
    scalars = FeatureView(
        name=SCALARS,
        entities=[user],
        ttl=timedelta(days=1),
        schema=[Field(name=f"f_{k}", dtype=t) for k, t in scalar_types.items()],
        source=source("users"),
    )
    lists = FeatureView(
        name=LISTS,
        entities=[device],
        ttl=timedelta(days=1),
        schema=[Field(name=f"l_{k}", dtype=Array(t)) for k, t in scalar_types.items()],
        source=source("devices"),
    )
    pairs = FeatureView(
        name=PAIRS,
        entities=[user, device],
        ttl=timedelta(days=1),
        schema=[Field(name="score", dtype=Float64)],
        source=source("pairs"),
    )
    # materialized from 3 days back: user 1's row is older than the TTL, user 2's is fresh
    stale = FeatureView(
        name=STALE,
        entities=[user],
        ttl=timedelta(hours=2),
        schema=[Field(name="risk", dtype=Float64)],
        source=source("stale"),
    )
    everything = FeatureService(name=EVERYTHING, features=[scalars, lists, pairs, stale])
    # a projection: an alias, a subset in another order, a join key under another request name
    projected = FeatureService(
        name=PROJECTED,
        features=[
            scalars[["f_string", "f_int64"]].with_name("renamed"),
            pairs.with_join_key_map({"user_id": "buyer_id"}),
            stale,
        ],
    )
    request = RequestSource(name="req", schema=[Field(name="amount", dtype=Float64)])

    @on_demand_feature_view(
        sources=[stale, request], schema=[Field(name="scaled", dtype=Float64)], mode="python"
    )
    def scaled(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"scaled": [r * a for r, a in zip(inputs["risk"], inputs["amount"], strict=True)]}

    with_on_demand = FeatureService(name=ON_DEMAND, features=[scalars[["f_int64"]], scaled])
    return [user, device, scalars, lists, pairs, stale, everything, projected, scaled, with_on_demand]


def online_store_config(kind: str, root: Path, redis_address: str | None) -> dict[str, Any]:
    if kind == "sqlite":
        return {"type": "sqlite", "path": str(root / "online.db")}
    return {"type": "redis", "connection_string": redis_address}


@contextmanager
def quiet_v2(version: int) -> Iterator[None]:
    """Feast warns on every serialization at version 2 (still supported, deprecated)."""
    with warnings.catch_warnings():
        if version == 2:
            warnings.filterwarnings("ignore", message=".*[Ss]erializ.*version.*")
            warnings.filterwarnings("ignore", message=".*entity_key_serialization_version.*")
        yield


def build_store(root: Path, kind: str, version: int, redis_address: str | None = None) -> Any:
    """A Feast repository under ``root``, applied and materialized (Feast's own materialize,
    over 10 days, so the stale view's old row is loaded) into ``kind``'s online store."""
    from feast import FeatureStore, RepoConfig

    _write_sources(root / "data")
    with quiet_v2(version), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "On demand feature view is an experimental", RuntimeWarning)
        config = RepoConfig(
            project=f"parity_{kind}_v{version}",
            provider="local",
            registry=str(root / "registry.db"),
            offline_store={"type": "file"},
            online_store=online_store_config(kind, root, redis_address),
            entity_key_serialization_version=version,
            repo_path=root,
        )
        store = FeatureStore(repo_path=str(root), config=config)
        store.apply(definitions())
        store.materialize(start_date=NOW - timedelta(days=10), end_date=NOW)
    return store


def entity_rows(keys: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Rows that meet every case: present, missing and repeated entities, both key types."""
    user_key = (keys or {}).get("user_id", "user_id")
    rows = [
        {user_key: 1, "device_id": "d-1"},
        {user_key: 2, "device_id": "d-2"},
        {user_key: MISSING_USER, "device_id": MISSING_DEVICE},
        {user_key: 3, "device_id": "ü-ß"},
        {user_key: 1, "device_id": "d-2"},
        {user_key: -4, "device_id": "d-1"},
        {user_key: 2**40, "device_id": MISSING_DEVICE},
    ]
    return rows


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and of the same type (1 is not 1.0, False is not 0)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def differences(mine: Mapping[str, list[Any]], feast: Mapping[str, list[Any]]) -> list[str]:
    """Where two to_dict answers differ, one line each (empty when they are the same)."""
    out = [f"keys: only mine {sorted(set(mine) - set(feast))}, only Feast's {sorted(set(feast) - set(mine))}"]
    if set(mine) == set(feast):
        out = []
    for name in sorted(set(mine) & set(feast)):
        for i, (a, b) in enumerate(zip(mine[name], feast[name], strict=False)):
            if not same(a, b):
                out.append(f"{name}[{i}]: mine {a!r} Feast {b!r}")
        if len(mine[name]) != len(feast[name]):
            out.append(f"{name}: {len(mine[name])} rows, Feast {len(feast[name])}")
    return out
