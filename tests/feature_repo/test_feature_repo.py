"""The demo's Feast repository end to end through feast_access/ (profiles, apply, materialize, the
training frame): generate, apply, materialize, then read offline and online.

Everything runs on a copy of feature_repo/ under tmp_path, so the source tree never gets data files.
The Redis profile runs against a real redis-server these tests start on a free port.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import redis
from feast import FeatureStore

from feast_access.service import feature_names, feature_refs, string_features
from feast_access.store import PROFILE_ENV, REDIS_ENV, apply, materialize, open_store, profile_file
from feast_access.training import training_frame
from feature_repo import REPO_PATH
from feature_repo.definitions import MERCHANT_TTL, OBJECTS, USER_TTL
from feature_repo.generate import (
    CHANNELS,
    MERCHANT_CATEGORIES,
    DatasetSpec,
    GeneratedFiles,
    generate,
    point_in_time,
)
from support import servers

pytestmark = pytest.mark.integration

SOURCE = REPO_PATH
PROJECT_ROOT = SOURCE.parent
USER_FEATURES = ["user_age_days", "tx_last_24h", "avg_amount_30d"]
MERCHANT_FEATURES = ["merchant_risk", "merchant_fraud_rate_30d", "merchant_category"]
FRAUD_V1 = [*USER_FEATURES, *MERCHANT_FEATURES]
UNKNOWN_ID = 10**9


def _copy_repo(dest: Path) -> Path:
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("data", "__pycache__"))
    return dest


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GeneratedFiles]:
    path = _copy_repo(tmp_path_factory.mktemp("feast") / "feature_repo")
    files = generate(path / "data", DatasetSpec(seed=7))
    return path, files


@pytest.fixture(scope="module")
def sources(repo: tuple[Path, GeneratedFiles]) -> dict[str, pd.DataFrame]:
    _, files = repo
    return {
        "user": pd.read_parquet(files.user_stats),
        "merchant": pd.read_parquet(files.merchant_stats),
        "tx": pd.read_parquet(files.transactions),
    }


@pytest.fixture(scope="module")
def sqlite_store(repo: tuple[Path, GeneratedFiles]) -> FeatureStore:
    path, _ = repo
    apply(path, OBJECTS, profile="sqlite")
    return materialize(path, end=datetime.now(UTC), profile="sqlite")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server on a free loopback port; yields Feast's connection string for it."""
    with servers.redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server.address


@pytest.fixture(scope="module")
def redis_store(repo: tuple[Path, GeneratedFiles], redis_server: str) -> FeatureStore:
    path, _ = repo
    # Selected the way a deployment selects it: through the environment, no profile argument.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PROFILE_ENV, "redis")
        mp.setenv(REDIS_ENV, redis_server)
        apply(path, OBJECTS)
        store = materialize(path, end=datetime.now(UTC))
    assert store.config.online_store.type == "redis"
    return store


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _same(a: object, b: object) -> bool:
    """Equal (numbers approximately, strings exactly), with None, NaN and NA all meaning "no value"."""
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a == pytest.approx(b)


def _expected_offline(entity_df: pd.DataFrame, src: dict[str, pd.DataFrame]) -> pd.DataFrame:
    u = point_in_time(entity_df, src["user"], "user_id", USER_TTL, USER_FEATURES)
    m = point_in_time(entity_df, src["merchant"], "merchant_id", MERCHANT_TTL, MERCHANT_FEATURES)
    return pd.concat([u, m], axis=1)


def _assert_frames_match(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert len(got) == len(want)
    bad = [
        (i, name, got[name].iloc[i], want[name].iloc[i])
        for name in FRAUD_V1
        for i in range(len(want))
        if not _same(got[name].iloc[i], want[name].iloc[i])
    ]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:5]}"


