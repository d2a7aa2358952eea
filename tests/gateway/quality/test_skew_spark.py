"""``gateway skew-check``'s Spark engine (gateway/spark/skew.py) on a payload log of the demo's
feature service: rows logged with exactly the features the training path joins at their times
pass (missing users' features logged as null compare as their stand-ins), and two values
changed by hand are the two mismatches reported, each with its entity, time, column and both
values; rows outside the window are not read; hashed keys and a missing column are refused."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gateway.catalog import Column, ModelSpec, OutputRoles
from gateway.skew import SkewInputError
from gateway.spark.skew import Checked, LoggedWindow, check_logged

pytestmark = pytest.mark.integration

SOURCE = Path(__file__).resolve().parents[3] / "feature_repo"
MODEL = "fraud-detector"
NUMBERS = ["user_age_days", "tx_last_24h", "avg_amount_30d", "merchant_risk", "merchant_fraud_rate_30d"]
VIEWS = {f: "user_stats" for f in NUMBERS[:3]} | {
    f: "merchant_stats" for f in [*NUMBERS[3:], "merchant_category"]
}


def _spec() -> ModelSpec:
    columns = (
        Column("amount", "float32"), Column("hour", "float32"), Column("channel", "string"),
        *(Column(n, "float32") for n in NUMBERS), Column("merchant_category", "string"),
    )  # fmt: skip
    return ModelSpec(
        name=MODEL, triton_model=MODEL, version="1", layout="columns", input_name="", columns=columns,
        feature_service="fraud_v1", entity_keys=(Column("user_id", "int64"), Column("merchant_id", "int64")),
        request_fields=("amount", "hour", "channel"), kind="binary", classes=(0, 1),
        roles=OutputRoles(probabilities="probabilities"), outputs=(),
    )  # fmt: skip


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, pd.DataFrame]:
    """The demo's store, and 300 of its transactions logged as the gateway logs them, with the
    features the training path joins (float32, as the model takes them)."""
    from feast_access.training import training_frame
    from support.train import prepare_feature_store

    root = tmp_path_factory.mktemp("skew-spark")
    repo = root / "feature_repo"
    shutil.copytree(SOURCE, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    store = prepare_feature_store(repo)
    tx = pd.read_parquet(repo / "data" / "transactions.parquet").sample(300, random_state=1)
    frame = training_frame(store, "fraud_v1", tx.reset_index(drop=True))
    log = pd.DataFrame({"user_id": frame["user_id"], "merchant_id": frame["merchant_id"]})
    log["amount"] = frame["amount"].astype("float32")
    log["hour"] = frame["hour"].astype("float32")
    log["channel"] = frame["channel"]
    for name in NUMBERS:
        log[f"{VIEWS[name]}__{name}"] = frame[name].astype("float32")  # NaN: missing, logged null
    log["merchant_stats__merchant_category"] = frame["merchant_category"]
    log["__log_timestamp"] = pd.to_datetime(frame["event_timestamp"], utc=True).astype("datetime64[us, UTC]")
    log["__model_version"] = "1"
    return store, root, log


def _write(log: pd.DataFrame, folder: Path) -> None:
    for day, part in log.groupby(log["__log_timestamp"].dt.date):
        target = folder / MODEL / f"log_date={day.isoformat()}"
        target.mkdir(parents=True, exist_ok=True)
        part.to_parquet(target / "part-0.parquet", index=False)


def _window(root: Path, log: pd.DataFrame, **extra: Any) -> LoggedWindow:
    since = log["__log_timestamp"].min().to_pydatetime()
    until = log["__log_timestamp"].max().to_pydatetime() + dt.timedelta(seconds=1)
    return LoggedWindow(str(root), MODEL, since, until, **extra)


def test_changed_values_are_the_mismatches(
    spark: Any, logged: tuple[Any, Path, pd.DataFrame], tmp_path: Path
) -> None:
    from feast_access.offline import views

    store, _, log = logged
    changed = log.copy()
    known = changed.index[changed["user_stats__avg_amount_30d"].notna()]
    changed.loc[known[0], "user_stats__avg_amount_30d"] = np.float32(12345.5)
    changed.loc[known[1], "merchant_stats__merchant_category"] = "not-a-category"
    _write(changed, tmp_path / "log")
    checked = Checked(_spec(), VIEWS, views(store, "fraud_v1"))

    report = check_logged(spark, _window(tmp_path / "log", log), checked)

    assert report.entities == len(log) and report.columns == list(_spec().feature_names)
    assert log["user_stats__user_age_days"].isna().any()  # stand-ins compared too
    got = {(m["entity"]["user_id"], m["entity"]["merchant_id"], m["column"]): m for m in report.mismatches}
    first, second = changed.loc[known[0]], changed.loc[known[1]]
    assert set(got) == {
        (int(first["user_id"]), int(first["merchant_id"]), "avg_amount_30d"),
        (int(second["user_id"]), int(second["merchant_id"]), "merchant_category"),
    }
    one = got[(int(first["user_id"]), int(first["merchant_id"]), "avg_amount_30d")]
    assert one["online"] == 12345.5 and one["training"] == pytest.approx(
        float(log.loc[known[0], "user_stats__avg_amount_30d"])
    )
    assert one["at"] == pd.Timestamp(first["__log_timestamp"]).isoformat()

    later = _window(tmp_path / "log", log)
    outside = LoggedWindow(later.location, MODEL, later.until, later.until + dt.timedelta(days=1))
    with pytest.raises(SkewInputError, match="no rows"):
        check_logged(spark, outside, checked)
    sampled = check_logged(spark, _window(tmp_path / "log", log, sample=50, seed=3), checked)
    assert sampled.entities == 50


def test_a_log_without_a_feature_column_is_refused(
    spark: Any, logged: tuple[Any, Path, pd.DataFrame], tmp_path: Path
) -> None:
    from feast_access.offline import views

    store, _, log = logged
    _write(log.drop(columns="merchant_stats__merchant_risk"), tmp_path / "log")
    with pytest.raises(SkewInputError, match="merchant_stats__merchant_risk"):
        check_logged(spark, _window(tmp_path / "log", log), Checked(_spec(), VIEWS, views(store, "fraud_v1")))
