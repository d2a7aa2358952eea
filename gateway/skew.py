"""Training-serving skew check: the input the gateway builds (or built) vs the training path.

Each checked row is an entity row at a time, its model input built twice: (a) as served, and
(b) as training builds it (``get_historical_features``, a point-in-time join through
``feast_access.training.training_frame``, same feature service, at the row's time). The entity
rows come from one source (``gateway skew-check``):

- the payload log (gateway/payload_log/): the rows the gateway actually served, with the
  values it sent the model (``{view}__{feature}`` columns, request fields under their names),
  recomputed offline at their ``__log_timestamp``;
- a file of entity rows (Parquet/CSV: the model's join keys, optionally ``event_timestamp``,
  default now): (a) is an online read now, as the gateway does it; give times after the
  latest materialized data, as the online store holds only the latest values;
- neither: a sample of the feature repository's labeled transactions (the demo's), now.

The entity keys are the model's (its spec's ``entity_keys`` and ``feature_service``), whatever
their names and types. Any difference in any column is reported with the entity, the column
and both values: numeric columns within ``rtol`` (the served value is the float32/int64/bool
the model takes), string columns exactly. A null compares as the gateway's stand-in for a
missing value (NaN; ``""`` for a string, gateway/assemble.py): the check is about the stores
agreeing, not the stand-in policy. Request-time fields are the caller's, the same in both paths.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from feast_access import EVENT_TIMESTAMP
from gateway.assemble import assemble_columns
from gateway.catalog import ModelSpec
from gateway.request import EntityRow, RequestValues
from gateway.service import Service
from gateway.values import Scalar

_HASHED = re.compile(r"^[0-9a-f]{64}$")  # a key the payload log hashed (layout.hash_key)


class SkewInputError(ValueError):
    """The entity rows cannot be used (a file that is not Parquet/CSV, a missing key column,
    hashed keys); the message is one line that says which and why."""


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


def _stand_in(dtype: str, value: Any) -> Any:
    """A logged null as what the gateway sent the model in its place."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "" if dtype == "string" else math.nan
    return value


def read_entity_file(path: Path) -> pd.DataFrame:
    """A Parquet or CSV file of entity rows; SkewInputError when it is neither or unreadable."""
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv"):
        raise SkewInputError(f"--entities {path}: not a .parquet or .csv file")
    try:
        frame = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SkewInputError(f"--entities {path} cannot be read as {suffix[1:]}: {first}") from None
    if frame.empty:
        raise SkewInputError(f"--entities {path} has no rows")
    return frame


def _keys_of(spec: ModelSpec, frame: pd.DataFrame, where: str) -> list[EntityRow]:
    """The frame's entity keys as the gateway reads them (int64 or string), checked."""
    missing = [k for k in spec.entity_key_names if k not in frame.columns]
    if missing:
        raise SkewInputError(
            f"{where} has no column {', '.join(missing)} (model {spec.name!r} is keyed by "
            f"{', '.join(spec.entity_key_names)}; its columns: {', '.join(map(str, frame.columns))})"
        )
    rows: list[EntityRow] = [{} for _ in range(len(frame))]
    for key in spec.entity_keys:
        values = frame[key.name]
        if values.isna().any():
            raise SkewInputError(f"{where}: column {key.name} has empty values")
        if values.dtype == object and values.map(lambda v: bool(_HASHED.match(str(v)))).all():
            raise SkewInputError(
                f"{where}: the keys in {key.name} are hashed (GATEWAY_PAYLOAD_LOG_HASH_KEYS): "
                "the offline store cannot be asked for them"
            )
        if key.dtype == "int64":
            try:
                ints = pd.to_numeric(values, errors="raise")
            except (TypeError, ValueError):
                raise SkewInputError(f"{where}: column {key.name} is not whole numbers (int64 key)") from None
            if not (ints == ints.round()).all():
                raise SkewInputError(f"{where}: column {key.name} is not whole numbers (int64 key)")
            plain: list[Any] = [int(v) for v in ints]
        else:
            plain = [str(v) for v in values]
        for row, value in zip(rows, plain, strict=True):
            row[key.name] = value
    return rows


