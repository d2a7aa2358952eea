"""The payload log since a time, binned into each version's reference bins and compared with them.

The reference is read from the model repository (``{repo}/{model}/{version}/metadata.json``,
key ``drift``; the ensemble's folder when the model has one): it keeps every exported version,
while Triton's config parameter ``drift.reference`` is one per model (the config is shared by
its versions) and only while Triton serves it, so a window that spans a rollout would be
compared with the wrong version's reference. Binning and statistics are the gateway's own
(gateway/stats/counts.py, stats.py), so the report says what ``gateway drift`` would have.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from gateway.catalog import ModelSpec, OutputRoles
from gateway.payload_log.layout import LOG_TIMESTAMP, VERSION
from gateway.payload_log.sink import PARTITION_KEY, open_filesystem
from gateway.stats.counts import categorical_bins, categorical_lookup, numeric_bins
from gateway.stats.measures import Drift, Thresholds, drift_of
from gateway.stats.reference import Binned, Reference, ReferenceError, parse_reference
from serving_contract import ContractError, ServingContract, keys

# the log column of the reference's prediction, by its name (gateway/stats/reference.py prediction_of)
PREDICTION_COLUMNS = {"score": "__score", "label": "__label", "value": "__value"}


class ReportError(Exception):
    """Nothing to report, or the inputs cannot be read; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class FeatureReport:
    binned: Binned | None  # None: no reference for this version
    name: str
    column: str | None  # the log column it was read from (None: not in the log)
    counts: np.ndarray | None  # the window's rows per reference bin, null bin last
    drift: Drift | None
    null_rate: float | None


@dataclass(frozen=True)
class VersionReport:
    version: str
    rows: int
    reference: Reference | None
    why_not: str  # when there is no reference: why
    features: tuple[FeatureReport, ...]  # model columns, then the prediction


@dataclass(frozen=True)
class Report:
    model: str
    location: str
    since: dt.datetime
    until: dt.datetime
    versions: tuple[VersionReport, ...]


def models_in(location: str) -> list[str]:
    """The models the payload log at ``location`` has folders for."""
    fs, root = open_filesystem(location)
    info = fs.get_file_info(root)
    if info.type != pafs.FileType.Directory:
        raise ReportError(f"no payload log at {location}")
    listing = fs.get_file_info(pafs.FileSelector(root))
    return sorted(i.base_name for i in listing if i.type == pafs.FileType.Directory)


def read_window(location: str, model: str, since: dt.datetime, until: dt.datetime) -> pd.DataFrame:
    """``model``'s logged rows with ``since <= __log_timestamp < until`` (every version)."""
    fs, root = open_filesystem(location)
    folder = f"{root.rstrip('/')}/{model}"
    if fs.get_file_info(folder).type != pafs.FileType.Directory:
        known = ", ".join(models_in(location)) or "none"
        raise ReportError(f"no payload log of model {model!r} at {location} (logged models: {known})")
    partitioning = ds.partitioning(pa.schema([(PARTITION_KEY, pa.date32())]), flavor="hive")
    dataset = ds.dataset(folder, filesystem=fs, format="parquet", partitioning=partitioning)
    fragments = list(dataset.get_fragments())
    if not fragments:
        return pd.DataFrame()
    # A new version may bring other columns: read every file under the union of their schemas.
    schema = pa.unify_schemas([f.physical_schema for f in fragments] + [partitioning.schema])
    dataset = ds.dataset(folder, filesystem=fs, format="parquet", partitioning=partitioning, schema=schema)
    start, end = pa.scalar(since, pa.timestamp("us", "UTC")), pa.scalar(until, pa.timestamp("us", "UTC"))
    where = (
        (ds.field(PARTITION_KEY) >= since.date())
        & (ds.field(PARTITION_KEY) <= until.date())
        & (ds.field(LOG_TIMESTAMP) >= start)
        & (ds.field(LOG_TIMESTAMP) < end)
    )
    return dataset.to_table(filter=where).to_pandas()


def read_reference(repo: Path, model: str, version: str) -> tuple[dict[str, Any] | None, str]:
    """The version's metadata.json (None, and why, when there is none or it has no reference).

    The ensemble's, when there is one (its reference describes what the gateway sends it). A
    generated ensemble's metadata (fused or steps) does not repeat the ``serving`` facts the
    reference is checked against: they are the bare model's of the same export, else the
    serving contract in the ensemble's (then the bare model's) config parameters."""
    found: dict[str, Any] | None = None
    serving: dict[str, Any] | None = None
    folders = (f"{model}_ensemble", model)
    for folder in folders:
        path = repo / folder / version / "metadata.json"
        if not path.is_file():
            continue
        try:
            metadata = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return None, f"{path} cannot be read ({exc})"
        serving = serving or metadata.get(keys.SERVING)
        if found is None:
            drift = metadata.get("drift") or {}
            if not drift.get("reference"):
                reason = drift.get("reason") or "no drift key"
                return None, f"the export recorded no reference ({reason}): {path}"
            found = metadata
    if found is None:
        return None, f"no {repo / model / version / 'metadata.json'}"
    for folder in folders:
        serving = serving or config_serving(repo / folder / "config.pbtxt")
    if not found.get(keys.SERVING) and serving:
        found = {**found, keys.SERVING: serving}
    return found, ""


