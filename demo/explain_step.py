"""The demo's reason codes: the top 3 reasons for two transactions, one flagged and one not.

The champion is exported with ``--explain`` (run_demo.py), so Triton serves
``fraud-detector_explain`` beside it: exact TreeSHAP values per original column (docs/explain.md).
Here recent transactions (the rows after the training split, as live traffic would be) are
scored through the gateway with ``"explain": 3``; the first the model flags and the first it
does not are shown with their three largest contributions, in log-odds, and the check an
analyst can redo: base value + every column's contribution = the raw score, whose sigmoid is
the score.
"""

from __future__ import annotations

import json
import math
import sys
import urllib.error
import urllib.request
from typing import Any

from rich.console import Console
from rich.table import Table

from support.train import ENTITY_KEYS, REQUEST_FIELDS, TRAIN_SHARE, demo_training_frame

console = Console()
CANDIDATES = 64  # recent transactions scored to find one of each verdict


def _post(url: str, body: object) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def recent_rows(fs: Any, limit: int = CANDIDATES) -> list[dict[str, Any]]:
    """Transactions after the training split whose user and merchant the online store knows,
    the frauds first (so a flagged one is among them), as request bodies."""
    frame = demo_training_frame(fs)
    frame = frame.iloc[int(len(frame) * TRAIN_SHARE) :].dropna()
    frame = frame.sort_values("is_fraud", ascending=False, kind="stable").head(limit)
    kinds = {"amount": float, "hour": int, "channel": str}
    return [
        {**{k: int(r[k]) for k in ENTITY_KEYS}, **{f: kinds[f](r[f]) for f in REQUEST_FIELDS}}
        for r in frame.to_dict("records")
    ]


def show_reasons(gateway_http: str, fs: Any, model: str) -> None:
    """Score recent transactions with ``"explain": 3``, one per request as live traffic comes,
    until one is flagged and one is not; print both. A transaction whose user or merchant has
    no fresh online features is answered 404 (the gateway's missing-entity policy) and skipped."""
    rows, predictions = [], []
    for row in recent_rows(fs):
        status, body = _post(
            f"http://{gateway_http}/v1/models/{model}/predict", {"rows": [row], "explain": 3}
        )
        if status == 404 and body.get("cause") == "unknown_entity":
            continue
        if status != 200:
            sys.exit(f"demo: gateway answered {status} to explain: {body}")
        rows.append(row)
        predictions.append(body["predictions"][0])
        labels = {p["label"] for p in predictions}
        if {0, 1} <= labels:
            break
    flagged = next((i for i, p in enumerate(predictions) if p["label"] == 1), None)
    passed = next((i for i, p in enumerate(predictions) if p["label"] == 0), None)
    for index, verdict in ((flagged, "flagged"), (passed, "not flagged")):
        if index is None:
            console.print(f"(no {verdict} transaction among the {len(rows)} scored)")
            continue
        row, prediction = rows[index], predictions[index]
        explanation = prediction["explanation"]
        table = Table(
            title=f"{verdict}: user {row['user_id']}, merchant {row['merchant_id']}, "
            f"amount {row['amount']:.2f}, {row['channel']} at {row['hour']}h; score {prediction['score']:.3f}"
        )
        for name in ("reason", "column", "value the model saw", "contribution (log-odds)"):
            table.add_column(name, justify="left" if name in ("column", "value the model saw") else "right")
        for rank, reason in enumerate(explanation["reasons"], start=1):
            value = "missing" if reason["value"] is None else str(reason["value"])
            table.add_row(str(rank), reason["column"], value, f"{reason['contribution']:+.3f}")
        console.print(table)
        raw = explanation["raw_score"]
        console.print(
            f"base value {explanation['base_value']:+.3f} + every column's contribution = raw score "
            f"{raw:+.3f} (log-odds); sigmoid(raw) = {1 / (1 + math.exp(-raw)):.3f}, the score"
        )