def _times(frame: pd.DataFrame, column: str | None, where: str) -> pd.Series:
    """Each row's time as nanosecond UTC, the dtype Feast's own tables use (a coarser unit
    comes back from the join as objects and no longer merges)."""
    if column is None or column not in frame.columns:
        now = pd.Timestamp(datetime.now(UTC)).as_unit("ns")
        return pd.Series([now] * len(frame), dtype="datetime64[ns, UTC]")
    try:
        return pd.Series(pd.to_datetime(frame[column].to_numpy(), utc=True)).astype("datetime64[ns, UTC]")
    except (TypeError, ValueError):
        raise SkewInputError(f"{where}: column {column} is not a time") from None


async def skew_check(
    service: Service,
    model: str,
    entity_rows: list[EntityRow],
    rtol: float = 1e-6,
    times: pd.Series | None = None,
) -> SkewReport:
    """``entity_rows`` read online now (the gateway's path) vs the training path at ``times``
    (each row's; default now)."""
    spec = await service.predictor.spec(model)
    features = service.predictor.features
    # Request-time fields are the caller's: give both paths the same values (zeros).
    request_values: list[RequestValues] = [
        {name: _ZERO[spec.dtype(name)] for name in spec.request_fields} for _ in entity_rows
    ]
    online = await features.fetch(spec.feature_service, entity_rows)
    served = assemble_columns(spec, request_values, online.values, len(entity_rows))
    return _compare(service, spec, entity_rows, dict(served), times, rtol)


async def skew_check_frame(
    service: Service, model: str, frame: pd.DataFrame, where: str, rtol: float = 1e-6
) -> SkewReport:
    """A file's entity rows (the model's keys, optionally ``event_timestamp``)."""
    spec = await service.predictor.spec(model)
    rows = _keys_of(spec, frame, where)
    return await skew_check(service, model, rows, rtol, _times(frame, EVENT_TIMESTAMP, where))


async def skew_check_logged(
    service: Service, model: str, logged: pd.DataFrame, where: str, rtol: float = 1e-6
) -> SkewReport:
    """Payload-log rows: what was served (the logged model inputs) vs the training path at
    each row's ``__log_timestamp``."""
    from gateway.payload_log.layout import LOG_TIMESTAMP, feature_column

    spec = await service.predictor.spec(model)
    rows = _keys_of(spec, logged, where)
    views = service.predictor.features.feature_views(spec.feature_service)
    served: dict[str, list[Any]] = {}
    for column in spec.columns:
        name = column.name
        log_column = name if name in spec.request_fields else feature_column(views.get(name, ""), name)
        if log_column not in logged.columns:
            raise SkewInputError(f"{where} has no column {log_column} (model {spec.name!r} input {name})")
        served[name] = [_stand_in(column.dtype, v) for v in logged[log_column].tolist()]
    return _compare(service, spec, rows, served, _times(logged, LOG_TIMESTAMP, where), rtol)


def _compare(
    service: Service,
    spec: ModelSpec,
    entity_rows: list[EntityRow],
    served: dict[str, Any],
    times: pd.Series | None,
    rtol: float,
) -> SkewReport:
    from feast_access.training import training_frame

    entity_df = pd.DataFrame(entity_rows)
    if times is None:
        times = _times(entity_df, None, "")
    entity_df[EVENT_TIMESTAMP] = times.to_numpy()
    entity_df[EVENT_TIMESTAMP] = entity_df[EVENT_TIMESTAMP].astype("datetime64[ns, UTC]")
    offline = training_frame(service.predictor.features.store, spec.feature_service, entity_df)

    report = SkewReport(spec.name, spec.feature_service, len(entity_rows), list(spec.feature_names))
    # request fields are the caller's: the training path takes what was served
    trained = {
        c.name: list(served[c.name]) if c.name in spec.request_fields else offline[c.name].tolist()
        for c in spec.columns
    }
    for i, keys in enumerate(entity_rows):
        for column in spec.columns:
            a, b = _plain(served[column.name][i]), _plain(trained[column.name][i])
            if not _same(column.dtype, a, b, rtol):
                report.mismatches.append(
                    {
                        "entity": keys,
                        "at": pd.Timestamp(times.iloc[i]).isoformat(),
                        "column": column.name,
                        "online": a,
                        "training": b,
                    }
                )
    return report
