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

The gateway runs as two processes on one port (``GATEWAY_WORKERS``; the kernel spreads
connections over them) sharing one store (docs/quality.md, "Across replicas"), and every request
here is its own connection, so predictions, labels and reads land on either process: all labels
are accepted and two reads of ``/quality`` give one answer. Then the CRITICAL switch
(``GATEWAY_FALLBACK``, docs/quality.md, "The fallback switch"): the demo forges labels that are
the opposite of the truth, the champion's AUC collapses below the rule's threshold, every
process serves the challenger instead, and ``gateway fallback reset`` brings the champion back.
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

from support.train import ENTITY_KEYS, REQUEST_FIELDS, TRAIN_SHARE, demo_training_frame

CHALLENGER = "fraud-detector-challenger"  # the Triton name the challenger is exported under
ROWS = 1000  # the promotion criteria's min_rows (loadtests/sla/promotion.yaml)
BATCH = 100
WINDOW = "15m"
UNKNOWN_USERS = 2 * 10**6  # ids from here up are no user the demo's data has
WORKERS = 2
# the CRITICAL switch: below this AUC over the window's labels (200 at least), serve the challenger
FALLBACK = {"model": CHALLENGER, "metric": "auc", "threshold": 0.6, "window": WINDOW, "min_labels": 200}
POLL_S = 0.5  # how often each process reads the decision (default 1 s)
JUDGE_S = 1.0  # how often one process judges the rule (default 5 s): the demo is quick
SWITCH_TIMEOUT_S = 20.0


def gateway_env(model: str, log: str, state: str) -> dict[str, str]:
    """The step's gateway settings; ``state``: the SQLite file both processes share (this run's:
    the default file is named after the port, which another run may reuse)."""
    return {
        "GATEWAY_WORKERS": str(WORKERS),
        "GATEWAY_STATE_URL": f"sqlite://{state}",
        "GATEWAY_SHADOW": json.dumps({model: {"model": CHALLENGER, "share": 1.0}}),
        "GATEWAY_FALLBACK": json.dumps({model: FALLBACK}),
        "GATEWAY_FALLBACK_POLL_S": f"{POLL_S:g}",
        "GATEWAY_FALLBACK_JUDGE_S": f"{JUDGE_S:g}",
        "GATEWAY_PAYLOAD_LOG": log,
        "GATEWAY_MISSING_ENTITIES": "default",
    }


def held_out_rows(fs: Any, n: int) -> tuple[list[dict[str, Any]], list[int]]:
    """``n`` of the newest transactions (after the training split): gateway rows and their labels."""
    frame = demo_training_frame(fs)
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


def send_labels(url: str, model: str, ids: list[str], labels: list[int]) -> dict[str, int]:
    """The labels by prediction id, ``BATCH`` per request, each request its own connection (so
    either process takes it); the outcome counts summed over the requests."""
    totals: dict[str, int] = {}
    for i in range(0, len(ids), BATCH):
        items = zip(ids[i : i + BATCH], labels[i : i + BATCH], strict=True)
        answer = _post(
            f"{url}/v1/models/{model}/feedback", {"labels": [{"id": j, "label": y} for j, y in items]}
        )
        for outcome, count in answer.items():
            if isinstance(count, int):
                totals[outcome] = totals.get(outcome, 0) + count
    return totals


def outcomes(counts: dict[str, int]) -> str:
    return (
        f"{counts.get('accepted', 0)} accepted, {counts.get('duplicate', 0)} duplicate, "
        f"{counts.get('conflicting', 0)} conflicting, {counts.get('unknown', 0)} for unknown ids, "
        f"{counts.get('expired', 0)} expired, {counts.get('invalid', 0)} invalid"
    )


def all_accepted(console: Console, counts: dict[str, int], sent: int, what: str) -> None:
    console.print(f"{what}: {outcomes(counts)}")
    if counts.get("accepted") != sent:
        sys.exit(
            f"demo: {counts.get('accepted', 0)} of {sent} labels accepted: the gateway's processes "
            "do not share the predictions they remember (GATEWAY_STATE_URL)"
        )


def quality_once(url: str, model: str) -> dict[str, Any]:
    """``GET /v1/models/{m}/quality`` read twice, each its own connection (likely one per
    process): one answer, or the demo stops."""
    first = _get(f"{url}/v1/models/{model}/quality?window={WINDOW}")
    second = _get(f"{url}/v1/models/{model}/quality?window={WINDOW}")
    if first != second:
        sys.exit(
            f"demo: two reads of /quality disagree, so the gateway's processes do not share one store:"
            f"\n{json.dumps(first)}\n{json.dumps(second)}"
        )
    return first


def fallback_status(url: str, model: str) -> dict[str, Any]:
    return _get(f"{url}/v1/models/{model}/fallback")


def wait_fallback(url: str, model: str) -> tuple[dict[str, Any], float]:
    """Poll ``GET /v1/models/{m}/fallback`` until the fallback serves; the status and the wait."""
    start = time.monotonic()
    while True:
        status = fallback_status(url, model)
        if status.get("active"):
            return status, time.monotonic() - start
        if time.monotonic() - start > SWITCH_TIMEOUT_S:
            sys.exit(
                f"demo: the champion's quality collapsed but the gateway did not switch to its fallback "
                f"within {SWITCH_TIMEOUT_S:.0f}s; its status: {json.dumps(status)}"
            )
        time.sleep(0.2)


def answered_by(url: str, model: str, rows: list[dict[str, Any]]) -> list[str]:
    """One prediction per row, each its own request and connection: the ``version`` of each answer."""
    return [str(_post(f"{url}/v1/models/{model}/predict", row)["version"]) for row in rows]


def wait_answered_by(
    url: str, model: str, rows: list[dict[str, Any]], version: str
) -> tuple[list[str], float]:
    """Predictions until every one is answered by ``version`` (every process follows a decision
    within ``POLL_S``); the last answers' versions and the wait."""
    start = time.monotonic()
    while True:
        versions = answered_by(url, model, rows)
        if set(versions) == {version} or time.monotonic() - start > 4 * POLL_S + 2:
            return versions, time.monotonic() - start
        time.sleep(POLL_S / 2)


def run_cli(console: Console, tool: str, *args: str) -> int:
    console.print(f"[dim]$ {tool} {' '.join(args)}[/]")
    env = None if console.is_terminal else {**os.environ, "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", tool, *args], env=env).returncode


def quality_table(console: Console, report: dict[str, Any], model: str) -> None:
    """Both versions' quality over the labels fed back (``GET /v1/models/{m}/quality``)."""
    names = {"auc": "AUC", "log_loss": "log loss", "precision": "prec.", "recall": "recall", "ece": "ECE"}
    table = Table(title=f"{model}: quality over the labels fed back ({WINDOW})", title_justify="left")
    for col in ("version", "labels", *names.values()):
        table.add_column(col, justify="left" if col == "version" else "right")
    for v in report["versions"]:
        values = [v["metrics"].get(n) for n in names]
        shown = ["-" if x is None else f"{x:.3f}" for x in values]
        table.add_row(f"v{v['version']} ({v['role']})", str(v["rows"]), *shown)
    console.print(table)
    console.print(f"labels in the window, as the shared store counts them: {outcomes(report['feedback'])}")


def labels_file(path: str, ids: list[str], labels: list[int]) -> None:
    """The labels as a chargeback feed would deliver them, for the offline report."""
    pd.DataFrame({"prediction_id": ids, "label": labels}).to_parquet(path, index=False)
