"""The live evidence a promotion is decided on: the gateway's shadow and quality documents.

Read from a running gateway (``GET {gateway}/v1/models/{model}/shadow?window=1h`` and
``.../quality?window=1h``, API key as ``x-api-key``) or from files written by ``gateway shadow
--json`` and ``gateway quality report --json`` -- the same JSON either way. Each document is
parsed once into a typed object; every way of not getting one (gateway down, key refused, no
such endpoint or model, not JSON, not the gateway's shape, evidence about another model, window
or challenger) is one ``EvidenceUnavailableError`` line (exit 7). Only the documents the
criteria need are fetched.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadtests.criteria import PromotionCriteria, window_seconds
from loadtests.errors import EvidenceUnavailableError, UsageError

FETCH_TIMEOUT_S = 10.0
Kind = Literal["shadow", "quality"]
# how each document is produced by hand, for the hints
PRODUCED_BY: dict[str, str] = {"shadow": "gateway shadow --json", "quality": "gateway quality report --json"}

# The gateway owns these shapes; unknown keys are ignored so that it can add fields freely.
_DOC = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)


class VersionRef(BaseModel):
    model_config = _DOC

    model: str
    version: str


class Difference(BaseModel):
    model_config = _DOC

    mean: float | None = None
    p99: float | None = None
    max: float | None = None
    beyond_tolerance: float | None = None


class Latency(BaseModel):
    model_config = _DOC

    p50: float | None = None
    p99: float | None = None


class ShadowReport(BaseModel):
    """``GET /v1/models/{model}/shadow``: the challenger answering the same live rows."""

    model_config = _DOC

    model: str
    enabled: bool
    reason: str | None = None
    window: str | None = None
    window_seconds: int | None = None
    champion: VersionRef | None = None
    challenger: VersionRef | None = None
    rows: int | None = None
    mirrored_rows: int | None = None
    dropped_rows: int | None = None
    error_rows: int | None = None
    error_rate: float | None = None
    agreement: float | None = None
    difference: Difference | None = None
    score_psi: float | None = None
    challenger_latency_ms: Latency | None = None


class QualityVersion(BaseModel):
    model_config = _DOC

    model: str
    version: str
    role: str | None = None
    rows: int = 0
    metrics: dict[str, float | None] = Field(default_factory=dict)


class QualityReport(BaseModel):
    """``GET /v1/models/{model}/quality``: each version's metrics on labelled feedback."""

    model_config = _DOC

    model: str
    kind: str | None = None
    window: str | None = None
    window_seconds: int | None = None
    versions: list[QualityVersion] = Field(default_factory=list)
    feedback: dict[str, int] | None = None

    def by_role(self, role: str) -> QualityVersion | None:
        return next((v for v in self.versions if v.role == role), None)


@dataclass(frozen=True)
class EvidenceSource:
    """Where the evidence comes from: a gateway, or files (one of the two)."""

    gateway: str | None = None
    shadow_file: Path | None = None
    quality_file: Path | None = None
    api_key: str = ""
    timeout_s: float = FETCH_TIMEOUT_S

    def check(self) -> None:
        """UsageError for a source that cannot work: none given, both kinds, a malformed URL."""
        files = self.shadow_file is not None or self.quality_file is not None
        if self.gateway and files:
            raise UsageError(
                "give --gateway or --shadow/--quality files, not both",
                hint="files are for evidence exported with `gateway shadow --json`",
            )
        if not self.gateway and not files:
            raise UsageError("no evidence source: the criteria need --gateway URL or --shadow/--quality FILE")
        if self.gateway:
            parts = urlsplit(self.gateway)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise UsageError(f"bad gateway URL {self.gateway!r}", hint="write e.g. http://127.0.0.1:8080")

    def describe(self, kind: Kind) -> str:
        if self.gateway:
            return self.gateway.rstrip("/")
        path = self.shadow_file if kind == "shadow" else self.quality_file
        return str(path) if path else "(none)"


@dataclass(frozen=True)
class Subject:
    """What the evidence must be about: checked against every document read."""

    model: str
    window: str
    challenger_version: str | None = None


@dataclass(frozen=True)
class Evidence:
    shadow: ShadowReport | None = None
    quality: QualityReport | None = None
    sources: dict[str, str] = field(default_factory=dict)


def evidence_url(gateway: str, model: str, kind: Kind, window: str) -> str:
    return f"{gateway.rstrip('/')}/v1/models/{quote(model, safe='')}/{kind}?window={quote(window)}"


def fetch_document(source: EvidenceSource, subject: Subject, kind: Kind) -> dict[str, Any]:
    """GET one document from the gateway, with a timeout; one clear error for every failure."""
    assert source.gateway is not None
    url = evidence_url(source.gateway, subject.model, kind, subject.window)
    headers = {"Accept": "application/json"} | ({"x-api-key": source.api_key} if source.api_key else {})
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=source.timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise _http_error(exc, url, kind, subject.model) from exc
    except urllib.error.URLError as exc:
        text = getattr(exc.reason, "strerror", None) or str(exc.reason)
        raise EvidenceUnavailableError(
            f"gateway not reachable for {kind} evidence: {url} ({text})",
            hint="is --gateway the gateway's HTTP address (not Triton's)?",
        ) from exc
    except TimeoutError as exc:
        raise EvidenceUnavailableError(
            f"gateway did not answer {url} within {source.timeout_s:g} s",
            hint="raise --evidence-timeout, or check the gateway's load",
        ) from exc
    except OSError as exc:  # connection reset and friends
        raise EvidenceUnavailableError(f"gateway failed on {url}: {exc}") from exc
    return _json_object(body, url, kind)