def test_generate_is_seeded_and_labels_follow_features(tmp_path: Path) -> None:
    end = datetime(2026, 1, 31, tzinfo=UTC)

    def small(seed: int) -> DatasetSpec:
        return DatasetSpec(seed=seed, end=end, n_users=50, n_merchants=10, days=10, n_transactions=300)

    a = generate(tmp_path / "a", small(3))
    b = generate(tmp_path / "b", small(3))
    c = generate(tmp_path / "c", small(4))
    for name in ("user_stats", "merchant_stats", "transactions"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(getattr(a, name)), pd.read_parquet(getattr(b, name)), check_exact=True
        )
    assert not pd.read_parquet(a.transactions).equals(pd.read_parquet(c.transactions))
    assert a.end == end
    assert a.start == end - timedelta(days=9)


def test_generate_runs_as_module(tmp_path: Path) -> None:
    out = tmp_path / "data"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "feature_repo.generate",
            "--out",
            str(out),
            "--seed",
            "1",
            "--end",
            "2026-01-31T00:00:00+00:00",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    tx = pd.read_parquet(out / "transactions.parquet")
    assert list(tx.columns) == [
        "user_id",
        "merchant_id",
        "event_timestamp",
        "amount",
        "hour",
        "channel",
        "is_fraud",
    ]
    assert set(tx["channel"]) == set(CHANNELS)
    assert tx["event_timestamp"].max() <= pd.Timestamp("2026-01-31", tz="UTC")
    assert {p.name for p in out.iterdir()} == {
        "user_stats.parquet",
        "merchant_stats.parquet",
        "transactions.parquet",
    }


def test_feature_service_order_is_stable(
    sqlite_store: FeatureStore, repo: tuple[Path, GeneratedFiles]
) -> None:
    path, _ = repo
    assert feature_names(sqlite_store, "fraud_v1") == FRAUD_V1
    assert string_features(sqlite_store, "fraud_v1") == ["merchant_category"]
    assert feature_refs(sqlite_store, "fraud_v1") == [
        *(f"user_stats:{n}" for n in USER_FEATURES),
        *(f"merchant_stats:{n}" for n in MERCHANT_FEATURES),
    ]
    # Re-applying and reopening from the registry keeps the order: it is the model's input order.
    apply(path, OBJECTS, profile="sqlite")
    reopened = open_store(path, profile="sqlite")
    assert feature_names(reopened, "fraud_v1") == FRAUD_V1


def test_historical_features_are_point_in_time(
    sqlite_store: FeatureStore, sources: dict[str, pd.DataFrame], repo: tuple[Path, GeneratedFiles]
) -> None:
    _, files = repo
    users = sources["user"]
    last_user = users.groupby("user_id")["event_timestamp"].max()
    first_user = users.groupby("user_id")["event_timestamp"].min()
    late_user = int(first_user.idxmax())
    stale_user = int(last_user.index[0])
    hour = pd.Timedelta(hours=1)
    special = pd.DataFrame(
        [
            # Between two snapshots: the earlier one.
            (1, 1, pd.Timestamp(files.end) - pd.Timedelta(hours=30)),
            # Before the user's first snapshot: user features null, merchant features present.
            (late_user, 2, first_user[late_user] - hour),
            # Past the user TTL (2 days) but inside the merchant TTL (7 days).
            (stale_user, 4, last_user[stale_user] + USER_TTL + hour),
            # Before any feature row at all.
            (2, 5, pd.Timestamp(files.start) - hour),
            # Unknown entities.
            (UNKNOWN_ID, UNKNOWN_ID, pd.Timestamp(files.end)),
        ],
        columns=["user_id", "merchant_id", "event_timestamp"],
    )
    sampled = sources["tx"].sample(40, random_state=0)[["user_id", "merchant_id", "event_timestamp"]]
    entity_df = pd.concat([special, sampled], ignore_index=True)

    got = training_frame(sqlite_store, "fraud_v1", entity_df=entity_df)

    assert list(got.columns) == ["user_id", "merchant_id", "event_timestamp", *FRAUD_V1]
    pd.testing.assert_frame_equal(got[entity_df.columns], entity_df)
    _assert_frames_match(got, _expected_offline(entity_df, sources))

    row = got.iloc
    assert not row[0][FRAUD_V1].isna().any()
    assert row[1][USER_FEATURES].isna().all() and not row[1][MERCHANT_FEATURES].isna().any()
    assert row[2][USER_FEATURES].isna().all() and not row[2][MERCHANT_FEATURES].isna().any()
    assert row[3][FRAUD_V1].isna().all()
    assert row[4][FRAUD_V1].isna().all()


