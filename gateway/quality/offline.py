"""Offline quality: the payload log joined with labels from a file, scored per version.

The log (gateway/payload_log/layout.py) holds each served row's prediction id
(``__prediction_id``), the champion's answer (``__score``, ``__label``, ...) and, for a row a
challenger shadowed, its model, version and answer (``__challenger_score``, ...). Labels join
in one of two ways (docs/quality.md):

- **by id**, a file with ``prediction_id`` and ``label``: exact, the way the live feedback API
  pairs them;
- **by entity and time**, a file with the entity key columns, ``event_timestamp`` and
  ``label``: each label goes to the latest logged prediction of that entity at or before the
  label's event time (``pandas.merge_asof``, backward), for labels keyed the way the business
  keys them (a chargeback names the card and the transaction time, not a prediction id).

Per label the outcome is the live API's: ``accepted``, ``duplicate`` (a second label of a row,
the same), ``conflicting`` (a second, different one: the first in file order is kept),
``unknown`` (no logged prediction to join it to) or ``invalid`` (not a label of the model:
gateway/quality/contract.py ``truth_of``). The serving contract of each version (kind, classes,
decision threshold) comes from the model repository's ``metadata.json``, as the drift report
reads it (gateway/payload_log/report.py).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from feast_access import EVENT_TIMESTAMP
from gateway.payload_log.layout import ANSWERED_BY, LOG_TIMESTAMP, MODEL, VERSION
from gateway.payload_log.sink import PARTITION_KEY, open_filesystem
from gateway.quality.contract import Compact, Contract, Truth, evaluate, label_index, reliability, truth_of
from gateway.quality.feedback import OUTCOMES, Outcome
from gateway.quality.report import QualityReport, Role, VersionQuality
from serving_contract import keys

PREDICTION_ID: Final = "__prediction_id"
CHALLENGER: Final = "__challenger_"
CHALLENGER_MODEL: Final = "__challenger_model"
CHALLENGER_VERSION: Final = "__challenger_version"
ANSWERS: Final = ("score", "label", "probabilities", "scores", "value", "values", "outlier")
LABEL: Final = "label"
ID: Final = "prediction_id"
ROW: Final = "__row"  # the log row a label joined to


class OfflineError(Exception):
    """The inputs cannot make a report (exit 2: a bad input, said in one line); ``hint``: the
    fix, when this error knows it better than the command's general hint."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Labels:
    """Labels read from a file, and how they join: by ``prediction_id``, or by ``keys`` and time."""

    frame: pd.DataFrame
    source: str
    by: str  # "prediction_id", "entity and time" or "feature view" (frame has __row: the log row)
    keys: tuple[str, ...] = ()

    def for_log(self, log: pd.DataFrame) -> Labels:
        del log  # a file's labels do not depend on the log
        return self


class LabelSource(Protocol):
    """Where labels come from: a file (``Labels``) or a Feast feature view read for the log's
    rows (gateway/quality/feast_labels.py); ``keys`` are the log columns the join needs."""

    @property
    def keys(self) -> tuple[str, ...]: ...

    def for_log(self, log: pd.DataFrame) -> Labels: ...


@dataclass(frozen=True)
class OfflineReport:
    report: QualityReport
    log: str
    labels: Labels
    log_rows: int
    since: dt.datetime
    until: dt.datetime
    notes: tuple[str, ...] = ()
    examples: dict[str, list[str]] = field(default_factory=dict)  # outcome -> a few reasons


