"""Training-serving skew check: the input the gateway builds online vs the training path.

For a sample of entities, at one point in time, build each model-input row twice: (a) as the
gateway does (online store read through ``OnlineFeatures`` + the model's column order from
Triton), and (b) as training does (``get_historical_features`` point-in-time join through
``feature_repo.store.training_frame``, same feature service, timestamp = now). Any difference
in any column is reported with the entity, the column and both values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from gateway.core import assemble_input
from gateway.service import Service


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


def _same(a: float, b: float, rtol: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=rtol, abs_tol=rtol)


async def skew_check(
    service: Service, model: str, entity_rows: list[dict[str, int]], rtol: float = 1e-6
) -> SkewReport:
    from feature_repo.store import training_frame

    spec = await service.predictor.spec(model)
    features = service.predictor.features
    # Request-time fields are the caller's: give both paths the same values (zeros).
    request_values = [dict.fromkeys(spec.request_fields, 0.0) for _ in entity_rows]
    online = await features.fetch(spec.feature_service, entity_rows)
    served = assemble_input(spec, request_values, online.values, len(entity_rows))

    # nanosecond UTC timestamps, the dtype Feast's own tables use (a coarser unit comes back
    # from the join as objects and no longer merges)
    now = pd.Timestamp(datetime.now(UTC)).as_unit("ns")
    entity_df = pd.DataFrame(entity_rows)
    entity_df["event_timestamp"] = pd.Series([now] * len(entity_df), dtype="datetime64[ns, UTC]")
    for name in spec.request_fields:
        entity_df[name] = 0.0
    store = features.store
    offline = training_frame(store, spec.feature_service, entity_df)
    trained = offline[list(spec.feature_names)].to_numpy(dtype=np.float64)

    report = SkewReport(model, spec.feature_service, len(entity_rows), list(spec.feature_names))
    for i, keys in enumerate(entity_rows):
        for j, column in enumerate(spec.feature_names):
            a, b = float(served[i, j]), float(trained[i, j])
            # the served tensor is float32, like the model input in training (see builder)
            if not _same(a, float(np.float32(b)), rtol):
                report.mismatches.append({"entity": keys, "column": column, "online": a, "training": b})
    return report