def test_training_frame_covers_every_transaction(
    sqlite_store: FeatureStore, sources: dict[str, pd.DataFrame]
) -> None:
    tx = sources["tx"]
    got = training_frame(sqlite_store, "fraud_v1")

    assert list(got.columns) == [*tx.columns, *FRAUD_V1]
    pd.testing.assert_frame_equal(got[tx.columns], tx)
    _assert_frames_match(got, _expected_offline(tx, sources))
    # Some transactions predate their user's first snapshot, and the label depends on the features.
    assert 0 < got["user_age_days"].isna().sum() < len(got) // 2
    risky = got["merchant_risk"] > got["merchant_risk"].median()
    assert got.loc[risky, "is_fraud"].mean() > got.loc[~risky, "is_fraud"].mean()
    # The string feature comes back as strings from the fixed list, and the label follows it and
    # the request-time channel (what the model is meant to learn from them).
    categories = got["merchant_category"].dropna()
    assert len(categories) > len(got) * 0.9 and set(categories) == set(MERCHANT_CATEGORIES)
    assert all(isinstance(c, str) for c in categories)
    by_category = got.groupby("merchant_category")["is_fraud"].mean()
    assert by_category["digital_goods"] > by_category["grocery"]
    by_channel = got.groupby("channel")["is_fraud"].mean()
    assert by_channel["web"] > by_channel["pos"]


def _latest(src: pd.DataFrame, key: str, since: pd.Timestamp, features: list[str]) -> dict[int, dict]:
    fresh = src[src["event_timestamp"] >= since].sort_values(["event_timestamp", "created_timestamp"])
    return fresh.groupby(key).last()[features].to_dict("index")


def _online_rows() -> list[dict[str, int]]:
    rows = [{"user_id": u, "merchant_id": (u * 7) % 100 + 1} for u in range(1, 41)]
    return [*rows, {"user_id": UNKNOWN_ID, "merchant_id": UNKNOWN_ID}]


def _read_online(store: FeatureStore, rows: list[dict[str, int]]) -> dict[str, list]:
    service = store.get_feature_service("fraud_v1")
    return store.get_online_features(features=service, entity_rows=rows).to_dict()


def test_online_features_are_the_latest_source_values(
    sqlite_store: FeatureStore, sources: dict[str, pd.DataFrame], repo: tuple[Path, GeneratedFiles]
) -> None:
    _, files = repo
    end = pd.Timestamp(files.end)
    # The first incremental materialization loads [now - ttl, now]: with daily snapshots ending at
    # `end`, that is the last two user snapshots and the last seven merchant ones.
    users = _latest(sources["user"], "user_id", end - USER_TTL + pd.Timedelta(days=1), USER_FEATURES)
    merchants = _latest(
        sources["merchant"], "merchant_id", end - MERCHANT_TTL + pd.Timedelta(days=1), MERCHANT_FEATURES
    )
    rows = _online_rows()

    got = _read_online(sqlite_store, rows)

    assert got["user_id"] == [r["user_id"] for r in rows]
    for i, r in enumerate(rows):
        want = {
            **users.get(r["user_id"], dict.fromkeys(USER_FEATURES)),
            **merchants.get(r["merchant_id"], dict.fromkeys(MERCHANT_FEATURES)),
        }
        for name in FRAUD_V1:
            assert _same(got[name][i], want[name]), (r, name, got[name][i], want[name])
    assert all(got[name][-1] is None for name in FRAUD_V1)
    # The string feature is served as the string itself, what the gateway passes to the model.
    assert all(isinstance(v, str) and v in MERCHANT_CATEGORIES for v in got["merchant_category"][:-1])


