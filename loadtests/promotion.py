"""Judging the promotion criteria against the evidence: one ``EvidenceCheck`` per criterion.

Each check is ``held``, ``failed`` or ``not judged``. "Not judged" means the evidence cannot
answer the criterion (the figure is null or absent, too few rows or labels, the shadow is
disabled, a version is missing from the quality report); it is shown as such, and it fails the
gate like a miss: a criterion someone wrote down is never waived for lack of evidence. A
criterion the file does not set is not checked at all.

Limits hold at the boundary (``agreement == min_agreement`` holds). Quality margins compare a
difference of two figures, so they allow 1e-9 of floating-point slack: an AUC of 0.90 against
0.91 is worse by exactly the 0.01 the file allows, not by 0.010000000000000009.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from loadtests.criteria import QUALITY_METRICS, PromotionCriteria, QualityCriteria, ShadowCriteria
from loadtests.evidence import Evidence, QualityReport, ShadowReport, Subject

HELD, FAILED, NOT_JUDGED = "held", "failed", "not judged"
SLACK = 1e-9


@dataclass(frozen=True)
class EvidenceCheck:
    """One promotion criterion applied to the evidence."""

    section: str  # "shadow" or "quality"
    criterion: str  # a key of the file: min_agreement, max_worse.auc, ...
    threshold: float
    observed: float | None
    status: str  # HELD, FAILED or NOT_JUDGED
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == HELD

    @property
    def name(self) -> str:
        return f"{self.section}.{self.criterion}"

    def to_json(self) -> dict[str, object]:
        return asdict(self) | {"name": self.name, "passed": self.passed}


def _diff(doc: ShadowReport, key: str) -> float | None:
    return getattr(doc.difference, key) if doc.difference is not None else None


# criterion -> (what it reads, "min"/"max", what the figure is called when it is missing)
SHADOW_FIGURES: dict[str, tuple[Callable[[ShadowReport], float | None], str, str]] = {
    "min_rows": (lambda d: d.rows, "min", "rows both versions answered"),
    "min_agreement": (lambda d: d.agreement, "min", "label agreement (null: the model kind has no label)"),
    "max_error_rate": (lambda d: d.error_rate, "max", "challenger error rate"),
    "max_score_psi": (lambda d: d.score_psi, "max", "score PSI"),
    "max_mean_difference": (lambda d: _diff(d, "mean"), "max", "mean score difference"),
    "max_p99_difference": (lambda d: _diff(d, "p99"), "max", "p99 score difference"),
    "max_beyond_tolerance": (lambda d: _diff(d, "beyond_tolerance"), "max", "share beyond tolerance"),
    "max_challenger_p99_ms": (
        lambda d: d.challenger_latency_ms.p99 if d.challenger_latency_ms else None,
        "max",
        "challenger p99 latency",
    ),
}


def _compare(section: str, criterion: str, limit: float, observed: float, bound: str) -> EvidenceCheck:
    ok = observed >= limit if bound == "min" else observed <= limit
    sign = ("≥" if ok else "<") if bound == "min" else ("≤" if ok else ">")
    detail = f"{observed:g} {sign} {limit:g}"
    return EvidenceCheck(section, criterion, limit, observed, HELD if ok else FAILED, detail)


def judge_shadow(criteria: ShadowCriteria, doc: ShadowReport | None) -> list[EvidenceCheck]:
    """Every shadow criterion; with too few rows (min_rows) the others are not judged."""
    given = criteria.given()
    if doc is None or not doc.enabled:
        why = (
            "no shadow evidence" if doc is None else f"shadow not enabled: {doc.reason or 'no reason given'}"
        )
        return [EvidenceCheck("shadow", k, v, None, NOT_JUDGED, why) for k, v in given.items()]
    checks: list[EvidenceCheck] = []
    too_few: str | None = None
    for criterion, limit in given.items():
        read, bound, what = SHADOW_FIGURES[criterion]
        observed = read(doc)
        if criterion != "min_rows" and too_few:
            checks.append(EvidenceCheck("shadow", criterion, limit, observed, NOT_JUDGED, too_few))
        elif observed is None:
            checks.append(
                EvidenceCheck("shadow", criterion, limit, None, NOT_JUDGED, f"the gateway reports no {what}")
            )
        else:
            check = _compare("shadow", criterion, limit, float(observed), bound)
            if criterion == "min_rows" and not check.passed:
                too_few = f"only {observed:g} rows both answered (min_rows {limit:g})"
            checks.append(check)
    return checks


def _quality_versions(doc: QualityReport | None) -> tuple[Any, Any, str | None]:
    if doc is None:
        return None, None, "no quality evidence"
    champion, challenger = doc.by_role("champion"), doc.by_role("challenger")
    if champion is None or challenger is None:
        missing = " and ".join(
            r for r, v in (("champion", champion), ("challenger", challenger)) if v is None
        )
        return champion, challenger, f"the quality report has no {missing} version"
    return champion, challenger, None


def _worse(metric: str, margin: float, doc: QualityReport, versions: tuple[Any, Any]) -> EvidenceCheck:
    champion, challenger = versions
    criterion = f"max_worse.{metric}"
    mine, theirs = challenger.metrics.get(metric), champion.metrics.get(metric)
    for value, who in (
        (theirs, f"champion (v{champion.version})"),
        (mine, f"challenger (v{challenger.version})"),
    ):
        if value is None:
            kind = f" ({doc.kind} model)" if doc.kind else ""
            why = f"{metric} is null for the {who}{kind}"
            return EvidenceCheck("quality", criterion, margin, None, NOT_JUDGED, why)
    assert mine is not None and theirs is not None
    higher_better = QUALITY_METRICS[metric]
    worse_by = (theirs - mine) if higher_better else (mine - theirs)
    ok = worse_by <= margin + SLACK
    relation = (
        f"worse by {worse_by:.4g}" if worse_by > 0 else f"better by {-worse_by:.4g}" if worse_by else "equal"
    )
    detail = f"{mine:g} vs champion {theirs:g}: {relation} {'≤' if ok else '>'} {margin:g} allowed"
    return EvidenceCheck("quality", criterion, margin, worse_by, HELD if ok else FAILED, detail)


def judge_quality(criteria: QualityCriteria, doc: QualityReport | None) -> list[EvidenceCheck]:
    """min_labels, then each metric's margin; with too few labels the margins are not judged."""
    champion, challenger, missing = _quality_versions(doc)
    checks: list[EvidenceCheck] = []
    too_few = missing
    if criteria.min_labels is not None:
        limit = float(criteria.min_labels)
        if missing:
            checks.append(EvidenceCheck("quality", "min_labels", limit, None, NOT_JUDGED, missing))
        else:
            labels = float(min(champion.rows, challenger.rows))
            check = _compare("quality", "min_labels", limit, labels, "min")
            checks.append(check)
            if not check.passed:
                too_few = f"only {labels:g} labelled rows per version (min_labels {limit:g})"
    for metric, margin in criteria.max_worse.items():
        if too_few or doc is None:
            why = too_few or "no quality evidence"
            checks.append(EvidenceCheck("quality", f"max_worse.{metric}", margin, None, NOT_JUDGED, why))
        else:
            checks.append(_worse(metric, margin, doc, (champion, challenger)))
    return checks