def read_log(location: str, model: str, keys: Sequence[str] = ()) -> pd.DataFrame:
    """``model``'s whole payload log: the prediction columns and ``keys``, read under the union
    of every file's schema (a new version may bring other columns)."""
    fs, root = open_filesystem(location)
    folder = f"{root.rstrip('/')}/{model}"
    if fs.get_file_info(folder).type != pafs.FileType.Directory:
        raise OfflineError(f"no payload log of model {model!r} at {location} (no folder {folder})")
    partitioning = ds.partitioning(pa.schema([(PARTITION_KEY, pa.date32())]), flavor="hive")
    dataset = ds.dataset(folder, filesystem=fs, format="parquet", partitioning=partitioning)
    fragments = list(dataset.get_fragments())
    if not fragments:
        raise OfflineError(f"the payload log of {model!r} at {location} has no files")
    schema = pa.unify_schemas([f.physical_schema for f in fragments] + [partitioning.schema])
    wanted = {
        PREDICTION_ID,
        LOG_TIMESTAMP,
        MODEL,
        VERSION,
        ANSWERED_BY,
        CHALLENGER_MODEL,
        CHALLENGER_VERSION,
        *keys,
    }
    wanted |= {f"__{a}" for a in ANSWERS} | {f"{CHALLENGER}{a}" for a in ANSWERS}
    missing = [k for k in keys if k not in schema.names]
    if missing:
        raise OfflineError(
            f"the labels' key column(s) {missing} are not in the payload log of {model!r} "
            f"(its keys and features: {[n for n in schema.names if not n.startswith('__')][:12]})"
        )
    dataset = ds.dataset(folder, filesystem=fs, format="parquet", partitioning=partitioning, schema=schema)
    frame = dataset.to_table(columns=[n for n in schema.names if n in wanted]).to_pandas()
    if frame.empty:
        raise OfflineError(f"the payload log of {model!r} at {location} has no rows")
    if VERSION not in frame.columns or LOG_TIMESTAMP not in frame.columns:
        raise OfflineError(f"the payload log of {model!r} has no {VERSION}/{LOG_TIMESTAMP} columns")
    return frame.reset_index(drop=True)


def read_labels(path: Path) -> Labels:
    """A Parquet or CSV file of labels (by the suffix; else Parquet, then CSV), checked for the
    columns one of the two joins needs."""
    if not path.is_file():
        raise OfflineError(
            f"no labels file {path}",
            hint="pass --labels a Parquet or CSV file with prediction_id,label (or the entity keys, "
            "event_timestamp and label); `make demo` writes .demo/labels.parquet",
        )
    try:
        csv = path.suffix.lower() in (".csv", ".txt")
        frame = pd.read_csv(path) if csv else pd.read_parquet(path)
    except Exception as exc:  # pyarrow and pandas raise many types for a bad file
        raise OfflineError(f"cannot read labels from {path}: {type(exc).__name__}: {exc}") from None
    frame.columns = [str(c) for c in frame.columns]
    if LABEL not in frame.columns:
        raise OfflineError(f"the labels file {path} has no {LABEL!r} column (columns: {list(frame.columns)})")
    if frame.empty:
        raise OfflineError(f"the labels file {path} has no rows")
    if ID in frame.columns:
        frame[ID] = frame[ID].astype("string")
        return Labels(frame[[ID, LABEL]].reset_index(drop=True), str(path), ID)
    if EVENT_TIMESTAMP not in frame.columns:
        raise OfflineError(
            f"the labels file {path} has neither {ID!r} (join by prediction id) nor {EVENT_TIMESTAMP!r} "
            "and entity key columns (join by entity and time)"
        )
    keys = tuple(c for c in frame.columns if c not in (LABEL, EVENT_TIMESTAMP))
    if not keys:
        raise OfflineError(f"the labels file {path} has {EVENT_TIMESTAMP!r} but no entity key columns")
    try:
        frame[EVENT_TIMESTAMP] = pd.to_datetime(frame[EVENT_TIMESTAMP], utc=True)
    except (ValueError, TypeError) as exc:
        raise OfflineError(f"the labels' {EVENT_TIMESTAMP} column is not a time: {exc}") from None
    return Labels(frame.reset_index(drop=True), str(path), "entity and time", keys)


def serving_of(repo: Path, model: str, version: str) -> dict[str, Any] | None:
    """The version's ``serving`` facts from its metadata.json (the bare model's, or the
    ensemble's when only it has them); None when neither says."""
    for folder in (model, f"{model}_ensemble"):
        path = repo / folder / version / "metadata.json"
        try:
            serving = json.loads(path.read_text()).get(keys.SERVING)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(serving, dict) and serving.get(keys.KIND):
            return serving
    return None