def config_serving(path: Path) -> dict[str, Any] | None:
    """The serving facts (metadata.json's form) a Triton config's parameters hold; None without a
    readable config or columns in it. The config is shared by a model's versions: the latest
    export's facts."""
    from google.protobuf import text_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    try:
        config = text_format.Parse(path.read_text(), ModelConfig())
    except (OSError, text_format.ParseError):
        return None
    params = {k: v.string_value for k, v in config.parameters.items()}
    try:
        contract = ServingContract.from_parameters(params, check=False)
    except ContractError:
        return None
    return contract.facts() if contract.columns else None


def _spec(model: str, version: str, serving: dict[str, Any]) -> ModelSpec:
    """What parse_reference checks a reference against, from metadata.json's ``serving``."""
    contract = ServingContract.from_metadata({keys.SERVING: serving}, check=False)
    # the roles and targets decide which prediction the reference holds (binary without
    # probabilities: the label; several targets: none)
    # (metadata without outputs predates issue 19: a classifier then always had probabilities)
    roles = (
        contract.roles
        if keys.OUTPUTS in serving
        else OutputRoles(label="label", probabilities="probabilities")
    )
    return ModelSpec(
        name=model, triton_model=model, version=version, layout=contract.layout,  # type: ignore[arg-type]
        input_name="", columns=contract.columns or (), feature_service="", entity_keys=(), request_fields=(),
        kind=contract.kind or "binary", classes=contract.classes, roles=roles, outputs=(),
        legacy=contract.legacy, targets=contract.targets or 1,
    )  # fmt: skip


def _log_column(frame: pd.DataFrame, name: str) -> str | None:
    """A model column's log column: the request field itself, or the ``{view}__{feature}``."""
    if name in frame.columns:
        return name
    for column in frame.columns:
        if column.endswith(f"__{name}") and not column.startswith("__"):
            return str(column)
    return None


def _bins(binned: Binned, values: pd.Series, string: bool) -> np.ndarray:
    if binned.kind == "numeric":
        return numeric_bins(
            binned, pd.to_numeric(values, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        )
    plain = [None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in values.tolist()]
    return categorical_bins(categorical_lookup(binned, string), len(binned.categories), plain)


def _feature(
    frame: pd.DataFrame,
    name: str,
    column: str | None,
    binned: Binned | None,
    string: bool,
    thresholds: Thresholds,
) -> FeatureReport:
    if column is None:
        return FeatureReport(binned, name, None, None, None, None)
    values = frame[column]
    null_rate = float(values.isna().mean()) if len(values) else None
    if binned is None:
        return FeatureReport(None, name, column, None, None, null_rate)
    counts = np.bincount(_bins(binned, values, string), minlength=binned.bins)
    return FeatureReport(binned, name, column, counts, drift_of(binned, counts, thresholds), null_rate)


def _version(
    frame: pd.DataFrame, model: str, version: str, repo: Path | None, thresholds: Thresholds
) -> VersionReport:
    metadata, why = read_reference(repo, model, version) if repo else (None, "no --repo given")
    reference = None
    serving: dict[str, Any] = (metadata or {}).get(keys.SERVING) or {}
    dtypes: dict[str, str] = {}
    if metadata is not None:
        try:
            spec = _spec(model, version, serving)
            dtypes = dict(spec.dtypes)
            reference = parse_reference(json.dumps(metadata["drift"]["reference"]), spec)
        except (ReferenceError, ContractError) as exc:
            why = f"its reference is unusable: {exc}"
    features: list[FeatureReport] = []
    if reference is not None:
        for binned in reference.binned:
            is_prediction = binned is reference.prediction
            column = PREDICTION_COLUMNS.get(binned.name) if is_prediction else None
            column = column if column in frame.columns else _log_column(frame, binned.name)
            string = dtypes.get(binned.name) == "string" or (is_prediction and binned.kind == "categorical")
            features.append(_feature(frame, binned.name, column, binned, string, thresholds))
    else:  # no bins to compare in: each logged input and the prediction, null share only
        for column in frame.columns:
            if column.startswith("__") and column not in PREDICTION_COLUMNS.values():
                continue
            if column.endswith(("__timestamp", "__status")) or column == PARTITION_KEY:
                continue
            features.append(_feature(frame, str(column), str(column), None, False, thresholds))
    return VersionReport(version, len(frame), reference, why, tuple(features))


def build_report(
    location: str,
    model: str | None,
    since: dt.datetime,
    until: dt.datetime,
    repo: Path | None,
    thresholds: Thresholds | None = None,
) -> Report:
    """The report of ``model``'s rows logged in ``[since, until)``; ReportError when there are none."""
    if model is None:
        models = models_in(location)
        if len(models) != 1:
            raise ReportError(
                f"the payload log at {location} has {len(models)} models ({', '.join(models) or 'none'}): "
                "name one with --model",
                code=2 if models else 1,
            )
        model = models[0]
    frame = read_window(location, model, since, until)
    if frame.empty:
        raise ReportError(f"no rows of {model!r} logged at {location} since {since:%Y-%m-%d %H:%M:%S} UTC")
    thresholds = thresholds or Thresholds()
    versions = sorted(frame[VERSION].astype(str).unique(), key=lambda v: (len(v), v))
    return Report(
        model,
        location,
        since,
        until,
        tuple(_version(frame[frame[VERSION] == v], model, v, repo, thresholds) for v in versions),
    )
