"""Helpers of the quality tests: a payload log written with the gateway's own layout and sink
(three days, two versions of a binary model, a challenger shadowing some rows, prediction ids
and an entity key), its model repository, and labels for it by prediction id and by entity and
time, each with duplicates, conflicts, unknowns and invalid labels."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gateway.catalog import Column, ModelSpec, OutputRoles
from gateway.observe import ChallengerAnswer, Observation
from gateway.payload_log.layout import log_date, to_table
from gateway.payload_log.sink import ParquetSink
from gateway.responses import Prediction

MODEL, CHALLENGER = "fraud-detector", "fraud-gbm"
T0 = 1_800_000_000.0  # 2027-01-15T08:00Z
USERS = 50


def spec(version: str, name: str = MODEL) -> ModelSpec:
    return ModelSpec(
        name=name, triton_model=name, version=version, layout="columns", input_name="",
        columns=(Column("amount", "float32"),), feature_service="fs",
        entity_keys=(Column("user_id", "int64"),), request_fields=("amount",),
        kind="binary", classes=(0, 1), roles=OutputRoles(label="label", probabilities="probabilities"),
        outputs=(), decision_threshold=0.5,
    )  # fmt: skip


def _scored(scores: np.ndarray) -> list[Prediction]:
    return [
        Prediction(False, score=float(p), label=int(p >= 0.5), probabilities=(1 - float(p), float(p)))
        for p in scores
    ]


@dataclass
class BigLog:
    log: Path
    repo: Path
    ids: list[str]
    users: np.ndarray
    times: np.ndarray  # epoch seconds of each row
    truth: np.ndarray


def write_log(root: Path, batches: int = 60, rows: int = 10, seed: int = 3) -> BigLog:
    """``batches`` batches of ``rows`` over three days: version 1 for two days (a challenger
    shadowing every other batch), version 2 on the third."""
    rng = np.random.default_rng(seed)
    sink = ParquetSink(str(root / "log"))
    ids: list[str] = []
    users, times, truth = [], [], []
    for b in range(batches):
        at = T0 + b * (3 * 86400 / batches) + float(rng.integers(0, 600))
        version = "1" if b < batches * 2 // 3 else "2"
        y = rng.random(rows) < 0.35
        score = np.clip(rng.normal(np.where(y, 0.65, 0.35), 0.2), 0, 1)
        # a user once per batch: rows of one batch share a time, and which of two predictions at
        # one time a label follows is left open by the pandas engine's merge_asof (its sort of the
        # log is not stable), so the engines are compared where the join is defined
        batch_users = rng.choice(USERS, rows, replace=False)
        shadow = None
        if version == "1" and b % 2 == 0:
            other = np.clip(rng.normal(np.where(y, 0.6, 0.4), 0.2), 0, 1)
            shadow = ChallengerAnswer(spec("7", CHALLENGER), "7", _scored(other))
        batch_ids = [f"req{b}-{i}" for i in range(rows)]
        observation = Observation(
            spec=spec(version), version=version,
            inputs={"amount": rng.lognormal(3, 1, rows).astype(np.float32).reshape(rows, 1)},
            predictions=_scored(score), entity_rows=[{"user_id": int(u)} for u in batch_users],
            at=at, prediction_ids=batch_ids, challenger=shadow,
        )  # fmt: skip
        sink.write(MODEL, log_date(at), to_table(observation, np.arange(rows), {}, None))
        ids += batch_ids
        users.append(batch_users)
        times.append(np.full(rows, at))
        truth.append(y)
    repo = root / "repo"
    for version in ("1", "2"):
        folder = repo / MODEL / version
        folder.mkdir(parents=True)
        serving = {"kind": "binary", "classes": [0, 1], "decision_threshold": 0.5,
                   "outputs": {"label": "label", "probabilities": "probabilities"}}  # fmt: skip
        (folder / "metadata.json").write_text(json.dumps({"serving": serving}))
    return BigLog(
        root / "log", repo, ids, np.concatenate(users), np.concatenate(times), np.concatenate(truth)
    )


def labels_by_id(logged: BigLog, path: Path, seed: int = 1) -> Path:
    """Labels for 70 % of the rows, in shuffled order, plus a duplicate, a conflict, an unknown
    id and an invalid label."""
    rng = np.random.default_rng(seed)
    picked = rng.permutation(len(logged.ids))[: int(len(logged.ids) * 0.7)]
    rows = [{"prediction_id": logged.ids[i], "label": int(logged.truth[i])} for i in picked]
    first = picked[0]
    rows += [
        {"prediction_id": logged.ids[first], "label": int(logged.truth[first])},
        {"prediction_id": logged.ids[picked[1]], "label": 1 - int(logged.truth[picked[1]])},
        {"prediction_id": "never-served", "label": 1},
        {"prediction_id": logged.ids[picked[2]], "label": 7},
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def labels_by_entity(logged: BigLog, path: Path, seed: int = 2) -> Path:
    """Chargebacks keyed by user and a time a little after a logged prediction (some before
    any prediction of their user: unknown), with the label of the row they follow."""
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(logged.ids), 200, replace=False)
    after = rng.integers(1, 3600, 200)
    stamps = [
        dt.datetime.fromtimestamp(logged.times[i] + a, dt.UTC) for i, a in zip(picked, after, strict=True)
    ]
    rows = pd.DataFrame(
        {
            "user_id": logged.users[picked],
            "event_timestamp": stamps,
            "label": logged.truth[picked].astype(int),
        }
    )
    before = dt.datetime.fromtimestamp(T0 - 60, dt.UTC)
    early = pd.DataFrame({"user_id": [1, 2], "event_timestamp": [before, before], "label": [1, 0]})
    pd.concat([rows, early], ignore_index=True).to_parquet(path)
    return path
