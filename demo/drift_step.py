"""The demo's drift step: traffic like the training rows, then a shifted burst, the drift table
after each, and the payload log's HTML report.

The gateway counts every served row into the version's reference bins (docs/drift.md); the
step sends rows drawn from the very rows the model was fitted on (entity keys and request
fields; the gateway reads the features online), so the first table is what unshifted traffic
looks like; then the burst: the same rows again, twice over, with ``amount`` x3. Every other
column's mix is then exactly the baseline's, so the second table can show that the one shifted
feature moves (and the score that depends on it) and nothing else: any other flag would be a
false alarm. Both tables read one window (``1h``) holding both; the burst is two thirds of it.

What the step prints about the tables (which features alert, which verdicts changed, the notes
on the merchant scores and the user features' nulls) is computed from the gateway's report,
never assumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from rich.console import Console

from support.train import ENTITY_KEYS, REQUEST_FIELDS, TRAIN_SHARE, demo_training_frame

BASELINE_ROWS = 1000  # twice GATEWAY_DRIFT_MIN_ROWS: PSI's own noise is ~0.01 at this size
BURST_REPEATS = 2  # the burst: the baseline's rows this many times over, shifted
SHIFTED = "amount"
FACTOR = 3.0
BATCH = 100  # rows per request (the gateway takes up to GATEWAY_MAX_BATCH_ROWS, 256)
WINDOW = "1h"
# 100 merchants, each served with its latest daily snapshot where training saw a spread of
# snapshots: their PSI sits near the warn line on unshifted traffic (docs/drift.md section 4).
USER_PROBE = "user_age_days"  # a user feature: null when the join found no user snapshot
UNKNOWN_USERS = 10**6  # ids from here up are no user the demo's data has
# An entity without online features is served on stand-ins (NaN, counted as nulls), not refused.
GATEWAY_ENV = {"GATEWAY_MISSING_ENTITIES": "default"}
MERCHANT_SCORES = ("merchant_risk", "merchant_fraud_rate_30d")


def training_rows(fs: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows drawn (seeded) from the rows the model was fitted on (the point-in-time join's
    oldest ``TRAIN_SHARE``, as support/train.py splits it): their entity keys and request fields.

    A row the join left without user features (a user with no snapshot yet at that time: about
    one training row in six) gets a user the online store does not know, so the gateway, on
    ``GATEWAY_MISSING_ENTITIES=default``, serves it on the same nulls the model was trained on.
    """
    frame = demo_training_frame(fs)
    fitted = frame.head(int(len(frame) * TRAIN_SHARE)).sample(n, random_state=seed)
    kinds = {"amount": float, "hour": int, "channel": str}
    rows = []
    for i, r in enumerate(fitted.to_dict("records")):
        row = {**{k: int(r[k]) for k in ENTITY_KEYS}, **{f: kinds[f](r[f]) for f in REQUEST_FIELDS}}
        if pd.isna(r[USER_PROBE]):
            row["user_id"] = UNKNOWN_USERS + i
        rows.append(row)
    return rows


