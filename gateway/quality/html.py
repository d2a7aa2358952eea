"""The offline quality report as one self-contained HTML file: the quality table of every
version, the label join counts in words, and (binary models) a reliability plot as inline SVG.

Inline SVG, like the drift report (gateway/payload_log/html.py): no scripts, no network, no
matplotlib in the gateway image; opens anywhere and diffs as text.
"""

from __future__ import annotations

import math
from html import escape
from typing import Final

from gateway.quality.metrics import HIGHER_IS_BETTER
from gateway.quality.offline import OfflineReport
from gateway.quality.report import VersionQuality

_STYLE = """
body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.note{color:#666}
.verdict{font-size:15px;background:#f6f8fa;border-left:4px solid #1e88e5;padding:6px 10px}
"""
_COLORS: Final = ("#1e88e5", "#e53935", "#43a047", "#8e24aa", "#fb8c00", "#00897b")
_MEANING: Final = {
    "accepted": "joined to exactly one logged prediction and scored",
    "duplicate": "a second label for a row that already had the same one: counted once",
    "conflicting": "a second, different label for a row: the first (in file order) is kept",
    "unknown": "no logged prediction to join to (unmatched: not in the log, or logged after the label)",
    "invalid": "not a label of this model (not one of its classes, or not a finite number)",
}


def _num(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.4f}"


def _name(v: VersionQuality) -> str:
    return f"{v.role} {v.model} v{v.version}"


def _quality_table(versions: tuple[VersionQuality, ...]) -> str:
    names = list(dict.fromkeys(n for v in versions for n in v.metrics))
    head = "".join(f"<th>{escape(_name(v))}</th>" for v in versions)
    rows = [f"<tr><th>metric</th><th>better</th>{head}</tr>"]
    rows.append(
        "<tr><td>labeled rows</td><td></td>" + "".join(f"<td>{v.rows}</td>" for v in versions) + "</tr>"
    )
    for name in names:
        better = "higher" if HIGHER_IS_BETTER.get(name, True) else "lower"
        cells = "".join(f"<td>{_num(v.metrics.get(name))}</td>" for v in versions)
        rows.append(f"<tr><td>{escape(name)}</td><td>{better}</td>{cells}</tr>")
    return f'<table id="quality">{"".join(rows)}</table>'


def _join_table(report: OfflineReport) -> str:
    counts: dict[str, int] = {str(k): v for k, v in report.report.feedback.items()}

    rows = ["<tr><th>labels</th><th>count</th><th>what it means</th></tr>"]
    for outcome, meaning in _MEANING.items():
        shown = "; ".join(report.examples.get(outcome, []))
        example = f'<br><span class="note">e.g. {escape(shown)}</span>' if shown else ""
        rows.append(
            f"<tr><td>{outcome}</td><td>{counts.get(outcome, 0)}</td><td>{meaning}{example}</td></tr>"
        )
    return f'<table id="join">{"".join(rows)}</table>'


