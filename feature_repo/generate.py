"""Seeded synthetic data for the fraud demo: daily feature snapshots and labeled transactions.

Writes, under ``out_dir`` (by default ``feature_repo/data/``):

- ``user_stats.parquet``: daily snapshots per user (some days missing; with ``correction_rate`` > 0,
  some rows recomputed later: same event timestamp, later created timestamp, other values);
- ``merchant_stats.parquet``: daily snapshots per merchant, with its (fixed) ``merchant_category``;
- ``transactions.parquet``: the entity rows for training (user_id, merchant_id, event_timestamp, amount,
  hour, channel, is_fraud), whose label depends on the point-in-time features (the string category
  included) and on the request-time channel, so a model trained on them has something to learn and a
  skewed join shows up as lost accuracy.

Timestamps are relative to ``end`` (default: now, floored to the hour), because Feast's first
incremental materialization starts at ``now - ttl`` and must find the latest snapshots.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from feast_access import EVENT_TIMESTAMP
from feature_repo.definitions import CREATED_TIMESTAMP, MERCHANT_TTL, USER_TTL

USER_FEATURES = ["user_age_days", "tx_last_24h", "avg_amount_30d"]
MERCHANT_FEATURES = ["merchant_risk", "merchant_fraud_rate_30d", "merchant_category"]

DEFAULT_OUT_DIR = Path(__file__).resolve().parent / "data"
# A snapshot is written a few minutes after the moment it describes.
CREATED_LAG = timedelta(minutes=5)
# A correction is the same snapshot recomputed an hour later.
CORRECTION_LAG = timedelta(hours=1)

# What a merchant sells, and how much that moves the fraud log-odds: resellable goods and
# instant digital delivery attract card testers, everyday purchases do not. Small next to
# merchant_risk, so the category helps the model without being the whole story.
MERCHANT_CATEGORIES: dict[str, float] = {
    "grocery": -0.5,
    "fuel": -0.3,
    "restaurants": -0.2,
    "fashion": 0.0,
    "travel": 0.3,
    "electronics": 0.5,
    "gaming": 0.6,
    "digital_goods": 0.8,
}
# Where the payment was made (sent by the caller, not stored): share of transactions, log-odds.
# A card-present payment (pos) is the hardest to make with a stolen card number.
CHANNELS: dict[str, tuple[float, float]] = {"web": (0.45, 0.4), "app": (0.35, 0.0), "pos": (0.20, -0.5)}


@dataclass(frozen=True)
class DatasetSpec:
    """What `generate` draws: the same spec (seed and end included) gives the same files."""

    seed: int = 7
    n_users: int = 500
    n_merchants: int = 100
    days: int = 30
    n_transactions: int = 5000
    end: datetime | None = None  # the last snapshot; None: now, floored to the hour
    correction_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.end is not None and self.end.tzinfo is None:
            raise ValueError("end must be timezone-aware (UTC)")

    def resolved_end(self) -> datetime:
        """``end`` in UTC, or now floored to the hour when not given."""
        if self.end is None:
            return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        return self.end.astimezone(UTC)


DEFAULT_SPEC = DatasetSpec()


@dataclass(frozen=True)
class GeneratedFiles:
    """Where `generate` wrote its tables, and the time span they cover."""

    user_stats: Path
    merchant_stats: Path
    transactions: Path
    start: datetime
    end: datetime


def _snapshot_times(end: datetime, days: int) -> pd.DatetimeIndex:
    return pd.DatetimeIndex([end - timedelta(days=days - 1 - k) for k in range(days)])


def _user_stats(
    rng: np.random.Generator, n_users: int, times: pd.DatetimeIndex, correction_rate: float
) -> pd.DataFrame:
    days = len(times)
    # Users join during the first third of the window: early entity rows for late users have no
    # features at all, which the point-in-time join must return as nulls.
    first_day = rng.integers(0, max(1, days // 3), size=n_users)
    age_at_start = rng.integers(1, 2000, size=n_users)
    tx_rate = rng.gamma(shape=2.0, scale=1.5, size=n_users)
    base_amount = rng.lognormal(mean=3.5, sigma=0.6, size=n_users)

    rows = []
    for uid in range(n_users):
        for d in range(first_day[uid], days):
            # About one snapshot in ten is missing (the batch job failed that day); never the first.
            if d > first_day[uid] and rng.random() < 0.1:
                continue
            rows.append(
                (
                    uid + 1,
                    times[d],
                    int(age_at_start[uid] + d),
                    int(rng.poisson(tx_rate[uid])),
                    float(round(base_amount[uid] * rng.uniform(0.8, 1.2), 2)),
                )
            )
    df = pd.DataFrame(
        rows, columns=["user_id", EVENT_TIMESTAMP, "user_age_days", "tx_last_24h", "avg_amount_30d"]
    )
    df[CREATED_TIMESTAMP] = df[EVENT_TIMESTAMP] + CREATED_LAG

    if correction_rate <= 0:
        return df
    # Corrections: same event timestamp, later created timestamp, different values; the latest created
    # should win. Off by default: Feast 0.67's file offline store does not honour that tie-break in
    # get_historical_features (materialization does), see README.md.
    fixes = df.sample(frac=correction_rate, random_state=int(rng.integers(2**31))).copy()
    fixes["tx_last_24h"] = fixes["tx_last_24h"] + 10
    fixes["avg_amount_30d"] = (fixes["avg_amount_30d"] * 1.5).round(2)
    fixes[CREATED_TIMESTAMP] = fixes[EVENT_TIMESTAMP] + CORRECTION_LAG
    return pd.concat([df, fixes], ignore_index=True)


def _merchant_stats(rng: np.random.Generator, n_merchants: int, times: pd.DatetimeIndex) -> pd.DataFrame:
    risk = rng.beta(2.0, 5.0, size=n_merchants)
    # Drawn independently of the risk score: the model can only learn the category's effect from
    # the category itself.
    category = rng.choice(list(MERCHANT_CATEGORIES), size=n_merchants)
    rows = []
    for mid in range(n_merchants):
        for d, ts in enumerate(times):
            if d > 0 and rng.random() < 0.05:
                continue
            r = float(np.clip(risk[mid] + rng.normal(0.0, 0.03), 0.0, 1.0))
            rate = float(np.clip(0.1 * r + rng.normal(0.0, 0.005), 0.0, 1.0))
            rows.append((mid + 1, ts, round(r, 4), round(rate, 5), str(category[mid])))
    df = pd.DataFrame(rows, columns=["merchant_id", EVENT_TIMESTAMP, *MERCHANT_FEATURES])
    df[CREATED_TIMESTAMP] = df[EVENT_TIMESTAMP] + CREATED_LAG
    return df


def point_in_time(
    entity_df: pd.DataFrame, source: pd.DataFrame, key: str, ttl: timedelta, features: list[str]
) -> pd.DataFrame:
    """The features of the latest source row at or before each entity row's timestamp, within ttl.

    A plain pandas restatement of Feast's point-in-time join (latest event timestamp wins, ties broken
    by the latest created timestamp); the generator labels with it and the tests check Feast against it.
    Returns one row per entity row, in entity_df's order, with only the feature columns.
    """
    latest = (
        source.sort_values([EVENT_TIMESTAMP, CREATED_TIMESTAMP])
        .drop_duplicates([key, EVENT_TIMESTAMP], keep="last")
        .sort_values(EVENT_TIMESTAMP)
    )
    left = entity_df[[key, EVENT_TIMESTAMP]].reset_index(drop=True).assign(_row=lambda d: d.index)
    joined = pd.merge_asof(
        left.sort_values(EVENT_TIMESTAMP),
        latest[[key, EVENT_TIMESTAMP, *features]],
        on=EVENT_TIMESTAMP,
        by=key,
        direction="backward",
        tolerance=pd.Timedelta(ttl),
    )
    return joined.sort_values("_row")[features].reset_index(drop=True)


def _transactions(
    rng: np.random.Generator,
    spec: DatasetSpec,
    start: datetime,
    end: datetime,
    users: pd.DataFrame,
    merchants: pd.DataFrame,
) -> pd.DataFrame:
    n_tx, n_users, n_merchants = spec.n_transactions, spec.n_users, spec.n_merchants
    # Distinct whole seconds: Feast's file store merges entity rows that share keys and timestamp.
    span = int((end - start).total_seconds())
    offsets = np.sort(rng.choice(span, size=n_tx, replace=False))
    ts = pd.to_datetime(start) + pd.to_timedelta(offsets, unit="s")
    tx = pd.DataFrame(
        {
            "user_id": rng.integers(1, n_users + 1, size=n_tx),
            "merchant_id": rng.integers(1, n_merchants + 1, size=n_tx),
            EVENT_TIMESTAMP: ts,
            "amount": np.round(rng.lognormal(mean=3.6, sigma=0.9, size=n_tx), 2),
        }
    )
    tx["hour"] = tx[EVENT_TIMESTAMP].dt.hour.astype("int64")
    shares = np.array([share for share, _ in CHANNELS.values()])
    tx["channel"] = rng.choice(list(CHANNELS), size=n_tx, p=shares / shares.sum()).astype(object)

    u = point_in_time(tx, users, "user_id", USER_TTL, USER_FEATURES)
    m = point_in_time(tx, merchants, "merchant_id", MERCHANT_TTL, MERCHANT_FEATURES)
    ratio = tx["amount"] / u["avg_amount_30d"]
    logit = (
        # The category and channel terms add about +0.2 on average; the intercept takes it back,
        # so the base fraud rate stays near 13 %.
        -4.7
        + 5.0 * m["merchant_risk"].fillna(0.5)
        + 0.25 * u["tx_last_24h"].fillna(3)
        + 1.5 * (ratio.fillna(1.0) > 3.0)
        - 0.0008 * u["user_age_days"].fillna(0)
        + 0.8 * (tx["hour"] < 6)
        # A merchant without a fresh snapshot has no known category: no effect.
        + m["merchant_category"].map(MERCHANT_CATEGORIES).fillna(0.0).astype(float)
        + tx["channel"].map({name: effect for name, (_, effect) in CHANNELS.items()}).astype(float)
        # A transaction with no recent user snapshot is suspicious in itself.
        + 1.0 * u["user_age_days"].isna()
    )
    p = 1.0 / (1.0 + np.exp(-logit.to_numpy(dtype=float)))
    tx["is_fraud"] = (rng.random(n_tx) < p).astype("int64")
    return tx


def generate(out_dir: Path | str = DEFAULT_OUT_DIR, spec: DatasetSpec = DEFAULT_SPEC) -> GeneratedFiles:
    """Write the three parquet tables under out_dir; the same spec gives the same files."""
    end = spec.resolved_end()
    rng = np.random.default_rng(spec.seed)
    times = _snapshot_times(end, spec.days)
    users = _user_stats(rng, spec.n_users, times, spec.correction_rate)
    merchants = _merchant_stats(rng, spec.n_merchants, times)
    # Transactions start a day in, so most have features; those of users who joined later have none.
    start = times[0].to_pydatetime() + timedelta(days=1)
    tx = _transactions(rng, spec, start, end, users, merchants)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = GeneratedFiles(
        user_stats=out / "user_stats.parquet",
        merchant_stats=out / "merchant_stats.parquet",
        transactions=out / "transactions.parquet",
        start=times[0].to_pydatetime(),
        end=end,
    )
    users.to_parquet(files.user_stats, index=False)
    merchants.to_parquet(files.merchant_stats, index=False)
    tx.to_parquet(files.transactions, index=False)
    return files


def main(argv: list[str] | None = None) -> int:
    """`python -m feature_repo.generate [--out DIR] [--seed N] [--end ISO-8601]`."""
    parser = argparse.ArgumentParser(
        prog="python -m feature_repo.generate", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT_DIR, help="output folder (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--end", type=datetime.fromisoformat, default=None, help="last snapshot, with timezone"
    )
    args = parser.parse_args(argv)
    files = generate(args.out, DatasetSpec(seed=args.seed, end=args.end))
    for path in (files.user_stats, files.merchant_stats, files.transactions):
        print(f"wrote {path}")
    print(f"snapshots from {files.start.isoformat()} to {files.end.isoformat()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
