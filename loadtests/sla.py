"""SLA files: YAML, validated with pydantic before any load is sent.

A file lists thresholds per endpoint (a Locust request name, ``Aggregated`` for all requests
together, or ``*`` for every endpoint on its own)::

    description: loose limits for a laptop
    endpoints:
      - name: Aggregated
        p95_ms: 250
        max_error_rate: 0.01    # a fraction: 0.01 = 1 %
        min_rps: 5
      - name: infer
        type: grpc              # optional: Locust's request type (POST, GET, grpc)
        p99_ms: 500
        optional: true          # no requests for it is not a miss (the file serves several users)

A ``promotion:`` section (see loadtests/criteria.py) adds the live evidence a challenger must
show; a file may hold only that section (a criteria file for ``loadtests evidence``).

Unknown keys, wrong types, negative or out-of-range thresholds are errors that name the field
(``endpoints[1] (infer).p99_ms: ...``); the gate exits 3 on them without starting any load.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from loadtests.criteria import PromotionCriteria
from loadtests.errors import SlaFileError

BUNDLED_DIR = Path(__file__).resolve().parent / "sla"
AGGREGATED = "Aggregated"  # the name Locust gives the all-requests row
EVERY_ENDPOINT = "*"

# metric -> (stats attribute, "max" for upper bounds, "min" for lower bounds, unit)
METRICS: dict[str, tuple[str, str, str]] = {
    "p50_ms": ("p50", "max", "ms"),
    "p95_ms": ("p95", "max", "ms"),
    "p99_ms": ("p99", "max", "ms"),
    "max_error_rate": ("error_rate", "max", ""),
    "min_rps": ("rps", "min", "req/s"),
}


class EndpointSla(BaseModel):
    """The thresholds for one endpoint; at least one must be given."""

    # strict: "250" is not 250 and `true` is not 1 -- a quoted number in YAML is a typo worth
    # reporting, not coercing.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(min_length=1, description="Locust request name, 'Aggregated' or '*'")
    type: str | None = Field(default=None, min_length=1, description="Locust request type/method")
    p50_ms: float | None = Field(default=None, gt=0)
    p95_ms: float | None = Field(default=None, gt=0)
    p99_ms: float | None = Field(default=None, gt=0)
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    min_rps: float | None = Field(default=None, gt=0)
    optional: bool = False

    @model_validator(mode="after")
    def _thresholds_make_sense(self) -> EndpointSla:
        if not self.thresholds():
            raise ValueError("no threshold: give at least one of " + ", ".join(METRICS))
        given = [(m, getattr(self, m)) for m in ("p50_ms", "p95_ms", "p99_ms") if getattr(self, m)]
        for (low_name, low), (high_name, high) in itertools.pairwise(given):
            if low > high:
                raise ValueError(f"{low_name} ({low:g}) is above {high_name} ({high:g})")
        return self

    def thresholds(self) -> dict[str, float]:
        """The metrics this line sets, in a stable order."""
        return {m: float(v) for m in METRICS if (v := getattr(self, m)) is not None}

    @property
    def label(self) -> str:
        return f"{self.name} [{self.type}]" if self.type else self.name


class Sla(BaseModel):
    """A whole SLA file."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    description: str = ""
    endpoints: list[EndpointSla] = Field(default_factory=list)
    promotion: PromotionCriteria | None = None

    @field_validator("endpoints", mode="after")
    @classmethod
    def _not_empty(cls, value: list[EndpointSla]) -> list[EndpointSla]:
        if not value:  # given but empty: a half-written file, not a criteria-only one
            raise ValueError("List should have at least 1 item")
        return value

    @model_validator(mode="after")
    def _unique_lines(self) -> Sla:
        if not self.endpoints and self.promotion is None:
            raise ValueError("nothing to check: give 'endpoints' (latency), 'promotion' (evidence), or both")
        seen: set[tuple[str, str | None]] = set()
        for line in self.endpoints:
            key = (line.name, line.type)
            if key in seen:
                raise ValueError(f"endpoint {line.label!r} is listed twice")
            seen.add(key)
        return self


def resolve_sla_path(value: str) -> Path:
    """A path as given, or the name of a bundled file (``demo`` -> loadtests/sla/demo.yaml)."""
    path = Path(value).expanduser()
    if path.is_file() or path.suffix or "/" in value:
        return path
    # a bare name: bundled first ("demo" is also a folder at the repository root)
    bundled = BUNDLED_DIR / f"{value}.yaml"
    return bundled if bundled.is_file() else path


def load_sla(path: Path) -> Sla:
    """Read and validate an SLA file; every problem raises SlaFileError naming the field."""
    try:
        text = path.read_text()
    except OSError as exc:
        bundled = ", ".join(sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml")))
        raise SlaFileError(
            f"cannot read SLA file {path}: {exc.strerror or exc}",
            hint=f"pass a YAML file, or a bundled name: {bundled}",
        ) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SlaFileError(f"SLA file {path} is not valid YAML{where}: {problem}") from exc
    if not isinstance(data, dict):
        raise SlaFileError(
            f"SLA file {path} must be a mapping with an 'endpoints' list and/or a 'promotion' section, "
            f"got {type(data).__name__}",
            hint="see loadtests/sla/demo.yaml",
        )
    try:
        return Sla.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err, data) for err in exc.errors()]
        raise SlaFileError(
            f"SLA file {path} is invalid: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            problems=problems,
            hint=_hint(problems),
        ) from exc


def _hint(problems: list[str]) -> str:
    if problems and problems[0].startswith("promotion"):
        return "see loadtests/sla/promotion.yaml and loadtests/criteria.py for the promotion keys"
    return "allowed keys per endpoint: " + ", ".join(EndpointSla.model_fields)


def _describe(err: Any, data: dict[str, Any]) -> str:
    """One pydantic error as ``endpoints[1] (infer).p95_ms: <message> (got -5)``."""
    loc = err.get("loc", ())
    parts: list[str] = []
    for i, item in enumerate(loc):
        if isinstance(item, int) and parts:
            parts[-1] += f"[{item}]"
            name = _endpoint_name(data, loc[: i + 1])
            if name:
                parts[-1] += f" ({name})"
        else:
            parts.append(str(item))
    where = ".".join(parts) or "(file)"
    if err.get("type") == "extra_forbidden":
        return f"{where}: unknown key"
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict | list) else ""
    return f"{where}: {message}{got}"


def _endpoint_name(data: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    if len(loc) != 2 or loc[0] != "endpoints":
        return None
    endpoints = data.get("endpoints")
    if isinstance(endpoints, list) and loc[1] < len(endpoints) and isinstance(endpoints[loc[1]], dict):
        name = endpoints[loc[1]].get("name")
        return str(name) if name is not None else None
    return None