def test_redis_profile_serves_the_same_online_values(
    sqlite_store: FeatureStore, redis_store: FeatureStore, redis_server: str
) -> None:
    rows = _online_rows()

    from_redis = _read_online(redis_store, rows)
    from_sqlite = _read_online(sqlite_store, rows)

    assert from_redis == from_sqlite
    assert all(v is not None for v in from_redis["merchant_risk"][:-1])
    assert all(isinstance(v, str) for v in from_redis["merchant_category"][:-1])
    host, port = redis_server.split(":")
    keys = redis.Redis(host=host, port=int(port)).dbsize()
    assert isinstance(keys, int) and keys > 0, "Feast wrote nothing into Redis"


def test_profile_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    monkeypatch.delenv(REDIS_ENV, raising=False)
    assert profile_file(SOURCE).name == "feature_store.yaml"
    assert profile_file(SOURCE, "redis").name == "feature_store.redis.yaml"
    redis_default = open_store(SOURCE, "redis")
    assert redis_default.config.online_store.connection_string == "localhost:6379"
    monkeypatch.setenv(PROFILE_ENV, "redis")
    monkeypatch.setenv(REDIS_ENV, "redis.internal:6380,password=x")
    store = open_store(SOURCE)
    assert store.config.online_store.connection_string == "redis.internal:6380,password=x"
    assert store.config.registry.path == "data/registry_redis.db"
    monkeypatch.setenv(PROFILE_ENV, "cassandra")
    with pytest.raises(ValueError, match="unknown Feast profile 'cassandra'"):
        open_store(SOURCE)


@pytest.fixture(scope="module")
def corrected_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[FeatureStore, pd.DataFrame]:
    """A small repository whose user snapshots are sometimes recomputed under the same event timestamp."""
    path = _copy_repo(tmp_path_factory.mktemp("feast_corrected") / "feature_repo")
    spec = DatasetSpec(seed=11, n_users=100, n_merchants=10, days=10, n_transactions=200, correction_rate=0.2)
    files = generate(path / "data", spec)
    apply(path, OBJECTS, profile="sqlite")
    store = materialize(path, end=datetime.now(UTC), profile="sqlite")
    users = pd.read_parquet(files.user_stats)
    keys = ["user_id", "event_timestamp"]
    corrections = users[users.duplicated(keys, keep=False)].sort_values("created_timestamp")
    return store, corrections.drop_duplicates(keys, keep="last").reset_index(drop=True)


def test_online_serves_the_correction(corrected_store: tuple[FeatureStore, pd.DataFrame]) -> None:
    store, corrections = corrected_store
    newest = corrections[corrections["event_timestamp"] == corrections["event_timestamp"].max()]
    assert len(newest) > 5
    rows = [{"user_id": int(u), "merchant_id": 1} for u in newest["user_id"]]

    got = store.get_online_features(features=["user_stats:tx_last_24h"], entity_rows=rows).to_dict()

    assert got["tx_last_24h"] == newest["tx_last_24h"].tolist()


@pytest.mark.xfail(
    strict=True,
    reason="Feast 0.67 file (dask) offline store: the latest created_timestamp does not reliably win a tie "
    "on the event timestamp in get_historical_features; when this passes, turn corrections on by default",
)
def test_historical_serves_the_correction(corrected_store: tuple[FeatureStore, pd.DataFrame]) -> None:
    store, corrections = corrected_store
    entity_df = corrections[["user_id", "event_timestamp"]].assign(merchant_id=1)
    entity_df["event_timestamp"] += pd.Timedelta(hours=2)

    got = training_frame(store, "fraud_v1", entity_df=entity_df)

    assert got["tx_last_24h"].tolist() == corrections["tx_last_24h"].astype(float).tolist()