def _version_key(version: str) -> tuple[int, str]:
    return (len(version), version)  # numeric order for Triton's integer versions


def _match(log: pd.DataFrame, labels: Labels) -> pd.Series:
    """Per label, the log row it joins to (NA: none)."""
    if labels.by == ID:
        if PREDICTION_ID not in log.columns:
            raise OfflineError(
                f"the payload log has no {PREDICTION_ID} column (rows logged before prediction ids): "
                f"join by entity and time instead (a labels file with the entity keys and {EVENT_TIMESTAMP})"
            )
        ids = log[PREDICTION_ID].astype("string")
        rows = pd.Series(log.index[ids.notna()], index=ids[ids.notna()])
        rows = rows[~rows.index.duplicated(keep="first")]
        return labels.frame[ID].map(rows).astype("Int64")
    if labels.by == "feature view":
        return labels.frame[ROW].astype("Int64")
    return _match_asof(log, labels)


def _match_asof(log: pd.DataFrame, labels: Labels) -> pd.Series:
    keys = list(labels.keys)
    left = labels.frame.copy()
    left["__order"] = range(len(left))
    for key in keys:
        try:
            left[key] = left[key].astype(log[key].dtype)
        except (ValueError, TypeError):
            raise OfflineError(
                f"the labels' {key!r} values are not of the log's type ({log[key].dtype})"
            ) from None
    left = left[left[EVENT_TIMESTAMP].notna() & left[keys].notna().all(axis=1)]
    right = log[[*keys, LOG_TIMESTAMP]].copy()
    right[ROW] = log.index
    right = right[right[keys].notna().all(axis=1)]
    # one resolution on both sides (merge_asof refuses ns against us)
    right[LOG_TIMESTAMP] = pd.to_datetime(right[LOG_TIMESTAMP], utc=True).astype("datetime64[ns, UTC]")
    left[EVENT_TIMESTAMP] = left[EVENT_TIMESTAMP].astype("datetime64[ns, UTC]")
    joined = pd.merge_asof(
        left.sort_values(EVENT_TIMESTAMP),
        right.sort_values(LOG_TIMESTAMP),
        left_on=EVENT_TIMESTAMP,
        right_on=LOG_TIMESTAMP,
        by=keys,
        direction="backward",
    )
    rows = pd.Series(pd.NA, index=range(len(labels.frame)), dtype="Int64")
    found = joined[joined[ROW].notna()]
    rows.iloc[found["__order"].to_numpy()] = found[ROW].astype("int64").to_numpy()
    return rows


@dataclass
class _Outcomes:
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, outcome: Outcome, reason: str = "") -> None:
        self.counts[outcome] += 1
        if reason and len(shown := self.examples.setdefault(outcome, [])) < 3:
            shown.append(reason)


