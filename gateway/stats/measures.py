"""Drift statistics of a window's counts against the reference's, per binned distribution.

All statistics read the same bins (the reference's, then the null bin last; gateway/stats/counts.py):

- **PSI** ``sum((q - p) * ln(q / p))`` over the bins of present values (the null bin apart: the
  distribution of the values the model got, as Evidently and WhyLabs compute it). ``p``/``q``
  are the reference's and the window's shares; a share of 0 is raised to ``EPS`` = 1e-4 (a bin
  empty on one side would otherwise make PSI infinite; 1e-4 is the usual choice, and keeps a
  bin the window leaves empty, of reference share ``p``, at ``p * ln(p / 1e-4)``).
- **χ²** (categoricals): Pearson's goodness of fit of the window's counts to the reference's
  shares (as ``scipy.stats.chisquare``), over the bins either side has rows in; a reference share
  of 0 is raised to ``EPS`` (then renormalized) so a category the training data never had still
  yields a finite statistic. p-value with ``bins - 1`` degrees of freedom.
- **KS bound** (numerics): ``max |F_window - F_reference|`` over the bin edges, of the non-null
  rows' CDFs. It is the two-sample KS statistic evaluated at the edges only, so a lower bound
  of the exact one; compared with the two-sample critical value at alpha = 0.05,
  ``1.358 * sqrt((n + m) / (n m))``.
- **Null rate**: window's share of nulls, the reference's, and their difference.

The verdict is the worse of two (χ² and KS flag any difference once the window is large, so they
are context, not alarms): ``insufficient`` below ``min_rows`` window rows; else PSI's ``ok``,
``warn`` (PSI >= ``psi_warn``) or ``alert`` (PSI >= ``psi_alert``), and the null rate's: ``warn``
when it *rose* by ``null_warn`` (0.1, an absolute share) or more, ``alert`` by ``null_alert``
(0.2). Only a rise is an alarm: more nulls online than in training is a feature going missing (a
broken pipeline, a stale store, entities the store lacks), which the model's imputer silently
papers over; fewer is what a point-in-time training join gives whenever entities had no history
yet, and is reported (``null_rate_change``) without an alarm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from gateway.stats.reference import Binned

EPS: Final = 1e-4
KS_ALPHA: Final = 0.05
KS_C: Final = math.sqrt(-math.log(KS_ALPHA / 2) / 2)  # 1.358

Verdict = Literal["off", "insufficient", "ok", "warn", "alert"]
# The gauge's value per verdict (docs/drift.md §2); "off" has no gauge.
STATUS: Final[dict[str, int]] = {"insufficient": -1, "ok": 0, "warn": 1, "alert": 2}
_RANK: Final = ("off", "insufficient", "ok", "warn", "alert")


@dataclass(frozen=True)
class Thresholds:
    psi_warn: float = 0.1
    psi_alert: float = 0.2
    min_rows: int = 500
    null_warn: float = 0.1  # rise of the null share (absolute) that warns
    null_alert: float = 0.2


def _shares(counts: np.ndarray) -> np.ndarray:
    total = counts.sum()
    return counts / total if total > 0 else np.zeros_like(counts, dtype=np.float64)


def psi(reference: np.ndarray, window: np.ndarray, eps: float = EPS) -> float:
    """Population stability index of ``window``'s counts against ``reference``'s (same bins)."""
    p = np.maximum(_shares(reference.astype(np.float64)), eps)
    q = np.maximum(_shares(window.astype(np.float64)), eps)
    return float(np.sum((q - p) * np.log(q / p)))


def chi_square(reference: np.ndarray, window: np.ndarray, eps: float = EPS) -> tuple[float, float]:
    """Pearson's χ² of ``window``'s counts against ``reference``'s shares, and its p-value."""
    used = (reference > 0) | (window > 0)
    if used.sum() < 2:  # one bin: nothing to compare
        return 0.0, 1.0
    p = np.maximum(_shares(reference[used].astype(np.float64)), eps)
    observed = window[used].astype(np.float64)
    expected = p / p.sum() * observed.sum()
    statistic = float(((observed - expected) ** 2 / expected).sum())
    # The p-value as scipy.stats.chisquare computes it (k − 1 degrees of freedom), without scipy:
    # the serving image leaves it out (~140 MB of ~270; issue 33), and a serving process that
    # imported scipy.special carried ~25 MiB more (issue 16).
    return statistic, chi2_sf(len(observed) - 1, statistic)


