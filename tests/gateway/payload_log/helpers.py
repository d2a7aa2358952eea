"""Helpers of the tests in this folder."""

from __future__ import annotations

import time

import numpy as np

from gateway.catalog import Column, ModelSpec, OutputRoles
from gateway.observe import Observation
from gateway.payload_log import LogConfig, PayloadLog
from gateway.responses import Prediction

SPEC = ModelSpec(
    name="fraud-detector",
    triton_model="fraud-detector",
    version="3",
    layout="columns",
    input_name="",
    columns=(
        Column("tx_last_24h", "int64"),
        Column("avg_amount_30d", "float32"),
        Column("merchant_category", "string"),
        Column("amount", "float32"),
        Column("channel", "string"),
    ),
    feature_service="fraud_v1",
    entity_keys=(Column("user_id", "int64"), Column("merchant_id", "int64")),
    request_fields=("amount", "channel"),
    kind="binary",
    classes=(0, 1),
    roles=OutputRoles(probabilities="probabilities"),
    outputs=("probabilities",),
)


def observation(n: int, seed: int = 0, at: float | None = None, sizes: tuple[int, ...] = ()) -> Observation:
    rng = np.random.default_rng(seed)
    avg = rng.normal(50, 10, n).astype(np.float32)
    avg[0] = np.nan  # the store had no value: Triton got the stand-in
    category = np.array(["grocery", "", *(["travel"] * (n - 2))], dtype=object)
    inputs = {
        "tx_last_24h": rng.integers(0, 9, n).reshape(n, 1),
        "avg_amount_30d": avg.reshape(n, 1),
        "merchant_category": category.reshape(n, 1),
        "amount": rng.uniform(1, 900, n).astype(np.float32).reshape(n, 1),
        "channel": np.array(["web", "pos", "app"] * n, dtype=object)[:n].reshape(n, 1),
    }
    scores = rng.uniform(0, 1, n)
    predictions = [
        Prediction(defaults_used=i < 2, score=float(s), label=int(s >= 0.5), probabilities=(1 - s, s))
        for i, s in enumerate(scores)
    ]
    keys = [{"user_id": int(u), "merchant_id": int(m)} for u, m in rng.integers(1, 500, (n, 2))]
    times = {"avg_amount_30d": [None] + [1_700_000_000 + i for i in range(1, n)]}
    return Observation(SPEC, "3", inputs, predictions, keys, at or time.time(), sizes, times)


def opened(sink: object, **config: object) -> PayloadLog:
    return PayloadLog(LogConfig(**config), sink, lambda _: VIEWS)  # type: ignore[arg-type]


VIEWS = {"avg_amount_30d": "user_stats", "tx_last_24h": "user_stats", "merchant_category": "merchant_stats"}