def _truths(
    log: pd.DataFrame, labels: Labels, matched: pd.Series, contracts: dict[str, Contract], newest: str
) -> tuple[dict[int, Truth], _Outcomes]:
    """Each joined log row's truth (first label in file order wins), and every label's outcome."""
    outcomes = _Outcomes()
    truths: dict[int, Truth] = {}
    versions = log[SERVED]
    what = (
        labels.frame[ID]
        if labels.by == ID
        else labels.frame[list(labels.keys)].astype(str).agg("/".join, axis=1)
    )
    for raw, row, name in zip(labels.frame[LABEL].tolist(), matched.tolist(), what.tolist(), strict=True):
        joined = row is not pd.NA and row is not None
        contract = contracts[versions.iat[row] if joined else newest]
        value = None if _missing(raw) else raw.tolist() if isinstance(raw, np.ndarray) else raw
        truth, why = truth_of(contract, value)
        if truth is None:
            outcomes.add("invalid", f"{name}: {why}")
        elif not joined:
            outcomes.add("unknown", f"{name}: no logged prediction to join to")
        elif row in truths:
            same = truths[row] == truth
            outcomes.add("duplicate" if same else "conflicting", f"{name}: a second label for the same row")
        else:
            truths[row] = truth
            outcomes.add("accepted")
    return truths, outcomes


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def answers(frame: pd.DataFrame, contract: Contract, prefix: str = "__") -> list[Compact]:
    """The compact answers (gateway/quality/contract.py ``compact``) of logged rows, read from
    the champion's columns (``__``) or the challenger's (``__challenger_``); None where absent."""

    def column(name: str) -> list[Any]:
        key = f"{prefix}{name}"
        return frame[key].tolist() if key in frame.columns else [None] * len(frame)

    def number(v: Any) -> float | None:
        return None if _missing(v) else float(v)

    def numbers(v: Any) -> tuple[float, ...] | None:
        return None if v is None or (not hasattr(v, "__len__")) else tuple(float(x) for x in v)

    kind = contract.kind
    if contract.classifier and contract.probabilities:
        if kind == "binary" and f"{prefix}score" in frame.columns:
            return [number(s) for s in column("score")]
        if kind == "binary":  # no score column: the positive class's probability
            return [None if p is None else p[-1] for p in map(numbers, column("probabilities"))]
        return list(map(numbers, column("probabilities")))
    if contract.classifier:
        return [None if _missing(v) else label_index(contract, v) for v in column("label")]
    if kind == "regression":
        return (
            list(map(numbers, column("values")))
            if contract.targets > 1
            else list(map(number, column("value")))
        )
    if kind == "outlier":
        flags = [None if _missing(v) else float(v) == -1 for v in column("label")]
        return [
            None if s is None or f is None else (s, 1.0 if f else 0.0)
            for s, f in zip(map(number, column("score")), flags, strict=True)
        ]
    return [None] * len(frame)


def _quality(
    frame: pd.DataFrame, truths: dict[int, Truth], contract: Contract, who: tuple[str, str, Role], prefix: str
) -> VersionQuality:
    rows = [i for i in frame.index if i in truths]
    predicted = answers(frame.loc[rows], contract, prefix) if rows else []
    t = [truths[i] for i in rows]
    labeled = sum(p is not None for p in predicted)
    model, version, role = who
    return VersionQuality(
        model, version, role, labeled, evaluate(contract, t, predicted),
        tuple(reliability(contract, t, predicted)),
    )  # fmt: skip


def _contracts(repo: Path, model: str, versions: Sequence[str]) -> tuple[dict[str, Contract], list[str]]:
    found = {v: s for v in versions if (s := serving_of(repo, model, v)) is not None}
    if not found:
        raise OfflineError(
            f"no metadata.json with serving facts for model {model!r} version(s) {', '.join(versions)} "
            f"under {repo}: pass --repo the model repository the gateway served"
        )
    newest = max(found, key=_version_key)
    notes = [
        f"version {v} of {model!r} has no metadata.json in the repository: scored with version "
        f"{newest}'s contract"
        for v in versions
        if v not in found
    ]
    return {v: Contract.of_serving(found.get(v, found[newest])) for v in versions}, notes


SERVED: Final = "__served"  # the row's version; "{model}:{version}" for a fallback's rows


def _served(log: pd.DataFrame, model: str) -> pd.Series:
    """Who answered each row: its version when the model itself did (and in logs written before
    ``__answered_by``), ``{model}:{version}`` when another model stood in as the fallback."""
    versions = log[VERSION].astype(str)
    if ANSWERED_BY not in log.columns:
        return versions
    by = log[ANSWERED_BY].astype(str).where(log[ANSWERED_BY].notna(), model)
    return versions.where(by == model, by + ":" + versions)


def _stand_ins(
    log: pd.DataFrame, repo: Path, contracts: dict[str, Contract], notes: list[str]
) -> dict[str, tuple[str, str, Contract]]:
    """The fallback models that answered rows: served key -> (model, version, its contract)."""
    out = {}
    for key in sorted(k for k in log[SERVED].unique() if ":" in k):
        other, _, version = key.rpartition(":")
        serving = serving_of(repo, other, version)
        if serving is None and contracts:
            newest = max(contracts, key=_version_key)
            notes.append(
                f"fallback {other!r} version {version} has no metadata.json: scored with version "
                f"{newest}'s contract"
            )
            out[key] = (other, version, contracts[newest])
        elif serving is not None:
            out[key] = (other, version, Contract.of_serving(serving))
        else:
            raise OfflineError(
                f"no metadata.json with serving facts for {other!r} version {version} under {repo}"
            )
    return out


