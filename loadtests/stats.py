"""Reading what Locust wrote with ``--csv PREFIX`` (``--csv-full-history``).

* ``PREFIX_stats.csv``: one row per endpoint (Type = request method or "grpc", Name) and a last
  row ``Aggregated`` (empty Type) over all requests;
* ``PREFIX_stats_history.csv``: a row per second per endpoint (with full history) and for
  ``Aggregated``: users, current rps, and percentiles over Locust's sliding window;
* ``PREFIX_failures.csv``: each distinct error with its count.

Locust stores response times rounded (to 1 ms below 100 ms, 10 ms below 1 s, 100 ms above) and
writes percentiles as whole numbers, "N/A" where there were no requests; limits finer than that
cannot be judged.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.errors import LocustFailedError
from loadtests.sla import AGGREGATED

PERCENTILE_COLUMNS = {"p50": "50%", "p95": "95%", "p99": "99%"}


def _number(value: str | None) -> float | None:
    if value is None or value.strip() in ("", "N/A"):
        return None
    try:
        return float(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class EndpointStats:
    """Final figures of one endpoint (or of all requests, ``Aggregated``)."""

    type: str
    name: str
    requests: int
    failures: int
    rps: float
    avg_ms: float | None
    max_ms: float | None
    percentiles: dict[str, float | None] = field(default_factory=dict)

    @property
    def is_aggregate(self) -> bool:
        return self.name == AGGREGATED and not self.type

    @property
    def label(self) -> str:
        return self.name if self.is_aggregate else f"{self.name} [{self.type}]"

    @property
    def error_rate(self) -> float | None:
        return self.failures / self.requests if self.requests else None

    @property
    def p50(self) -> float | None:
        return self.percentiles.get("p50")

    @property
    def p95(self) -> float | None:
        return self.percentiles.get("p95")

    @property
    def p99(self) -> float | None:
        return self.percentiles.get("p99")

    def to_json(self) -> dict[str, object]:
        return {
            "type": self.type,
            "name": self.name,
            "requests": self.requests,
            "failures": self.failures,
            "error_rate": self.error_rate,
            "rps": self.rps,
            "avg_ms": self.avg_ms,
            "max_ms": self.max_ms,
            **{f"{k}_ms": v for k, v in self.percentiles.items()},
        }


@dataclass(frozen=True)
class HistoryPoint:
    """One second of the run for one endpoint, from the stats history."""

    timestamp: int
    users: int
    type: str
    name: str
    rps: float
    p50: float | None
    p95: float | None
    p99: float | None
    failures_per_s: float = 0.0  # Locust's current failures/s: the error rate is this over rps


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def read_stats(prefix: Path) -> list[EndpointStats]:
    """The final per-endpoint stats; LocustFailedError when Locust wrote none."""
    path = Path(f"{prefix}_stats.csv")
    try:
        rows = _rows(path)
    except OSError as exc:
        raise LocustFailedError(
            f"Locust wrote no stats file ({path})", hint="see the Locust log in the output folder"
        ) from exc
    stats = []
    for row in rows:
        try:
            requests, failures = int(row["Request Count"]), int(row["Failure Count"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LocustFailedError(f"unexpected row in {path}: {row}") from exc
        stats.append(
            EndpointStats(
                type=row.get("Type") or "",
                name=row.get("Name") or "",
                requests=requests,
                failures=failures,
                rps=_number(row.get("Requests/s")) or 0.0,
                avg_ms=_number(row.get("Average Response Time")),
                max_ms=_number(row.get("Max Response Time")),
                percentiles={k: _number(row.get(col)) for k, col in PERCENTILE_COLUMNS.items()},
            )
        )
    return stats


def read_history(prefix: Path) -> list[HistoryPoint]:
    """The per-second history (empty when the file is missing: the plot is then skipped)."""
    path = Path(f"{prefix}_stats_history.csv")
    try:
        rows = _rows(path)
    except OSError:
        return []
    points = []
    for row in rows:
        try:
            timestamp, users = int(row["Timestamp"]), int(row["User Count"])
        except (KeyError, TypeError, ValueError):
            continue
        points.append(
            HistoryPoint(
                timestamp=timestamp,
                users=users,
                type=row.get("Type") or "",
                name=row.get("Name") or "",
                rps=_number(row.get("Requests/s")) or 0.0,
                p50=_number(row.get("50%")),
                p95=_number(row.get("95%")),
                p99=_number(row.get("99%")),
                failures_per_s=_number(row.get("Failures/s")) or 0.0,
            )
        )
    return points


def read_failures(prefix: Path) -> list[dict[str, object]]:
    """Each distinct failure Locust recorded: method, name, error, occurrences."""
    path = Path(f"{prefix}_failures.csv")
    try:
        rows = _rows(path)
    except OSError:
        return []
    return [
        {
            "type": row.get("Method", ""),
            "name": row.get("Name", ""),
            "error": row.get("Error", ""),
            "occurrences": int(_number(row.get("Occurrences")) or 0),
        }
        for row in rows
    ]