def burst(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows ``BURST_REPEATS`` times over with ``amount`` x3: every other column's mix unchanged."""
    return [{**row, SHIFTED: round(row[SHIFTED] * FACTOR, 2)} for row in rows] * BURST_REPEATS


def send(url: str, model: str, rows: Sequence[dict[str, Any]]) -> None:
    """POST the rows to the gateway in batches; stop the demo on any refusal."""
    for i in range(0, len(rows), BATCH):
        body = json.dumps({"rows": list(rows[i : i + BATCH])}).encode()
        request = urllib.request.Request(
            f"{url}/v1/models/{model}/predict", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()
        except urllib.error.HTTPError as err:
            sys.exit(f"demo: the gateway answered {err.code}: {err.read()[:300]!r}")


def show_table(console: Console, url: str, model: str) -> dict[str, Any]:
    """Run ``gateway drift`` (its table on screen; exit 3 means some alert) and return the
    same report as JSON."""
    from gateway.drift.cli import fetch_report

    args = ["drift", "--url", url, "--model", model, "--window", WINDOW]
    console.print(f"[dim]$ gateway {' '.join(args)}[/]")
    # rich draws to the terminal's width, 80 columns when there is none (a log): the table is wider
    env = None if console.is_terminal else {**os.environ, "COLUMNS": "120"}
    rc = subprocess.run([sys.executable, "-m", "gateway", *args], env=env).returncode
    if rc not in (0, 3):
        sys.exit(f"demo: `gateway drift` failed with exit code {rc}")
    console.print(f"[dim](exit {rc}: {'an alert' if rc == 3 else 'no alert'})[/]")
    return fetch_report(url, model, WINDOW, None)


@dataclass(frozen=True)
class Seen:
    """One table's verdicts: per feature, and the prediction's."""

    rows: int
    verdicts: dict[str, str]
    psi: dict[str, float | None]
    null_change: dict[str, float | None]
    prediction: str
    prediction_name: str
    prediction_psi: float | None
    prediction_ks: tuple[float | None, float | None]  # the KS bound and its critical value

    @staticmethod
    def of(report: dict[str, Any]) -> Seen:
        version = report["versions"][0]  # the served version, newest first
        features = version["features"]
        prediction = version["prediction"] or {"name": "-", "verdict": "off", "psi": None}
        return Seen(
            rows=int(version["rows"]),
            verdicts={f["name"]: f["verdict"] for f in features},
            psi={f["name"]: f["psi"] for f in features},
            null_change={f["name"]: f["null_rate_change"] for f in features},
            prediction=prediction["verdict"],
            prediction_name=prediction["name"],
            prediction_psi=prediction["psi"],
            prediction_ks=(prediction.get("ks"), prediction.get("ks_critical")),
        )

    def having(self, verdict: str) -> list[str]:
        return [name for name, v in self.verdicts.items() if v == verdict]


def _psi(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def explain_baseline(console: Console, seen: Seen) -> None:
    """What the unshifted table says, and why the columns that are not ``ok`` are not."""
    alerts, warns = seen.having("alert"), seen.having("warn")
    verdict = "alert" if alerts else "warn" if warns else "ok"
    console.print(
        f"unshifted traffic: {seen.rows} rows, no feature alerts"
        if not alerts
        else f"[red]unexpected: unshifted traffic alerts on {', '.join(alerts)}[/]"
    )
    console.print(f"  features: {verdict}; the {seen.prediction_name}: {seen.prediction}")
    noisy = [name for name in warns if name in MERCHANT_SCORES]
    if noisy:
        console.print(
            f"  warn on {', '.join(noisy)}: noise, not drift: 100 merchants, each served at its "
            "latest snapshot where training saw a spread of daily snapshots (docs/drift.md section 4)"
        )
    other = [name for name in warns if name not in MERCHANT_SCORES]
    if other:
        console.print(f"  [yellow]warn on {', '.join(other)} too[/]")


def explain_burst(console: Console, before: Seen, after: Seen) -> None:
    """Which features the burst flagged, against what it shifted."""
    alerts = after.having("alert")
    changed = [name for name in after.verdicts if after.verdicts[name] != before.verdicts.get(name)]
    share = (after.rows - before.rows) / max(after.rows, 1)
    console.print(
        f"after the burst: {after.rows} rows in the window, {share:.0%} of them with {SHIFTED} x{FACTOR:g}"
    )
    if alerts == [SHIFTED] and changed == [SHIFTED]:
        console.print(
            f"  [bold]alert on {SHIFTED} alone[/] (PSI {_psi(before.psi[SHIFTED])} -> "
            f"{_psi(after.psi[SHIFTED])}): exactly the shifted feature; every other verdict unchanged"
        )
    else:
        console.print(
            f"  [red]unexpected: alerts on {', '.join(alerts) or 'nothing'}, verdicts changed on "
            f"{', '.join(changed) or 'nothing'} (only {SHIFTED} was shifted)[/]"
        )
    ks, critical = after.prediction_ks
    detail = f"PSI {_psi(before.prediction_psi)} -> {_psi(after.prediction_psi)}"
    if ks is not None and critical is not None and ks > critical:
        detail += f"; KS {ks:.3f} over its critical {critical:.3f}: a real shift"
    console.print(
        f"  the {after.prediction_name} (prediction): {before.prediction} -> {after.prediction} "
        f"({detail}): the model reads {SHIFTED}, so its scores move with it"
    )


def write_report(console: Console, log: str, since: str, repo: str, out: str) -> None:
    """``gateway drift report`` over the payload log since ``since``; stop the demo if it fails."""
    args = ["drift", "report", "--log", log, "--since", since, "--repo", repo, "--out", out]
    console.print(f"[dim]$ gateway {' '.join(args)}[/]")
    rc = subprocess.run([sys.executable, "-m", "gateway", *args]).returncode
    if rc != 0:
        sys.exit(f"demo: `gateway drift report` failed with exit code {rc}")
    console.print(f"drift report (open it in a browser): {out}")