def reliability_svg(versions: tuple[VersionQuality, ...]) -> str:
    """Observed positive rate against mean predicted probability per score bin, one line per
    version; the diagonal is perfect calibration; a dot's area grows with its bin's rows."""
    size, pad = 320, 40
    span = size - 2 * pad

    def xy(p: float, r: float) -> tuple[float, float]:
        return pad + p * span, size - pad - r * span

    parts = [
        # the legend beside the plot: room for "challenger " and a 40-character model name
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 360}" height="{size}" role="img" '
        'aria-label="reliability plot">',
        f'<rect x="{pad}" y="{pad}" width="{span}" height="{span}" fill="none" stroke="#ccc"/>',
        f'<line x1="{pad}" y1="{size - pad}" x2="{size - pad}" y2="{pad}" stroke="#999" '
        'stroke-dasharray="4 3"/>',
        f'<text x="{size / 2}" y="{size - 8}" font-size="11" text-anchor="middle">'
        "mean predicted probability</text>",
        f'<text x="12" y="{size / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {size / 2})">observed positive rate</text>',
    ]
    for tick in (0.0, 0.5, 1.0):
        x, y = xy(tick, tick)
        parts.append(
            f'<text x="{x}" y="{size - pad + 14}" font-size="10" text-anchor="middle">{tick:g}</text>'
        )
        parts.append(f'<text x="{pad - 4}" y="{y + 4}" font-size="10" text-anchor="end">{tick:g}</text>')
    for i, version in enumerate(v for v in versions if v.reliability):
        color = _COLORS[i % len(_COLORS)]
        used = [
            b for b in version.reliability if b.mean_predicted is not None and b.observed_rate is not None
        ]
        total = max(sum(b.count for b in used), 1)
        points = [xy(b.mean_predicted, b.observed_rate) for b in used]  # type: ignore[arg-type]
        if len(points) > 1:
            line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for b, (x, y) in zip(used, points, strict=True):
            r = 2 + 8 * math.sqrt(b.count / total)
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{color}" fill-opacity="0.6">'
                f"<title>{escape(_name(version))}: [{b.lower:.1f}, {b.upper:.1f}) {b.count} rows, "
                f"predicted {b.mean_predicted:.3f}, observed {b.observed_rate:.3f}</title></circle>"
            )
        ly = pad + 16 * i
        parts.append(f'<rect x="{size + 4}" y="{ly}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{size + 18}" y="{ly + 9}" font-size="11">{escape(_name(version))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def verdict(versions: tuple[VersionQuality, ...]) -> str:
    """The comparison in one sentence: the challenger against the champion that answered most,
    metric by metric, in each metric's better direction (the release gate decides; this says
    what the labels show)."""
    champions = [v for v in versions if v.role == "champion" and v.rows]
    challengers = [v for v in versions if v.role == "challenger" and v.rows]
    if not champions:
        return '<p class="verdict">No version has labeled rows: nothing to compare.</p>'
    champion = max(champions, key=lambda v: v.rows)
    if not challengers:
        return (
            f'<p class="verdict">{escape(_name(champion))} alone answered labeled rows '
            f"({champion.rows}): no challenger to compare with.</p>"
        )
    lines = []
    for challenger in challengers:
        better: list[str] = []
        worse: list[str] = []
        for metric, mine in challenger.metrics.items():
            theirs = champion.metrics.get(metric)
            if mine is None or theirs is None or mine == theirs:
                continue
            wins = (mine > theirs) == HIGHER_IS_BETTER.get(metric, True)
            (better if wins else worse).append(f"{metric} {_num(mine)} vs {_num(theirs)}")
        judged = len(better) + len(worse)
        word = "better" if len(better) > len(worse) else "worse" if len(worse) > len(better) else "even"
        lines.append(
            f"<b>{escape(_name(challenger))}</b> against <b>{escape(_name(champion))}</b>: {word} on "
            f"these labels, better on {len(better)} of {judged} metrics"
            + (f" ({escape(', '.join(better))})" if better else "")
            + (f", worse on {escape(', '.join(worse))}" if worse else "")
            + f"; {challenger.rows} vs {champion.rows} labeled rows."
        )
    return '<p class="verdict">' + "<br>".join(lines) + "</p>"


def render(report: OfflineReport) -> str:
    """The whole report as an HTML document."""
    quality = report.report
    title = f"Model quality: {quality.model}"
    how = {
        "prediction_id": "by prediction id (the file's prediction_id against the log's __prediction_id)",
        "entity and time": (
            f"by entity ({', '.join(report.labels.keys)}) and time: each label to the latest logged "
            "prediction of its entity at or before the label's event_timestamp"
        ),
        "feature view": (
            "from a Feast feature view: its value for each logged row's entity at the row's log time"
        ),
    }.get(report.labels.by, report.labels.by)
    head = (
        f"<p>Payload log <code>{escape(report.log)}</code>: {report.log_rows} rows logged from "
        f"{report.since:%Y-%m-%d %H:%M:%S} to {report.until:%Y-%m-%d %H:%M:%S} UTC. Labels from "
        f"<code>{escape(report.labels.source)}</code>, joined {escape(how)}. A {escape(quality.kind)} "
        "model; metrics are computed per version that answered (the champion's rows, and the rows a "
        "challenger shadowed), over the rows with an accepted label; – is undefined on these rows "
        "(AUC with one class only, precision with nothing predicted positive). Precision, recall and "
        "accuracy count a row as predicted positive when its score is at or above the version's "
        "decision threshold (<code>serving.decision_threshold</code> of its export, else 0.5).</p>"
    )
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in report.notes)
    plot = ""
    if any(v.reliability for v in quality.versions):
        plot = (
            "<h2>Reliability</h2><p>Per score bin (0.1 wide): the share of rows that were truly positive "
            "against the mean predicted probability. On the diagonal, a score of 0.8 means an 80% "
            "chance. A dot's area grows with the rows in its bin (hover for the count): a far-off dot "
            f"of few rows says little.</p>{reliability_svg(quality.versions)}"
        )
    body = (
        f"{head}{notes}<h2>Quality</h2>{verdict(quality.versions)}{_quality_table(quality.versions)}"
        f"<h2>Labels</h2>{_join_table(report)}{plot}"
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>\n"
    )