def build(log_location: str, source: LabelSource, repo: Path, model: str) -> OfflineReport:
    """The offline report of ``model``: the whole log joined with ``labels`` (see the module doc).
    OfflineError (exit 2) when nothing can be scored: no log, no contract, no label accepted."""
    log = read_log(log_location, model, source.keys)
    labels = source.for_log(log)
    log[SERVED] = _served(log, model)
    versions = sorted(log.loc[log[SERVED] == log[VERSION].astype(str), VERSION].astype(str).unique(),
                      key=_version_key, reverse=True)  # fmt: skip
    contracts, notes = _contracts(repo, model, versions) if versions else ({}, [])
    stand_ins = _stand_ins(log, repo, contracts, notes)
    contracts.update({key: contract for key, (_, _, contract) in stand_ins.items()})
    newest = versions[0] if versions else next(iter(stand_ins))
    truths, outcomes = _truths(log, labels, _match(log, labels), contracts, newest)
    if outcomes.counts["accepted"] == 0:
        summary = ", ".join(f"{k} {v}" for k, v in outcomes.counts.items() if v)
        first = next(iter(outcomes.examples.values()), [""])[0]
        raise OfflineError(
            f"no label joined a logged prediction of {model!r} ({summary}){': ' + first if first else ''}"
        )
    out = [
        _quality(log[log[SERVED] == v], truths, contracts[v], (model, v, "champion"), "__") for v in versions
    ]
    out += [  # rows a fallback answered (gateway/fallback/), under the model that answered them
        _quality(log[log[SERVED] == key], truths, contract, (other, version, "champion"), "__")
        for key, (other, version, contract) in stand_ins.items()
    ]
    out += _challengers(log, truths, repo, contracts[newest], notes)
    stamps = pd.to_datetime(log[LOG_TIMESTAMP], utc=True)
    since, until = stamps.min().to_pydatetime(), stamps.max().to_pydatetime()
    window = f"{since:%Y-%m-%dT%H:%M:%SZ}/{until:%Y-%m-%dT%H:%M:%SZ}"
    seconds = math.ceil((until - since).total_seconds())
    report = QualityReport(model, contracts[newest].kind, window, seconds, tuple(out), outcomes.counts)
    return OfflineReport(
        report, log_location, labels, len(log), since, until, tuple(notes), outcomes.examples
    )


def _challengers(
    log: pd.DataFrame, truths: dict[int, Truth], repo: Path, fallback: Contract, notes: list[str]
) -> list[VersionQuality]:
    if CHALLENGER_VERSION not in log.columns or CHALLENGER_MODEL not in log.columns:
        return []
    shadowed = log[log[CHALLENGER_VERSION].notna() & log[CHALLENGER_MODEL].notna()]
    out = []
    pairs = shadowed[[CHALLENGER_MODEL, CHALLENGER_VERSION]].astype(str).drop_duplicates()
    for challenger, version in sorted(
        pairs.itertuples(index=False), key=lambda p: (p[0], _version_key(p[1]))
    ):
        serving = serving_of(repo, challenger, version)
        if serving is None:
            notes.append(
                f"challenger {challenger!r} version {version} has no metadata.json in the repository: "
                "scored with the champion's contract (a challenger shares its serving contract)"
            )
        contract = Contract.of_serving(serving) if serving else fallback
        rows = shadowed[
            (shadowed[CHALLENGER_MODEL].astype(str) == challenger)
            & (shadowed[CHALLENGER_VERSION].astype(str) == version)
        ]
        out.append(_quality(rows, truths, contract, (challenger, version, "challenger"), CHALLENGER))
    return out