def chi2_sf(dof: int, x: float) -> float:
    """P(X >= x) for X ~ χ²(dof): Q(dof/2, x/2), the regularized upper incomplete gamma function,
    as scipy.special.chdtrc computes it (Cephes' igamc: P's series below a + 1, where Q is not
    small, else Q's continued fraction by Lentz's method); within 1e-12 of it, relatively."""
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    a, z = dof / 2, x / 2
    front = math.exp(a * math.log(z) - z - math.lgamma(a))
    if z < a + 1:
        term = total = 1 / a
        n = a
        while abs(term) > abs(total) * 1e-17:
            n += 1
            term *= z / n
            total += term
        return max(0.0, 1.0 - front * total)
    tiny = 1e-300
    b = z + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return front * h


def ks_bound(reference: np.ndarray, window: np.ndarray) -> tuple[float, float]:
    """Binned two-sample KS statistic over the non-null bins, and its critical value at alpha 0.05."""
    n, m = float(reference.sum()), float(window.sum())
    if n == 0 or m == 0:
        return 0.0, math.inf
    d = float(np.abs(np.cumsum(window) / m - np.cumsum(reference) / n)[:-1].max(initial=0.0))
    return d, KS_C * math.sqrt((n + m) / (n * m))


def verdict_of(psi_value: float | None, rows: int, thresholds: Thresholds, null_rise: float = 0.0) -> Verdict:
    """PSI's verdict and the null rate's rise, the worse of the two (module docstring)."""
    if rows < thresholds.min_rows:
        return "insufficient"
    by_nulls: Verdict = "ok"
    if null_rise >= thresholds.null_alert:
        by_nulls = "alert"
    elif null_rise >= thresholds.null_warn:
        by_nulls = "warn"
    if psi_value is None:  # every row null: nothing but the null rate to judge
        return by_nulls
    by_psi: Verdict = (
        "alert" if psi_value >= thresholds.psi_alert else "warn" if psi_value >= thresholds.psi_warn else "ok"
    )
    return worst([by_psi, by_nulls])


def worst(verdicts: list[Verdict]) -> Verdict:
    """The most severe verdict (alert > warn > ok > insufficient > off); ``off`` for none."""
    return max(verdicts, key=_RANK.index, default="off")


@dataclass(frozen=True)
class Drift:
    """One distribution's drift in a window."""

    name: str
    kind: str
    rows: int
    psi: float | None
    chi2: float | None  # categoricals
    chi2_p: float | None
    ks: float | None  # numerics
    ks_critical: float | None
    null_rate: float | None
    null_rate_reference: float
    verdict: Verdict

    @property
    def null_rate_change(self) -> float | None:
        return None if self.null_rate is None else self.null_rate - self.null_rate_reference

    def to_dict(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:  # JSON has no inf/NaN
            return None if x is None or not math.isfinite(x) else round(x, 6)

        return {
            "name": self.name,
            "kind": self.kind,
            "rows": self.rows,
            "psi": num(self.psi),
            "chi2": num(self.chi2),
            "chi2_p": num(self.chi2_p),
            "ks": num(self.ks),
            "ks_critical": num(self.ks_critical),
            "null_rate": num(self.null_rate),
            "null_rate_reference": num(self.null_rate_reference),
            "null_rate_change": num(self.null_rate_change),
            "verdict": self.verdict,
        }


def drift_of(binned: Binned, window: np.ndarray, thresholds: Thresholds) -> Drift:
    """``binned``'s drift given the window's counts in its bins (null bin last)."""
    reference = binned.expected
    rows = int(window.sum())
    ref_rows = float(reference.sum())
    null_ref = float(reference[-1] / ref_rows) if ref_rows else 0.0
    if rows == 0:
        return Drift(
            binned.name, binned.kind, 0, None, None, None, None, None, None, null_ref, "insufficient"
        )
    present = reference[:-1], window[:-1]
    value = psi(*present) if present[0].sum() > 0 and present[1].sum() > 0 else None
    chi2 = chi2_p = ks = ks_critical = None
    if binned.kind == "categorical":
        chi2, chi2_p = chi_square(*present)
    else:
        ks, ks_critical = ks_bound(reference[:-1], window[:-1])
    null_rate = float(window[-1] / rows)
    return Drift(
        binned.name,
        binned.kind,
        rows,
        value,
        chi2,
        chi2_p,
        ks,
        ks_critical,
        null_rate,
        null_ref,
        verdict_of(value, rows, thresholds, null_rate - null_ref),
    )
