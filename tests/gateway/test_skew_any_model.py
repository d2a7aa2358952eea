"""``gateway skew-check`` on a model that is not the demo's: a regressor over a Feast repo keyed
by a STRING entity (``customer_id``; tests/gateway/test_gateway_typed.py's repository), served by
the real Triton, its entity rows from the payload log (the rows the gateway served, recomputed
offline at their logged times) or from a file of entity rows. Hostile sources get one line and
exit code 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from support import servers
from tests.gateway.helpers import (
    CUSTOMERS,
    ONLINE,
    SERVICE,
    register_typed,
    typed_feature_repo,
    typed_pipeline,
)

pytestmark = pytest.mark.integration

MODEL = "skew-spend"
VIEW = "customer_stats"  # the view of the online features, as the payload log names their columns


@dataclass
class Served:
    feature_repo: Path
    store: Any
    triton: Any


@pytest.fixture(scope="module")
def served(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    from sklearn.linear_model import Ridge

    from builder.export import ExportRequest, export_model

    root = tmp_path_factory.mktemp("skew-any")
    store, snapshot = typed_feature_repo(root / "feature_repo")
    rng = np.random.default_rng(3)
    picks = snapshot.iloc[rng.integers(0, len(snapshot), 300)].reset_index(drop=True)
    X = pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, 300),
            "channel": rng.choice(["web", "app", "store"], 300),
            **{name: picks[name] for name in ONLINE},
        }
    )
    register_typed(MODEL, typed_pipeline(Ridge()).fit(X, 2.0 * X.amount + X.spend_30d), X)
    export_model(ExportRequest(f"models:/{MODEL}@champion", root / "model_repo"))
    with servers.serving(root / "model_repo", triton_runtime, root / "tritonserver.log") as triton:
        yield Served(root / "feature_repo", store, triton)


def skew_check(served: Served, *args: str) -> tuple[int, str]:
    from gateway.cli import app

    base = ["skew-check", "--model", MODEL, "--triton-url", f"grpc://{served.triton.grpc_url}"]
    result = CliRunner().invoke(app, [*base, "--feature-repo", str(served.feature_repo), *args])
    return result.exit_code, result.output


def payload_log(served: Served, root: Path, customers: list[str], tamper: str | None = None) -> Path:
    """The rows as the gateway logs them (gateway/payload_log/layout.py): the key, the request
    fields, each online feature as ``{view}__{feature}`` with the value it read, the time."""
    online = served.store.get_online_features(
        features=[f"{VIEW}:{name}" for name in ONLINE], entity_rows=[{"customer_id": c} for c in customers]
    ).to_dict()
    now = pd.Timestamp.now(tz="UTC")
    frame = pd.DataFrame(
        {
            "customer_id": customers,
            **{f"{VIEW}__{name}": online[name] for name in ONLINE},
            "amount": np.float32(20.0),
            "channel": "web",
            "__model": MODEL,
            "__model_version": "1",
            "__log_timestamp": pd.Series([now] * len(customers), dtype="datetime64[us, UTC]"),
        }
    )
    frame[f"{VIEW}__spend_30d"] = frame[f"{VIEW}__spend_30d"].astype("float32")
    frame[f"{VIEW}__visits_30d"] = frame[f"{VIEW}__visits_30d"].astype("float32")
    if tamper is not None:  # served something the offline store never had, as a buggy writer would
        frame.loc[frame.customer_id == tamper, f"{VIEW}__spend_30d"] += 100
    folder = root / MODEL / f"log_date={now.date().isoformat()}"
    folder.mkdir(parents=True)
    frame.to_parquet(folder / "part-0.parquet", index=False)
    return root


def test_the_payload_logs_rows_are_recomputed_offline_at_their_logged_times(served: Served, tmp_path: Path):
    import json

    customers = CUSTOMERS[:12]
    log = payload_log(served, tmp_path / "ok", customers)
    code, out = skew_check(served, "--payload-log", str(log), "--since", "1h", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["passed"] and report["entities"] == 12 and report["feature_service"] == SERVICE
    assert set(report["columns"]) == {"amount", "channel", *ONLINE}

    bad = payload_log(served, tmp_path / "bad", customers, tamper=customers[3])
    code, out = skew_check(served, "--payload-log", str(bad), "--json")
    assert code == 1, out
    (mismatch,) = json.loads(out)["mismatches"]
    assert mismatch["entity"] == {"customer_id": customers[3]} and mismatch["column"] == "spend_30d"
    assert mismatch["online"] == pytest.approx(mismatch["training"] + 100, rel=1e-6)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_file_of_entity_rows_is_checked_with_the_models_string_key(
    served: Served, tmp_path: Path, suffix: str
):
    import json

    rows = pd.DataFrame({"customer_id": [*CUSTOMERS[:5], "C-9999"]})  # one the stores do not know
    rows["event_timestamp"] = pd.Timestamp.now(tz="UTC")
    path = tmp_path / f"entities{suffix}"
    rows.to_csv(path, index=False) if suffix == ".csv" else rows.to_parquet(path)
    code, out = skew_check(served, "--entities", str(path), "--json")
    assert code == 0, out
    assert json.loads(out)["entities"] == 6


def test_hostile_sources_get_one_line_and_exit_code_2(served: Served, tmp_path: Path):
    wrong_key = tmp_path / "users.csv"
    pd.DataFrame({"user_id": [1, 2]}).to_csv(wrong_key, index=False)
    not_a_table = tmp_path / "rows.json"
    not_a_table.write_text('{"customer_id": "C-0001"}')
    garbage = tmp_path / "rows.parquet"
    garbage.write_bytes(b"not parquet at all")
    empty_log = tmp_path / "empty-log"
    empty_log.mkdir()
    for args, said in (
        (["--entities", str(wrong_key)], "no column customer_id"),
        (["--entities", str(not_a_table)], "not a .parquet or .csv"),
        (["--entities", str(garbage)], "cannot be read"),
        (["--payload-log", str(empty_log)], f"no payload log of model {MODEL!r}"),
        (["--payload-log", str(empty_log), "--entities", str(wrong_key)], "two sources"),
    ):
        code, out = skew_check(served, *args)
        assert code == 2, (args, out)
        assert said in out and "Traceback" not in out, (args, out)
        assert len([line for line in out.splitlines() if "error" in line]) == 1, out
