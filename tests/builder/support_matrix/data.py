"""The small generated data sets of the support matrix, one per input shape and target.

Every set has ``ROWS`` rows from a fixed seed; the features are non-negative and of moderate
scale (as tabular data users register: amounts, hours, counts, rates), so that estimators
which need non-negative input (the naive Bayes family) can be fitted too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ROWS = 90
SEED = 0
NUMERIC = ["amount", "hour", "merchant_risk", "tx_last_24h", "account_years"]
COUNTRIES = ["us", "de", "fr", "br", "jp"]
CODES = ["merchant_code", "device_code"]

# Input shapes: the columns of the matrix.
DATAFRAME = "DataFrame"
NUMPY = "numpy"
STRINGS = "strings"
INT_CATEGORIES = "int categories"
NAN = "NaN"
SHAPES = (DATAFRAME, NUMPY, STRINGS, INT_CATEGORIES, NAN)
SHAPE_NOTES = {
    DATAFRAME: "a pandas DataFrame of 5 float columns (MLflow column signature)",
    NUMPY: "the same values as a float64 numpy array (MLflow tensor signature)",
    STRINGS: "numeric columns plus a string column `country`; scikit-learn models are a Pipeline of "
    "`ColumnTransformer(StandardScaler on numerics, OneHotEncoder on country)` and the estimator",
    INT_CATEGORIES: "numeric columns plus two int64 category codes; scikit-learn models one-hot the codes "
    "in a ColumnTransformer (HistGradientBoosting takes them as `categorical_features`), "
    "LightGBM as `categorical_feature`, CatBoost as `cat_features`, XGBoost as plain numbers",
    NAN: "the numeric DataFrame with NaN in two columns; estimators that accept NaN natively take it "
    "as is, the others get a `SimpleImputer` in front",
}

# Targets.
BINARY = "binary"
MULTICLASS = "multiclass"
REGRESSION = "regression"
TWO_TARGETS = "2 targets"
TWO_LABELS = "2 labels"
NO_TARGET = "none"


def _columns() -> pd.DataFrame:
    """Every column any shape uses, drawn once from the seed (so each shape has the same numerics)."""
    rng = np.random.default_rng(SEED)
    return pd.DataFrame(
        {
            "amount": rng.lognormal(1.0, 0.6, ROWS),
            "hour": rng.integers(0, 24, ROWS).astype(float),
            "merchant_risk": rng.uniform(0, 1, ROWS),
            "tx_last_24h": rng.poisson(2, ROWS).astype(float),
            "account_years": rng.uniform(0, 10, ROWS),
            "country": rng.choice(COUNTRIES, ROWS),
            "merchant_code": rng.integers(0, 6, ROWS),
            "device_code": rng.integers(0, 3, ROWS),
        }
    )


def features(shape: str) -> pd.DataFrame | np.ndarray:
    """The training features of one input shape (the same numeric values under every shape)."""
    columns = _columns()
    X = columns[NUMERIC].copy()
    if shape == NUMPY:
        return X.to_numpy()
    if shape == STRINGS:
        X["country"] = columns.country
    elif shape == INT_CATEGORIES:
        X[CODES] = columns[CODES]
    elif shape == NAN:
        X.loc[X.index[::7], "merchant_risk"] = np.nan
        X.loc[X.index[3::9], "amount"] = np.nan
    return X


def example(X: pd.DataFrame | np.ndarray) -> pd.DataFrame | np.ndarray:
    """The input example logged with the model (rows 0 and 3 carry the NaN of the NaN shape)."""
    return X.iloc[:8] if isinstance(X, pd.DataFrame) else X[:8]


def target(kind: str) -> np.ndarray | None:
    """A target that depends on the numeric features, so every model learns something."""
    rng = np.random.default_rng(SEED + 1)
    X = _columns()
    score = 0.4 * X.amount + 2.0 * X.merchant_risk + 0.3 * X.tx_last_24h - 0.1 * X.account_years
    score += 1.5 * X.merchant_code.isin([1, 4]) + 0.5 * (X.country == "br")
    score = (score - score.mean()).to_numpy() + rng.normal(0, 0.3, ROWS)
    if kind == BINARY:
        return (score > 0).astype(int)
    if kind == MULTICLASS:
        return np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    if kind == REGRESSION:
        return score + 3.0  # positive, for Poisson/Gamma/Tweedie regressors
    if kind == TWO_TARGETS:
        return np.column_stack([score + 3.0, 0.5 * X.hour.to_numpy() + score])
    if kind == TWO_LABELS:
        return np.column_stack([score > 0, X.hour.to_numpy() > 11]).astype(int)
    return None
