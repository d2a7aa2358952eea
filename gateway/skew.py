"""Training-serving skew check: the input the gateway builds online vs the training path.

For a sample of entities, at one point in time, build each model-input row twice: (a) as the
gateway does (online store read through ``OnlineFeatures`` + the model's column order from
Triton), and (b) as training does (``get_historical_features`` point-in-time join through
``feature_repo.store.training_frame``, same feature service, timestamp = now). Any difference
in any column is reported with the entity, the column and both values: numeric columns within
``rtol`` (the served value is the float32/int64/bool the model takes), string columns exactly.
A training-path null in a string column compares as ``""``, the gateway's stand-in for a missing
string (gateway/assemble.py): the check is about the stores agreeing, not the stand-in policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from gateway.assemble import assemble_columns
from gateway.request import EntityRow, RequestValues
from gateway.service import Service
from gateway.values import Scalar


@dataclass
class SkewReport:
    model: str
    feature_service: str
    entities: int
    columns: list[str]
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "feature_service": self.feature_service,
            "entities": self.entities,
            "columns": self.columns,
            "passed": self.passed,
            "mismatches": self.mismatches,
        }


# what each request field is set to, in both paths (the values are the caller's, not the stores')
_ZERO: dict[str, Scalar] = {"float32": 0.0, "int64": 0, "bool": False, "string": ""}


def _same(dtype: str, served: Any, trained: Any, rtol: float) -> bool:
    null = bool(pd.isna(trained))  # None, NaN, pd.NA: the join found no value
    if dtype == "string":
        return bool(served == ("" if null else trained))
    a = float(served)
    b = math.nan if null else float(trained)
    if dtype == "float32":
        b = float(np.float32(b))  # the served column is float32, like the model input in training
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=rtol, abs_tol=rtol)


def _plain(value: Any) -> Any:
    """A value as JSON can carry it (numpy scalars as Python ones)."""
    return value.item() if isinstance(value, np.generic) else value


async def skew_check(
    service: Service, model: str, entity_rows: list[EntityRow], rtol: float = 1e-6
) -> SkewReport:
    from feature_repo.store import training_frame

    spec = await service.predictor.spec(model)
    features = service.predictor.features
    # Request-time fields are the caller's: give both paths the same values (zeros).
    request_values: list[RequestValues] = [
        {name: _ZERO[spec.dtype(name)] for name in spec.request_fields} for _ in entity_rows
    ]
    online = await features.fetch(spec.feature_service, entity_rows)
    served = assemble_columns(spec, request_values, online.values, len(entity_rows))

    # nanosecond UTC timestamps, the dtype Feast's own tables use (a coarser unit comes back
    # from the join as objects and no longer merges)
    now = pd.Timestamp(datetime.now(UTC)).as_unit("ns")
    entity_df = pd.DataFrame(entity_rows)
    entity_df["event_timestamp"] = pd.Series([now] * len(entity_df), dtype="datetime64[ns, UTC]")
    for name in spec.request_fields:
        entity_df[name] = _ZERO[spec.dtype(name)]
    store = features.store
    offline = training_frame(store, spec.feature_service, entity_df)

    report = SkewReport(model, spec.feature_service, len(entity_rows), list(spec.feature_names))
    trained = {c.name: offline[c.name].tolist() for c in spec.columns}
    for i, keys in enumerate(entity_rows):
        for column in spec.columns:
            a, b = _plain(served[column.name][i]), _plain(trained[column.name][i])
            if not _same(column.dtype, a, b, rtol):
                report.mismatches.append({"entity": keys, "column": column.name, "online": a, "training": b})
    return report
