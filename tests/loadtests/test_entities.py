"""Which entities the gateway user sends: the id ranges, an entity file, the online store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loadtests.entities import EntityRows, parse_channels, parse_id_range
from loadtests.settings import LoadOptions
from tests.loadtests.helpers import contract_problem


def test_gateway_rows_follow_the_contract_and_the_entity_ranges() -> None:
    rows = EntityRows("1-500", "1-100", seed=3)
    body = rows.body(200)
    assert contract_problem(body) is None  # the same check the gateway stand-in applies
    users = {r["user_id"] for r in body["rows"]}
    assert min(users) >= 1 and max(users) <= 500 and len(users) > 100  # spread, not one hot key
    again = EntityRows("1-500", "1-100", seed=3).body(200)
    assert again == body  # reproducible per seed
    assert {r["channel"] for r in body["rows"]} == {"web", "app", "pos"}  # the default channels


def test_gateway_rows_take_the_configured_channels() -> None:
    rows = EntityRows("1-5", "1-5", seed=1, channels=parse_channels(" kiosk, phone ")).body(50)["rows"]
    assert {r["channel"] for r in rows} == {"kiosk", "phone"}
    # no channels configured: rows for a model without the field
    bare = EntityRows("1-5", "1-5", seed=1, channels=parse_channels("")).body(3)["rows"]
    assert all(set(r) == {"user_id", "merchant_id", "amount", "hour"} for r in bare)


@pytest.mark.parametrize("text", ["", "a-b", "5-1", "-3"])
def test_bad_id_ranges_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="bad id range"):
        parse_id_range(text)


FEATURE_STORE_YAML = Path(__file__).resolve().parents[2] / "feature_repo" / "feature_store.yaml"


def shop_feature_repo(root: Path) -> Path:
    """A real Feast repo (SQLite online store), not the demo's: a STRING-keyed customer view and
    an int-keyed store view in one service. Customers C-1..C-6 are online; C-7, C-8 only have
    snapshots older than the TTL (never materialized); C-9 got its snapshot after the last
    materialization (offline, within the TTL, not online); C-10 is online, but its snapshot
    leaves the TTL within the hour (a gate running then would see it go)."""
    import pandas as pd
    from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
    from feast.types import Float64, String

    from feast_access.store import open_store

    (root / "data").mkdir(parents=True)
    (root / "feature_store.yaml").write_text(FEATURE_STORE_YAML.read_text())
    now = pd.Timestamp.now(tz="UTC")
    fresh, stale = now - pd.Timedelta(hours=1), now - pd.Timedelta(days=10)
    expiring = now - pd.Timedelta(days=2) + pd.Timedelta(minutes=20)
    customers = pd.DataFrame(
        {
            "customer_id": [f"C-{i}" for i in range(1, 9)] + ["C-10"],
            "segment": ["gold", "silver"] * 4 + ["gold"],
            "event_timestamp": [fresh] * 6 + [stale] * 2 + [expiring],
        }
    )
    stores = pd.DataFrame(
        {"store_id": [1, 2, 3], "footfall": [10.0, 20.0, 30.0], "event_timestamp": [fresh] * 3}
    )
    customers.to_parquet(root / "data" / "customers.parquet")
    stores.to_parquet(root / "data" / "stores.parquet")

    def view(name: str, key: str, value_type: ValueType, field: Field) -> tuple[Entity, FeatureView]:
        entity = Entity(name=name, join_keys=[key], value_type=value_type)
        source = FileSource(
            name=f"{name}_source", path=f"data/{name}s.parquet", timestamp_field="event_timestamp"
        )
        return entity, FeatureView(
            name=f"{name}_stats", entities=[entity], ttl=timedelta(days=2), schema=[field], source=source
        )

    customer, customer_stats = view(
        "customer", "customer_id", ValueType.STRING, Field(name="segment", dtype=String)
    )
    shop, store_stats = view("store", "store_id", ValueType.INT64, Field(name="footfall", dtype=Float64))
    store = open_store(root)
    service = FeatureService(name="shop_v1", features=[customer_stats, store_stats])
    store.apply([customer, shop, customer_stats, store_stats, service])
    store.materialize_incremental(end_date=datetime.now(UTC))
    late = pd.DataFrame({"customer_id": ["C-9"], "segment": ["gold"], "event_timestamp": [fresh]})
    pd.concat([customers, late]).to_parquet(root / "data" / "customers.parquet")
    return root


def shop_model_repo(root: Path) -> Path:
    """An export's metadata.json as `builder export` writes it: the run's feast tags, the columns."""
    version = root / "shop-model" / "1"
    version.mkdir(parents=True)
    metadata = {
        "tags": {
            "feast.feature_service": "shop_v1",
            "feast.entity_keys": "customer_id,store_id",
            "feast.request_fields": "basket,promo",
        },
        "serving": {
            "columns": [
                {"name": "segment", "dtype": "string"},
                {"name": "footfall", "dtype": "float32"},
                {"name": "basket", "dtype": "float32"},
                {"name": "promo", "dtype": "bool"},
            ]
        },
    }
    (version / "metadata.json").write_text(json.dumps(metadata))
    return root


def test_the_gateway_user_draws_only_entities_the_online_store_has(tmp_path: Path) -> None:
    from loadtests.entities import gateway_rows

    options = LoadOptions(
        model="shop-model",
        model_repo=str(shop_model_repo(tmp_path / "models")),
        feature_repo=str(shop_feature_repo(tmp_path / "features")),
    )
    rows = gateway_rows(options, seed=1).body(300)["rows"]
    assert {r["customer_id"] for r in rows} == {f"C-{i}" for i in range(1, 7)}  # not C-7..C-10
    assert {r["store_id"] for r in rows} == {1, 2, 3}
    # the model's request fields, by their dtypes; none of the demo's
    assert all(set(r) == {"customer_id", "store_id", "basket", "promo"} for r in rows)
    assert all(isinstance(r["basket"], float) and isinstance(r["promo"], bool) for r in rows)
    json.dumps(rows)  # plain JSON values, no numpy scalars


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_entity_file_gives_the_rows(tmp_path: Path, suffix: str) -> None:
    import pandas as pd

    from loadtests.entities import gateway_rows

    frame = pd.DataFrame(
        {
            "customer_id": ["C-1", "C-2"],
            "store_id": [7, 8],
            "promo": [True, False],
            "event_timestamp": pd.Timestamp.now(tz="UTC"),
        }
    )
    path = tmp_path / f"entities{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    options = LoadOptions(
        model="shop-model", model_repo=str(shop_model_repo(tmp_path / "models")), entities=str(path)
    )
    rows = gateway_rows(options, seed=1).body(50)["rows"]
    assert {(r["customer_id"], r["store_id"]) for r in rows} == {("C-1", 7), ("C-2", 8)}
    assert all("event_timestamp" not in r and isinstance(r["basket"], float) for r in rows)
    assert {r["promo"] for r in rows if r["customer_id"] == "C-1"} == {True}  # the file's value is kept


def test_entity_sources_that_cannot_give_entities_say_why(tmp_path: Path) -> None:
    from loadtests.entities import EntityError, gateway_rows

    models = str(shop_model_repo(tmp_path / "models"))
    (tmp_path / "e.json").write_text("{}")
    for options, message in (
        (LoadOptions(model="shop-model", entities=str(tmp_path / "e.json")), "neither .parquet nor .csv"),
        (LoadOptions(model="shop-model", entities=str(tmp_path / "none.csv")), "does not exist"),
        (
            LoadOptions(model="shop-model", model_repo=models, feature_repo=str(tmp_path)),
            "feature_store.yaml",
        ),
    ):
        with pytest.raises(EntityError, match=message):
            gateway_rows(options, seed=0)
    # the default folder, unusable (a checkout's unapplied feature_repo/): the id ranges, as before
    row = gateway_rows(
        LoadOptions(model="shop-model", model_repo=models, feature_repo="feature_repo"), 0
    ).row()
    assert {"user_id", "merchant_id"} <= set(row)


def test_the_gate_hands_locust_the_applied_feature_repo_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locust runs in the report folder: the default relative `feature_repo` found nothing there,
    and the README's gate drew ids from ranges (0.8 % of them 404s). An applied repository in
    the current folder is passed by its absolute path; an unapplied one (a fresh checkout) keeps
    the name, and the ranges, as before."""
    from loadtests.entities import default_feature_repo

    shop_feature_repo(tmp_path / "feature_repo")
    monkeypatch.chdir(tmp_path)
    assert default_feature_repo("feature_repo") == str(tmp_path / "feature_repo")
    (tmp_path / "bare").mkdir()
    monkeypatch.chdir(tmp_path / "bare")
    (tmp_path / "bare" / "feature_repo").mkdir()
    (tmp_path / "bare" / "feature_repo" / "feature_store.yaml").write_text(FEATURE_STORE_YAML.read_text())
    assert default_feature_repo("feature_repo") == "feature_repo"  # not applied: no registry yet
