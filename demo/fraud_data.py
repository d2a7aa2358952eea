"""Synthetic card-transaction data for the demo: a fraud label that depends on the features.

Numbers, not people: every row is drawn from fixed distributions with a seeded generator, so
the demo trains the same model on every machine.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FEATURES = ["amount", "hour", "merchant_risk", "user_age_days", "tx_last_24h"]


def transactions(rows: int = 4000, seed: int = 7) -> tuple[pd.DataFrame, np.ndarray]:
    """(features, is_fraud); about 5% of merchant_risk values are missing, as in real feeds."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "amount": rng.lognormal(3.5, 1.2, rows),
            "hour": rng.integers(0, 24, rows).astype(float),
            "merchant_risk": rng.beta(2, 5, rows),
            "user_age_days": rng.integers(1, 4000, rows).astype(float),
            "tx_last_24h": rng.poisson(3, rows).astype(float),
        }
    )
    night = ((X.hour < 6) | (X.hour > 22)).astype(float)
    logit = (
        0.004 * X.amount
        + 4.0 * X.merchant_risk
        + 0.9 * night
        - 0.0008 * X.user_age_days
        + 0.25 * X.tx_last_24h
        - 4.0
    )
    y = (rng.uniform(size=rows) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    X.loc[rng.uniform(size=rows) < 0.05, "merchant_risk"] = np.nan
    return X, y