def judge(criteria: PromotionCriteria, evidence: Evidence) -> list[EvidenceCheck]:
    """Every criterion the file sets, shadow first."""
    checks: list[EvidenceCheck] = []
    if criteria.shadow is not None:
        checks += judge_shadow(criteria.shadow, evidence.shadow)
    if criteria.quality is not None:
        checks += judge_quality(criteria.quality, evidence.quality)
    return checks


def evidence_passed(checks: list[EvidenceCheck]) -> bool:
    """Every criterion held (not judged fails; no criteria cannot pass)."""
    return bool(checks) and all(c.passed for c in checks)


def promotion_summary(subject: Subject, evidence: Evidence, checks: list[EvidenceCheck]) -> dict[str, Any]:
    """The evidence part of summary.json / ``loadtests evidence --json``."""
    shadow, quality = evidence.shadow, evidence.quality
    ok = evidence_passed(checks)
    return {
        "ok": ok,
        "verdict": "pass" if ok else "fail",
        "model": subject.model,
        "window": subject.window,
        "challenger_version": subject.challenger_version,
        "sources": evidence.sources,
        "shadow": shadow.model_dump(mode="json") if shadow else None,
        "quality": quality.model_dump(mode="json") if quality else None,
        "checks": [c.to_json() for c in checks],
        "failed": [f"{c.name}: {c.detail}" for c in checks if c.status == FAILED],
        "not_judged": [f"{c.name}: {c.detail}" for c in checks if c.status == NOT_JUDGED],
    }
