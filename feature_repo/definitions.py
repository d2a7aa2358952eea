"""Feast objects of the fraud demo: two entities, two feature views over parquet, one feature service.

Source paths are relative: Feast resolves them against the repository the store was opened on, so the
same objects serve this folder, a copy of it, or a deployment that mounts it elsewhere.
"""

from __future__ import annotations

from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Float64, Int64, String

from feast_access import EVENT_TIMESTAMP
from feature_repo import SERVICE

# Snapshots are daily; a TTL of two days tolerates one missed snapshot before a user's features go
# stale (null) rather than silently serving week-old counts.
USER_TTL = timedelta(days=2)
# Merchant risk moves slowly and is recomputed less reliably; a week is still meaningful.
MERCHANT_TTL = timedelta(days=7)

USER_STATS_PATH = "data/user_stats.parquet"
MERCHANT_STATS_PATH = "data/merchant_stats.parquet"
CREATED_TIMESTAMP = "created_timestamp"

user = Entity(
    name="user",
    join_keys=["user_id"],
    value_type=ValueType.INT64,
    description="A card holder.",
)

merchant = Entity(
    name="merchant",
    join_keys=["merchant_id"],
    value_type=ValueType.INT64,
    description="A merchant accepting card payments.",
)

user_stats_source = FileSource(
    name="user_stats_source",
    path=USER_STATS_PATH,
    timestamp_field=EVENT_TIMESTAMP,
    created_timestamp_column=CREATED_TIMESTAMP,
)

merchant_stats_source = FileSource(
    name="merchant_stats_source",
    path=MERCHANT_STATS_PATH,
    timestamp_field=EVENT_TIMESTAMP,
    created_timestamp_column=CREATED_TIMESTAMP,
)

user_stats = FeatureView(
    name="user_stats",
    entities=[user],
    ttl=USER_TTL,
    schema=[
        Field(name="user_age_days", dtype=Int64, description="Days since the account was opened."),
        Field(name="tx_last_24h", dtype=Int64, description="Transactions in the 24 h before the snapshot."),
        Field(name="avg_amount_30d", dtype=Float64, description="Mean transaction amount over 30 days."),
    ],
    source=user_stats_source,
    online=True,
)

merchant_stats = FeatureView(
    name="merchant_stats",
    entities=[merchant],
    ttl=MERCHANT_TTL,
    schema=[
        Field(name="merchant_risk", dtype=Float64, description="Risk score in [0, 1]."),
        Field(name="merchant_fraud_rate_30d", dtype=Float64, description="Fraud share over 30 days."),
        # A string feature: the model one-hot encodes it inside its own graph, so the gateway
        # sends the value as read and nothing outside the model knows the categories.
        Field(
            name="merchant_category",
            dtype=String,
            description="What the merchant sells, e.g. grocery or digital_goods.",
        ),
    ],
    source=merchant_stats_source,
    online=True,
)

# The order here is the order of the model's input vector: the gateway and training both read it back
# through feast_access.service.feature_names(), never from a second hand-written list.
fraud_v1 = FeatureService(
    name=SERVICE,
    features=[
        user_stats[["user_age_days", "tx_last_24h", "avg_amount_30d"]],
        merchant_stats[["merchant_risk", "merchant_fraud_rate_30d", "merchant_category"]],
    ],
    description="Inputs of the fraud model, version 1.",
)

# What `apply` registers, in dependency order.
OBJECTS: list[Entity | FeatureView | FeatureService] = [user, merchant, user_stats, merchant_stats, fraud_v1]
