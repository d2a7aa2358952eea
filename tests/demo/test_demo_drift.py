"""The demo's drift step says what the gateway's report says: its burst shifts one column only,
and its lines about the tables follow the verdicts (no servers: reports as the endpoint gives them)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from demo import drift_step

NAMES = ["amount", "hour", "channel", "merchant_risk", "merchant_fraud_rate_30d"]


def report(rows: int, verdicts: dict[str, str], score: str = "ok") -> dict[str, Any]:
    """A ``GET /v1/models/{model}/drift`` body with one version (docs/drift.md section 5)."""

    def feature(name: str, verdict: str) -> dict[str, Any]:
        psi = {"ok": 0.01, "warn": 0.15, "alert": 0.5}[verdict]
        return {
            "name": name,
            "verdict": verdict,
            "psi": psi,
            "ks": 0.1,
            "ks_critical": 0.05,
            "null_rate_change": 0.0,
        }

    return {
        "verdict": "ok",
        "versions": [
            {
                "version": "1",
                "rows": rows,
                "features": [feature(n, verdicts.get(n, "ok")) for n in NAMES],
                "prediction": {**feature("score", score), "name": "score"},
            }
        ],
    }


def printed(fn: Any, *args: Any) -> str:
    console = Console(record=True, width=300)
    fn(console, *args)
    return console.export_text()


def test_the_burst_is_the_rows_twice_over_with_amount_x3_and_nothing_else_changed():
    rows = [
        {"user_id": 1, "merchant_id": 2, "amount": 10.5, "hour": 3, "channel": "web"},
        {"user_id": 7, "merchant_id": 9, "amount": 1.25, "hour": 22, "channel": "pos"},
    ]
    burst = drift_step.burst(rows)
    assert len(burst) == 4
    assert [r["amount"] for r in burst] == [31.5, 3.75, 31.5, 3.75]
    assert [{k: v for k, v in r.items() if k != "amount"} for r in burst] == [
        {k: v for k, v in r.items() if k != "amount"} for r in rows + rows
    ]
    assert rows[0]["amount"] == 10.5  # the baseline's rows are left as they were


def test_the_lines_follow_the_verdicts():
    noisy = {"merchant_risk": "warn", "merchant_fraud_rate_30d": "warn"}
    before = drift_step.Seen.of(report(1000, noisy))
    text = printed(drift_step.explain_baseline, before)
    assert "no feature alerts" in text and "warn on merchant_risk, merchant_fraud_rate_30d: noise" in text

    after = drift_step.Seen.of(report(3000, {**noisy, "amount": "alert"}, score="warn"))
    text = printed(drift_step.explain_burst, before, after)
    assert "67% of them with amount x3" in text
    assert "alert on amount alone" in text and "unexpected" not in text
    assert "ok -> warn" in text and "KS 0.100 over its critical 0.050" in text

    # a column the burst did not shift alerting too is said, not hidden
    wrong = drift_step.Seen.of(report(3000, {**noisy, "amount": "alert", "hour": "alert"}))
    text = printed(drift_step.explain_burst, before, wrong)
    assert "unexpected: alerts on amount, hour" in text and "alone" not in text
    assert "unexpected" in printed(drift_step.explain_baseline, wrong)
