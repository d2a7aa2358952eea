"""Typed gateway settings, parsed once in ``main()`` from env vars (``GATEWAY_*``) and flags.

In code they are nested by subsystem (``settings.triton.url``, ``settings.drift.sample``,
``settings.auth.api_keys``...), so each part is handed only its own section. Operators keep the
flat names they always had: ``GATEWAY_TRITON_URL``, ``GATEWAY_DRIFT_SAMPLE``, the chart's values
and the CLI's ``--triton-url``. A nested field's flat name is its ``alias`` (its own name when it
has none), declared beside it; ``_Environment`` reads ``GATEWAY_`` + that name into the section,
``nest`` does the same for the CLI's flags, and ``flat_name`` turns a validation error's location
back into the name the operator set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

__all__ = ["FallbackRule", "GatewaySettings", "ShadowTarget", "flat_name", "nest"]


class ShadowTarget(BaseModel):
    """A challenger that answers a model's live requests off the response path (docs/shadow.md).

    ``model``: the Triton-served model that answers (default: the same model, another version
    of it); ``version``: which of its versions (default: its newest ready one other than the
    champion's); ``share``: the requests mirrored; ``tolerance``: a score or value difference
    past which a row counts as differing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    version: str | None = Field(default=None, pattern=r"^[0-9]+$")
    share: float = Field(default=1.0, ge=0.0, le=1.0)
    tolerance: float = Field(default=0.05, ge=0.0)


class FallbackRule(BaseModel):
    """The CRITICAL switch of one model (docs/quality.md, "The fallback switch"): when the
    champion's ``metric`` over labels that arrived in the last ``window`` is worse than
    ``threshold`` (below it for AUC, above it for log loss) on at least ``min_labels`` labeled
    rows, every replica serves the fallback instead: ``version`` of the same model (kept loaded
    beside the champion, ``builder export --keep-serving``), or ``model`` (another served model
    with the same inputs, kind and classes; at ``version``, else its own champion)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    version: str | None = Field(default=None, pattern=r"^[0-9]+$")
    metric: str = "auc"
    threshold: float
    window: str = "1h"
    min_labels: int = Field(default=200, ge=1)

    @model_validator(mode="after")
    def _named(self) -> FallbackRule:
        from gateway.errors import GatewayError
        from gateway.quality.metrics import HIGHER_IS_BETTER
        from gateway.stats.counts import window_seconds

        if self.model is None and self.version is None:
            raise ValueError("name the fallback: a version of the model (version) or another model (model)")
        if self.metric not in HIGHER_IS_BETTER:
            raise ValueError(f"metric {self.metric!r} is not one of {', '.join(sorted(HIGHER_IS_BETTER))}")
        try:
            window_seconds(self.window)
        except GatewayError as exc:
            raise ValueError(exc.message) from None
        return self


class _Section(BaseModel):
    # populate_by_name: code builds a section by its field names, the environment by the flat names
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ServerSettings(_Section):
    """The process: where it listens, how many of it, its event loop, idle connections, logs."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    grpc_port: int = Field(default=50051, ge=0, le=65535)  # 0: no gRPC server
    # Gateway processes on the same ports (SO_REUSEPORT), for a node with cores to spare: one
    # process is one GIL. Each has its own batches, /metrics and drift counts.
    workers: int = Field(default=1, ge=1, le=64)
    # The event loop: uvloop (measured faster, gateway/cli.py) or Python's own asyncio loop.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    # A connection (HTTP or gRPC) with no request in flight is closed after this long; one that
    # never sends a request too. Behind a load balancer that pools connections, set it above the
    # balancer's own idle timeout, so the gateway is never the side that closes first.
    idle_timeout_s: float = Field(default=15.0, gt=0)
    log_level: str = "info"


class TritonSettings(_Section):
    # Triton's HTTP endpoint (the default: cheaper per call, gateway/clients/triton_http.py), or
    # its gRPC one as grpc://host:8001 (host:port with no scheme is gRPC too, as before).
    url: str = Field(default="http://127.0.0.1:8000", alias="triton_url")
    timeout_s: float = Field(default=2.0, gt=0, alias="triton_timeout_s")
    # The longest wait between reconnects to Triton after it went away: gRPC's default grows to
    # 120 s, so a gateway kept answering 503 for seconds after Triton was back (docs/gateway-limits.md).
    reconnect_max_s: float = Field(default=0.5, gt=0, alias="triton_reconnect_max_s")
    # how often a model's version and feature list are re-read from Triton
    spec_ttl_s: float = Field(default=30.0, ge=0)

    @field_validator("url")
    @classmethod
    def _triton_scheme(cls, url: str) -> str:
        scheme, sep, address = url.partition("://")
        if sep and scheme not in ("http", "grpc"):
            raise ValueError(f"{url!r}: the scheme must be http:// or grpc:// (or none, for gRPC)")
        host, _, port = (address if sep else url).rstrip("/").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{url!r} is not host:port (for example http://triton:8000)")
        return url


class FeatureSettings(_Section):
    """The Feast repository and its online store (gateway/clients/features.py)."""

    repo: Path = Field(default=Path("feature_repo"), alias="feature_repo")
    # How the serving process reads features: ``direct`` reads the online store in Feast's own
    # layout from specs compiled once from the registry (gateway/clients/direct_features.py; no
    # Feast SDK in the process), ``sdk`` through Feast's get_online_features.
    reader: Literal["direct", "sdk"] = Field(default="direct", alias="feature_reader")
    # A folder ``gateway compile-features`` wrote; unset, ``gateway serve`` compiles one at start
    # (in a child process) from ``repo``.
    specs: Path | None = Field(default=None, alias="feature_specs")
    online_store: Literal["sqlite", "redis"] = "sqlite"
    redis_url: str | None = None  # Feast's form, host:port[,password=...]
    timeout_s: float = Field(default=1.0, gt=0, alias="feature_timeout_s")
    # SQLite reads on the event loop (fast) or in a worker thread (loop never blocked); see
    # gateway/clients/features.py. The Redis profile always reads asynchronously.
    reads: Literal["inline", "thread"] = Field(default="inline", alias="feature_reads")
    # What to do when an entity has no online features: reject (404), or stand in for them and
    # flag the prediction (defaults_used): NaN in a float32 column (the model's imputer reads
    # it), "" in a string column (a OneHotEncoder with handle_unknown="ignore" reads it as an
    # unseen category). An int64 or bool column has no stand-in: that entity is a 404 either way.
    missing_entities: Literal["reject", "default"] = "reject"
    missing_entities_by_model: dict[str, Literal["reject", "default"]] = Field(default_factory=dict)

    def missing_policy(self, model: str) -> str:
        return self.missing_entities_by_model.get(model, self.missing_entities)


class LimitSettings(_Section):
    max_body_bytes: int = Field(default=1 << 20, gt=0)
    max_batch_rows: int = Field(default=256, gt=0)
    # Concurrent requests to one model share a feature read and a Triton call; this many such
    # batches may be in flight at once (see gateway/batching.py for why one is the default).
    batch_in_flight: int = Field(default=1, ge=1)


class AuthSettings(_Section):
    """Keys from GATEWAY_API_KEYS (comma separated) and/or a mounted file (one per line)."""

    api_keys: SecretStr | None = None
    api_keys_file: Path | None = None
    # /metrics stays open with keys on, so Prometheus inside the cluster scrapes it without a
    # secret; set this to require a key there too.
    metrics_require_key: bool = False


class DriftSettings(_Section):
    """Drift monitoring (docs/drift.md, gateway/drift/): the share of served rows counted against
    the version's reference (0: off, no observer at all), PSI thresholds, and the window rows
    below which no verdict is given (at 500 rows PSI's own noise on 10 bins is ~0.02, its 99.9th
    percentile ~0.06: under the warn threshold; at 100 rows it reaches it by chance)."""

    sample: float = Field(default=1.0, ge=0.0, le=1.0, alias="drift_sample")
    psi_warn: float = Field(default=0.1, gt=0, alias="drift_psi_warn")
    psi_alert: float = Field(default=0.2, gt=0, alias="drift_psi_alert")
    min_rows: int = Field(default=500, ge=1, alias="drift_min_rows")
    # A rise of a column's null share (absolute) that warns / alerts: a feature going missing
    # online (gateway/stats/measures.py says why only a rise is an alarm).
    null_warn: float = Field(default=0.1, gt=0, le=1, alias="drift_null_warn")
    null_alert: float = Field(default=0.2, gt=0, le=1, alias="drift_null_alert")

    @model_validator(mode="after")
    def _warn_below_alert(self) -> DriftSettings:
        for kind, warn, alert in (
            ("PSI", self.psi_warn, self.psi_alert),
            ("NULL", self.null_warn, self.null_alert),
        ):
            if warn > alert:
                raise ValueError(
                    f"GATEWAY_DRIFT_{kind}_WARN ({warn}) is above GATEWAY_DRIFT_{kind}_ALERT ({alert})"
                )
        return self


class PayloadLogSettings(_Section):
    """The payload log (gateway/payload_log/): sampled rows and predictions as Parquet, in Feast's
    feature-logging layout. Off unless set: payloads are user data, so keeping them is a
    decision (retention, access, consent) the operator makes, not a default. A local folder or
    an object-store URL (file://, s3://, gs://; pyarrow.fs resolves it and its credentials)."""

    url: str | None = Field(default=None, alias="payload_log")
    sample: float = Field(default=1.0, gt=0, le=1, alias="payload_log_sample")  # share of served rows logged
    # Rows waiting for the writer; a full queue drops rows (counted), never delays a request.
    queue_rows: int = Field(default=20_000, gt=0, alias="payload_log_queue_rows")
    flush_rows: int = Field(
        default=5_000, gt=0, alias="payload_log_flush_rows"
    )  # a file per this many rows...
    flush_s: float = Field(default=10.0, gt=0, alias="payload_log_flush_s")  # ...or seconds, whichever first
    close_s: float = Field(default=5.0, ge=0, alias="payload_log_close_s")  # what shutdown waits to write
    # Log the reason codes of the predictions that asked for them (``explain``, docs/explain.md):
    # off by default, since they repeat the logged values and the log's reader may not need them.
    explanations: bool = Field(default=False, alias="payload_log_explanations")
    # Entity keys as HMAC-SHA256(salt, str(key)) hex: joinable across the log, not readable.
    # A salt is required (an unsalted hash of a small integer id is reversed by enumeration).
    hash_keys: bool = Field(default=False, alias="payload_log_hash_keys")
    salt: SecretStr | None = Field(default=None, alias="payload_log_salt")

    @model_validator(mode="after")
    def _salted(self) -> PayloadLogSettings:
        if self.hash_keys and not (self.salt.get_secret_value() if self.salt else ""):
            raise ValueError("GATEWAY_PAYLOAD_LOG_HASH_KEYS needs GATEWAY_PAYLOAD_LOG_SALT")
        return self


class ShadowSettings(_Section):
    """Shadow traffic (gateway/shadow/): model -> its challenger, as JSON in GATEWAY_SHADOW, e.g.
    {"fraud-detector": {"version": "2", "share": 0.5}}. Challenger calls in flight past
    ``in_flight`` are dropped (counted), so a slow challenger never queues work."""

    targets: dict[str, ShadowTarget] = Field(default_factory=dict, alias="shadow")
    in_flight: int = Field(default=64, ge=1, alias="shadow_in_flight")


class StateSettings(_Section):
    """The evidence every replica shares (gateway/evidence/): predictions awaiting their label,
    labeled pairs, shadow counts, the fallback decision. redis://host:port[/db] or
    sqlite:///path; default: the Feast online store's Redis (its own key prefix) on the Redis
    profile, else a SQLite file in the temp folder that every worker of this port shares.
    "off": no predictions are remembered (feedback answers 503; no shadow, no fallback)."""

    url: str | None = Field(default=None, alias="state_url")
    # How long a prediction waits for its label (fraud labels come weeks later); an older
    # label is "expired". Redis memory: ~250 bytes a prediction (docs/quality.md).
    ttl_s: int = Field(default=30 * 24 * 3600, ge=60, alias="state_ttl_s")
    pairs_per_version: int = Field(
        default=50_000, ge=1, alias="state_pairs_per_version"
    )  # labeled pairs kept

    @field_validator("url")
    @classmethod
    def _state_scheme(cls, url: str | None) -> str | None:
        if url is not None and url != "off" and not url.startswith(("redis://", "rediss://", "sqlite:///")):
            raise ValueError(
                f"{url!r}: the shared store is redis://host:port[/db], rediss://..., sqlite:///path or off"
            )
        return url


class FallbackSettings(_Section):
    """The CRITICAL switch: model -> its fallback and rule, as JSON in GATEWAY_FALLBACK, e.g.
    {"fraud-detector": {"version": "1", "metric": "auc", "threshold": 0.7}}."""

    rules: dict[str, FallbackRule] = Field(default_factory=dict, alias="fallback")
    poll_s: float = Field(
        default=1.0, gt=0, alias="fallback_poll_s"
    )  # how often each replica reads the decision
    judge_s: float = Field(
        default=5.0, gt=0, alias="fallback_judge_s"
    )  # how often one replica judges the rule


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", frozen=True, extra="forbid")

    models: tuple[str, ...] = ("fraud-detector",)  # what /readyz checks (any model can be asked)
    server: ServerSettings = Field(default_factory=ServerSettings)
    triton: TritonSettings = Field(default_factory=TritonSettings)
    features: FeatureSettings = Field(default_factory=FeatureSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    drift: DriftSettings = Field(default_factory=DriftSettings)
    payload_log: PayloadLogSettings = Field(default_factory=PayloadLogSettings)
    shadow: ShadowSettings = Field(default_factory=ShadowSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    fallback: FallbackSettings = Field(default_factory=FallbackSettings)

    @model_validator(mode="after")
    def _evidence_for_shadow_and_fallback(self) -> GatewaySettings:
        if self.state.url == "off" and (self.shadow.targets or self.fallback.rules):
            raise ValueError(
                "GATEWAY_SHADOW and GATEWAY_FALLBACK keep their evidence in the shared store: "
                "GATEWAY_STATE_URL cannot be off"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # arguments first (the CLI's flags, nested by ``nest``), then the flat GATEWAY_* names
        return init_settings, _Environment(settings_cls), file_secret_settings


def _sections() -> dict[str, type[BaseModel]]:
    return {
        name: field.annotation
        for name, field in GatewaySettings.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }


def _flat_names() -> dict[str, tuple[str | None, str, FieldInfo]]:
    """Flat name (``triton_url``) -> (section or None at the top, field name, field)."""
    names: dict[str, tuple[str | None, str, FieldInfo]] = {}
    sections = _sections()
    for name, field in GatewaySettings.model_fields.items():
        if name not in sections:
            names[name] = (None, name, field)
            continue
        for sub, info in sections[name].model_fields.items():
            names[info.alias or sub] = (name, sub, info)
    return names


FLAT_NAMES = _flat_names()


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Flat names and values (the CLI's ``triton_url=...``) as the nested keyword arguments of
    ``GatewaySettings``; a name that is not a setting is a KeyError (a bug of the caller)."""
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        section, field, _ = FLAT_NAMES[name]
        if section is None:
            nested[field] = value
        else:
            nested.setdefault(section, {})[field] = value
    return nested


def flat_name(loc: tuple[int | str, ...]) -> str:
    """A validation error's location as the operator wrote it: ``("triton", "triton_url")`` is
    ``triton_url``, ``("shadow", "targets", "m", "share")`` is ``shadow.m.share``; "" for a check
    of a whole section, whose message names the variables."""
    parts = [str(p) for p in loc]
    sections = _sections()
    if len(parts) == 1 and parts[0] in sections:
        return ""  # a section's own check: its message names the variables
    if len(parts) >= 2 and parts[0] in sections:
        field = sections[parts[0]].model_fields.get(parts[1])
        head = (field.alias if field is not None else None) or parts[1]
        parts = [head, *parts[2:]]
    return ".".join(parts)


class _Environment(EnvSettingsSource):
    """The GATEWAY_* variables, by their flat names, into the nested sections (module doc).
    Values are read as pydantic-settings reads them (case-insensitive names; JSON for maps,
    lists and tuples), through its own decoding."""

    def __call__(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for flat, (section, name, field) in FLAT_NAMES.items():
            raw = self.env_vars.get(f"{self.env_prefix}{flat}".lower())
            if raw is None:
                continue
            value: Any = raw
            if self.field_is_complex(field):
                try:
                    value = self.decode_complex_value(flat, field, raw)
                except ValueError as exc:
                    raise SettingsError(
                        f'error parsing value for field "{flat}" from source "environment"'
                    ) from exc
            if section is None:
                data[name] = value
            else:  # by the field's own name, as ``nest`` and code do: the sources merge key by key
                data.setdefault(section, {})[name] = value
        return data
