"""The Spark point-in-time join (feast_access/spark_join.py, ``builder score``'s) equals Feast's
``get_historical_features`` (through feast_access's training frame, which asks Feast per view
where Feast 0.67 drops a row) on the same entity rows: the latest source row at or before each
row's time, not older than the view's TTL (the bound itself included), the later
``created_timestamp`` between rows of one event time, nulls where nothing qualifies, a view
without TTL, a source column renamed by ``field_mapping``, repeated (key, time) rows; and 300
random rows over six days of history (event times to the second: between rows of one event time
Feast's file store sorts unstably once a source has more than a handful of rows, so ties are
checked on the small case only)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

T = pd.Timestamp("2026-11-20T12:00:00Z")
DAY = pd.Timedelta(days=1)
SERVICE = "accounts_v1"


def _store(root: Path, balances: pd.DataFrame, profiles: pd.DataFrame) -> Any:
    from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
    from feast.types import Float64, Int64, String

    from feast_access.store import open_store

    (root / "data").mkdir(parents=True)
    (root / "feature_store.yaml").write_text(
        "project: pit\nprovider: local\nregistry: data/registry.db\noffline_store:\n  type: file\n"
        "online_store:\n  type: sqlite\n  path: data/online.db\nentity_key_serialization_version: 3\n"
    )
    balances.to_parquet(root / "data" / "balances.parquet")
    profiles.to_parquet(root / "data" / "profiles.parquet")
    account = Entity(name="account", join_keys=["account_id"], value_type=ValueType.INT64)
    balance = FeatureView(
        name="balances",
        entities=[account],
        ttl=timedelta(days=1),
        schema=[Field(name="balance", dtype=Float64), Field(name="overdrafts", dtype=Int64)],
        source=FileSource(
            path="data/balances.parquet",
            timestamp_field="event_timestamp",
            created_timestamp_column="created",
        ),
    )
    profile = FeatureView(
        name="profiles",
        entities=[account],
        ttl=timedelta(0),  # no bound: the latest row ever
        schema=[Field(name="tier", dtype=String)],
        source=FileSource(
            path="data/profiles.parquet", timestamp_field="updated_at", field_mapping={"tier_raw": "tier"}
        ),
    )
    store = open_store(root)
    store.apply([account, balance, profile, FeatureService(name=SERVICE, features=[balance, profile])])
    return store


def _edges() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Sources and entity rows at each bound of the rule."""
    hour = pd.Timedelta(hours=1)
    rows = [  # account, event time, created, balance, overdrafts
        (1, T - 3 * DAY, T - 3 * DAY, 10.0, 0),
        (1, T - 2 * hour, T - 2 * hour, 11.0, 1),
        (1, T - 2 * hour, T - hour, 12.0, 2),  # the same event time, created later: this one
        (2, T - 2 * DAY, T - 2 * DAY, 20.0, 0),  # older than the TTL at T: null
        (3, T - DAY, T - DAY, 30.0, 3),  # exactly the TTL: kept
        (3, T + hour, T, 31.0, 4),  # after T: not yet
        (4, T, T, 40.0, 5),  # exactly at T: kept
    ]
    balances = pd.DataFrame(
        rows, columns=["account_id", "event_timestamp", "created", "balance", "overdrafts"]
    )
    profiles = pd.DataFrame(
        {
            "account_id": [1, 2, 3],
            "updated_at": [T - 30 * DAY, T - 400 * DAY, T + DAY],
            "tier_raw": ["gold", "silver", "bronze"],
        }
    )
    fixed = [(a, T) for a in (1, 2, 3, 4, 5)] + [(1, T), (1, T - 2 * DAY), (3, T - DAY)]
    return balances, profiles, pd.DataFrame(fixed, columns=["account_id", "event_timestamp"])


def _random(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Six days of history for 40 accounts (event times to the second: no ties, on which Feast's
    file store sorts unstably once a source has more than a handful of rows), 300 entity rows."""
    seconds = rng.choice(6 * 24 * 3600, 400, replace=False)
    at = T - pd.to_timedelta(seconds, unit="s")
    balances = pd.DataFrame(
        {
            "account_id": 10 + np.arange(400) % 40,
            "event_timestamp": at,
            "created": at + pd.to_timedelta(rng.integers(0, 60, 400), unit="s"),
            "balance": rng.normal(100, 30, 400).round(2),
            "overdrafts": rng.integers(0, 7, 400),
        }
    )
    profiles = pd.DataFrame(
        {
            "account_id": range(10, 50),
            "updated_at": T - pd.to_timedelta(rng.integers(0, 9 * 24 * 3600, 40), unit="s"),
            "tier_raw": rng.choice(["gold", "silver", "bronze"], 40),
        }
    )
    entities = pd.DataFrame(
        {
            "account_id": rng.integers(8, 52, 300),  # 8, 9, 50, 51: accounts without history
            "event_timestamp": T - pd.to_timedelta(rng.integers(0, 7 * 24 * 3600, 300), unit="s"),
        }
    )
    return balances, profiles, entities


@pytest.mark.parametrize("case", ["edges", "random"])
def test_the_spark_join_equals_feast_s_historical_features(spark: Any, tmp_path: Path, case: str) -> None:
    from builder.score.table import prepare, read_entities
    from feast_access.offline import views
    from feast_access.spark_join import point_in_time
    from feast_access.training import training_frame

    balances, profiles, entities = _edges() if case == "edges" else _random(np.random.default_rng(4))
    store = _store(tmp_path / "repo", balances, profiles)
    entities.to_parquet(tmp_path / "entities.parquet")
    table = prepare(
        read_entities(spark, str(tmp_path / "entities.parquet")),
        "entities",
        "event_timestamp",
        {"account_id": "int64"},
        {},
        [],
    )
    got = point_in_time(spark, table, views(store, SERVICE), "event_timestamp").toPandas()
    got["event_timestamp"] = pd.to_datetime(got["event_timestamp"], utc=True)
    feast = training_frame(store, SERVICE, entities)

    keys = ["account_id", "event_timestamp"]
    assert len(got) == len(entities)
    both = feast.drop_duplicates(keys).merge(
        got.drop_duplicates(keys), on=keys, suffixes=("_feast", "_spark")
    )
    assert len(both) == len(entities.drop_duplicates(keys))
    for name in ("balance", "overdrafts", "tier"):
        ours, theirs = both[f"{name}_spark"], both[f"{name}_feast"]
        agree = (ours.isna() & theirs.isna()) | (ours == theirs)
        assert agree.all(), both.loc[~agree, [*keys, f"{name}_spark", f"{name}_feast"]]
    if case == "random":
        assert got["balance"].isna().any() and got["balance"].notna().sum() > 100
        return
    at_t = got[got["event_timestamp"] == T].drop_duplicates(keys).set_index("account_id")
    assert (
        at_t.loc[1, "balance"] == 12.0 and at_t.loc[3, "balance"] == 30.0 and at_t.loc[4, "balance"] == 40.0
    )
    assert np.isnan(at_t.loc[2, "balance"]) and np.isnan(at_t.loc[5, "balance"])
    assert at_t.loc[2, "tier"] == "silver" and at_t.loc[3, "tier"] is None  # TTL 0: any age, not the future
