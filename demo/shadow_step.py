"""The demo's release-on-evidence step: a challenger shadowed on live traffic, labels fed back,
both versions' quality, and the promotion gate's decision (docs/release.md, docs/quality.md).

The challenger is another registered version of the demo's model (``@challenger``: 5 rounds
of boosting where the champion has 60), exported under its own Triton name and loaded beside
the champion. A gateway mirrors every request to it (``GATEWAY_SHADOW``) and returns an id with
each prediction. The step sends transactions the models never trained on (the newest rows of
the point-in-time join, which ``support/train.py`` holds out) and then their labels (the data
generator's ``is_fraud``), as a chargeback feed would, by prediction id. Then: ``gateway
shadow`` (agreement), the quality of both versions, and ``loadtests evidence``, which judges the
promotion criteria (loadtests/sla/promotion.yaml) on that evidence and says whether the
challenger may take traffic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from support.train import ENTITY_KEYS, REQUEST_FIELDS, TRAIN_SHARE

CHALLENGER = "fraud-detector-challenger"  # the Triton name the challenger is exported under
ROWS = 1000  # the promotion criteria's min_rows (loadtests/sla/promotion.yaml)
BATCH = 100
WINDOW = "15m"
UNKNOWN_USERS = 2 * 10**6  # ids from here up are no user the demo's data has


def gateway_env(model: str, log: str) -> dict[str, str]:
    return {
        "GATEWAY_SHADOW": json.dumps({model: {"model": CHALLENGER, "share": 1.0}}),
        "GATEWAY_PAYLOAD_LOG": log,
        "GATEWAY_MISSING_ENTITIES": "default",
    }


def held_out_rows(fs: Any, n: int) -> tuple[list[dict[str, Any]], list[int]]:
    """``n`` of the newest transactions (after the training split): gateway rows and their labels."""
    from feature_repo.definitions import EVENT_TIMESTAMP
    from feature_repo.store import training_frame

    frame = training_frame(fs).sort_values(EVENT_TIMESTAMP, kind="stable")
    held = frame.iloc[int(len(frame) * TRAIN_SHARE) :]
    held = held.sample(min(n, len(held)), random_state=3)
    kinds = {"amount": float, "hour": int, "channel": str}
    rows, labels = [], []
    for i, r in enumerate(held.to_dict("records")):
        row = {**{k: int(r[k]) for k in ENTITY_KEYS}, **{f: kinds[f](r[f]) for f in REQUEST_FIELDS}}
        if pd.isna(r["user_age_days"]):
            row["user_id"] = UNKNOWN_USERS + i  # served on the nulls training saw
        rows.append(row)
        labels.append(int(r["is_fraud"]))
    return rows, labels


def _post(url: str, body: object) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as err:
        sys.exit(f"demo: the gateway answered {err.code}: {err.read()[:300]!r}")


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return dict(json.loads(response.read()))


def send(url: str, model: str, rows: list[dict[str, Any]]) -> list[str]:
    """The rows through the gateway; the prediction ids it returned, in order."""
    ids: list[str] = []
    for i in range(0, len(rows), BATCH):
        answer = _post(f"{url}/v1/models/{model}/predict", {"rows": rows[i : i + BATCH]})
        ids += [p["id"] for p in answer["predictions"]]
    return ids


def wait_compared(url: str, model: str, rows: int) -> None:
    """Until the challenger has answered every mirrored row (it answers off the response path)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        report = _get(f"{url}/v1/models/{model}/shadow?window={WINDOW}")
        if report["rows"] + report["error_rows"] + report["dropped_rows"] >= rows:
            return
        time.sleep(0.2)


def run_cli(console: Console, tool: str, *args: str) -> int:
    console.print(f"[dim]$ {tool} {' '.join(args)}[/]")
    env = None if console.is_terminal else {**os.environ, "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", tool, *args], env=env).returncode


def quality_table(console: Console, url: str, model: str) -> None:
    """Both versions' quality over the labels fed back (``GET /v1/models/{m}/quality``)."""
    report = _get(f"{url}/v1/models/{model}/quality?window={WINDOW}")
    names = {"auc": "AUC", "log_loss": "log loss", "precision": "prec.", "recall": "recall", "ece": "ECE"}
    table = Table(title=f"{model}: quality over the labels fed back ({WINDOW})", title_justify="left")
    for col in ("version", "labels", *names.values()):
        table.add_column(col, justify="left" if col == "version" else "right")
    for v in report["versions"]:
        values = [v["metrics"].get(n) for n in names]
        shown = ["-" if x is None else f"{x:.3f}" for x in values]
        table.add_row(f"v{v['version']} ({v['role']})", str(v["rows"]), *shown)
    console.print(table)
    fb = report["feedback"]
    console.print(
        f"labels: {fb['accepted']} accepted, {fb['duplicate']} duplicate, {fb['conflicting']} "
        f"conflicting, {fb['unknown']} for unknown ids, {fb['invalid']} invalid"
    )


def labels_file(path: str, ids: list[str], labels: list[int]) -> None:
    """The labels as a chargeback feed would deliver them, for the offline report."""
    pd.DataFrame({"prediction_id": ids, "label": labels}).to_parquet(path, index=False)