def _http_error(exc: urllib.error.HTTPError, url: str, kind: Kind, model: str) -> EvidenceUnavailableError:
    body = exc.read(300).decode(errors="replace").strip().replace("\n", " ")
    said = f": {body}" if body else ""
    if exc.code in (401, 403):
        return EvidenceUnavailableError(
            f"gateway refused the {kind} evidence request (HTTP {exc.code}) at {url}{said}",
            hint="put the gateway's API key in $LOADTESTS_API_KEY (or --api-key-env NAME); "
            "it is sent as x-api-key",
        )
    if exc.code == 404:
        return EvidenceUnavailableError(
            f"gateway has no {kind} evidence for model {model!r} (HTTP 404) at {url}{said}",
            hint="check the model name; an older gateway does not serve /v1/models/{model}/" + kind,
        )
    return EvidenceUnavailableError(f"gateway answered HTTP {exc.code} for {kind} evidence at {url}{said}")


def _json_object(body: bytes | str, where: str, kind: Kind) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise EvidenceUnavailableError(
            f"{kind} evidence from {where} is not JSON{line}",
            hint=f"the file is what `{PRODUCED_BY[kind]}` prints",
        ) from exc
    if not isinstance(data, dict):
        raise EvidenceUnavailableError(
            f"{kind} evidence from {where} must be a JSON object, got {type(data).__name__}"
        )
    return data


def read_document(path: Path, kind: Kind) -> dict[str, Any]:
    """One evidence file (what ``gateway shadow --json`` / ``gateway quality report --json`` wrote)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise EvidenceUnavailableError(
            f"cannot read {kind} evidence file {path}: {exc.strerror or exc}",
            hint=f"write it with `{PRODUCED_BY[kind]} > FILE`, or use --gateway URL",
        ) from exc
    return _json_object(text, str(path), kind)


def _parse(model: type[ShadowReport] | type[QualityReport], data: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "(document)"
        raise EvidenceUnavailableError(
            f"{where} is not a gateway {model.__name__}: {loc}: {first.get('msg', 'invalid')}"
        ) from exc


def _check_subject(kind: Kind, doc: ShadowReport | QualityReport, subject: Subject, where: str) -> None:
    if doc.model != subject.model:
        raise EvidenceUnavailableError(
            f"{kind} evidence from {where} is about model {doc.model!r}, not {subject.model!r}"
        )
    wanted = window_seconds(subject.window)
    if doc.window_seconds is not None and doc.window_seconds != wanted:
        raise EvidenceUnavailableError(
            f"{kind} evidence from {where} covers {doc.window_seconds} s, the criteria ask for "
            f"{subject.window} ({wanted} s)",
            hint="export the evidence with the criteria's window, or change `window:`",
        )
    if subject.challenger_version is None:
        return
    if isinstance(doc, ShadowReport):
        found = doc.challenger.version if doc.challenger else None
    else:
        challenger = doc.by_role("challenger")
        found = challenger.version if challenger else None
    # a disabled shadow names no challenger: that is judged (as not judged), not an error
    if found is not None and found != subject.challenger_version:
        raise EvidenceUnavailableError(
            f"{kind} evidence from {where} is about challenger version {found}, "
            f"not the candidate {subject.challenger_version}",
            hint="point the gateway's shadow at the candidate and let the window fill",
        )


def _one_report(data: dict[str, Any], model: str, where: str) -> dict[str, Any]:
    """``gateway shadow --json`` (and ``gateway drift --json``) write ``{"reports": [...]}``, one
    per model; the endpoint and ``gateway quality report --json`` write one report: either is
    read, the model's report picked from a list."""
    reports = data.get("reports")
    if not isinstance(reports, list) or "model" in data:
        return data
    found = [r for r in reports if isinstance(r, dict) and r.get("model") == model]
    if not found:
        names = ", ".join(repr(r.get("model")) for r in reports if isinstance(r, dict)) or "none"
        raise EvidenceUnavailableError(
            f"{where} has reports of {names}, none of model {model!r}",
            hint="pass --model as the file names it, or export the model's report (--model)",
        )
    return dict(found[0])


def _load(source: EvidenceSource, subject: Subject, kind: Kind) -> ShadowReport | QualityReport:
    if source.gateway:
        data = fetch_document(source, subject, kind)
        where = evidence_url(source.gateway, subject.model, kind, subject.window)
    else:
        path = source.shadow_file if kind == "shadow" else source.quality_file
        if path is None:
            raise UsageError(
                f"the criteria have a {kind} section but no --{kind} FILE was given",
                hint=f"write it with `{PRODUCED_BY[kind]} > FILE`",
            )
        data, where = _one_report(read_document(path, kind), subject.model, str(path)), str(path)
    doc = _parse(ShadowReport if kind == "shadow" else QualityReport, data, where)
    _check_subject(kind, doc, subject, where)
    return doc


def collect_evidence(source: EvidenceSource, criteria: PromotionCriteria, subject: Subject) -> Evidence:
    """The documents the criteria need, read and checked; nothing else is fetched."""
    source.check()
    shadow = _load(source, subject, "shadow") if criteria.shadow is not None else None
    quality = _load(source, subject, "quality") if criteria.quality is not None else None
    sources = {}
    if shadow is not None:
        sources["shadow"] = source.describe("shadow")
    if quality is not None:
        sources["quality"] = source.describe("quality")
    assert shadow is None or isinstance(shadow, ShadowReport)
    assert quality is None or isinstance(quality, QualityReport)
    return Evidence(shadow, quality, sources)
