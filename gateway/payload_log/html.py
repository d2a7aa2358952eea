"""The drift report as one self-contained HTML file: a summary table and, per feature, the
reference's and the window's share of rows in each bin as inline SVG bars.

Hand-written rather than Evidently (0.7.23 needs plotly<6, the lock has 7.1, and it compares raw
frames, not binned references) or matplotlib (not in the gateway image): no scripts, no
network, opens anywhere.
"""

from __future__ import annotations

import itertools
import math
from html import escape

import numpy as np

from gateway.payload_log.report import FeatureReport, Report, VersionReport
from gateway.stats.reference import Binned

_COLORS = {"alert": "#c62828", "warn": "#ef6c00", "ok": "#2e7d32", "insufficient": "#757575"}
_STYLE = """
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.feature{display:inline-block;vertical-align:top;margin:0 2em 2em 0}.note{color:#666}
.verdict{font-size:15px;background:#f6f8fa;border-left:4px solid #1e88e5;padding:6px 10px}
"""


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def bin_labels(binned: Binned) -> list[str]:
    """Human labels of the bins, the null bin last."""
    if binned.kind == "categorical":
        return [*(str(c) for c in binned.categories), "other", "null"]
    e = [f"{x:.4g}" for x in binned.edges]
    if not e:
        return ["all", "null"]
    return [f"< {e[0]}", *(f"[{a}, {b})" for a, b in itertools.pairwise(e)), f"≥ {e[-1]}", "null"]


def _bars(binned: Binned, window: np.ndarray) -> str:
    """Grouped bars: reference (grey) and window (blue) share per bin."""
    ref = binned.expected / max(binned.expected.sum(), 1)
    win = window / max(window.sum(), 1)
    labels = bin_labels(binned)
    # room below for the bin labels at 45° (18 characters) and at the right for the last one
    width, height, left, bottom = 34 * len(labels) + 120, 270, 40, 110
    top = max(float(ref.max(initial=0)), float(win.max(initial=0)), 0.01)
    scale = (height - bottom - 10) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for tick in (0.0, top / 2, top):
        y = height - bottom - tick * scale
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{tick:.0%}</text>'
        )
        parts.append(f'<line x1="{left}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
    for i, label in enumerate(labels):
        x = left + 6 + 34 * i
        for j, (share, color, who) in enumerate(
            ((ref[i], "#9e9e9e", "reference"), (win[i], "#1e88e5", "window"))
        ):
            h = share * scale
            parts.append(
                f'<rect x="{x + 14 * j}" y="{height - bottom - h:.1f}" width="13" height="{h:.1f}" '
                f'fill="{color}">'
                f"<title>{escape(label)}: {who} {share:.1%}</title></rect>"
            )
        parts.append(
            f'<text font-size="10" transform="translate({x + 14},{height - bottom + 10}) rotate(45)">'
            f"{escape(label[:18])}</text>"
        )
    for j, (color, who) in enumerate((("#9e9e9e", "reference"), ("#1e88e5", "window"))):
        y = 4 + 14 * j  # the legend, top right
        parts.append(f'<rect x="{width - 80}" y="{y}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{width - 66}" y="{y + 9}" font-size="10">{who}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _row(feature: FeatureReport) -> str:
    d = feature.drift
    verdict = d.verdict if d else ("not in the log" if feature.column is None else "–")
    color = _COLORS.get(verdict, "#222")
    test = "–"
    if d is not None and d.chi2 is not None:
        test = f"χ² {_num(d.chi2, 1)} (p {_num(d.chi2_p)})"
    elif d is not None and d.ks is not None:
        test = f"KS {_num(d.ks)} (crit. {_num(d.ks_critical)})"
    null_ref = _num(d.null_rate_reference) if d else "–"
    return (
        f"<tr><td>{escape(feature.name)}</td><td>{escape(feature.column or '–')}</td>"
        f"<td>{d.rows if d else '–'}</td><td>{_num(d.psi if d else None)}</td>"
        f'<td style="color:{color}">{escape(verdict)}</td><td>{test}</td>'
        f"<td>{_num(feature.null_rate)} / {null_ref}</td></tr>"
    )


_ORDER = ("alert", "warn", "ok")


def summary(version: VersionReport) -> str:
    """The version's verdict in one line: the worst verdict, and which features have each."""
    named: dict[str, list[str]] = {}
    for feature in version.features:
        if feature.drift is not None:
            label = feature.name
            if feature.drift.verdict in ("alert", "warn") and feature.drift.psi is not None:
                label += f" (PSI {_num(feature.drift.psi)})"
            named.setdefault(feature.drift.verdict, []).append(label)
    worst = next((v for v in _ORDER if v in named), None)
    if worst is None:
        return '<p class="verdict">No verdict: too few rows in the log for any feature, or no reference.</p>'
    parts = []
    for verdict in _ORDER:
        if verdict in named:
            names = named[verdict]
            shown = ", ".join(names) if verdict != "ok" else f"{len(names)} feature(s)"
            parts.append(
                f'<span style="color:{_COLORS.get(verdict, "#222")}">{verdict}</span>: {escape(shown)}'
            )
    return f'<p class="verdict">Verdict <b>{worst}</b>. ' + "; ".join(parts) + ".</p>"


def _version(version: VersionReport) -> str:
    out = [f"<h2>Version {escape(version.version)}: {version.rows} rows</h2>", summary(version)]
    if version.reference is None:
        out.append(f'<p class="note">No reference to compare with: {escape(version.why_not)}.</p>')
    else:
        out.append(
            f'<p class="note">Reference: {version.reference.rows} rows from '
            f"{escape(version.reference.source)}.</p>"
        )
    out.append(
        "<table><tr><th>feature</th><th>log column</th><th>rows</th><th>PSI</th><th>verdict</th>"
        "<th>test</th><th>null rate (window / reference)</th></tr>"
    )
    out += [_row(f) for f in version.features]
    out.append("</table>")
    for feature in version.features:
        if feature.binned is not None and feature.counts is not None:
            bars = _bars(feature.binned, feature.counts)
            out.append(f'<div class="feature"><h3>{escape(feature.name)}</h3>{bars}</div>')
    return "".join(out)


def render(report: Report) -> str:
    """The whole report as an HTML document."""
    title = f"Drift report: {report.model}"
    head = (
        f"<p>Payload log <code>{escape(report.location)}</code>, rows logged from "
        f"{report.since:%Y-%m-%d %H:%M:%S} to {report.until:%Y-%m-%d %H:%M:%S} UTC, compared with each "
        "version's training reference in the reference's bins (grey: reference, blue: window). "
        "Verdicts by PSI: warn ≥ 0.1, alert ≥ 0.2, none below the minimum row count.</p>"
    )
    body = "".join(_version(v) for v in report.versions)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>{head}{body}</body></html>\n"
    )
