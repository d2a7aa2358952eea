"""Typed gateway settings, parsed once in ``main()`` from env vars (``GATEWAY_*``) and flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ShadowTarget(BaseModel):
    """A challenger that answers a model's live requests off the response path (docs/shadow.md).

    ``model``: the Triton-served model that answers (default: the same model, another version
    of it); ``version``: which of its versions (default: its newest ready one other than the
    champion's); ``share``: the requests mirrored; ``tolerance``: a score or value difference
    past which a row counts as differing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    version: str | None = Field(None, pattern=r"^[0-9]+$")
    share: float = Field(1.0, ge=0.0, le=1.0)
    tolerance: float = Field(0.05, ge=0.0)


class FallbackRule(BaseModel):
    """The CRITICAL switch of one model (docs/quality.md, "The fallback switch"): when the
    champion's ``metric`` over labels that arrived in the last ``window`` is worse than
    ``threshold`` (below it for AUC, above it for log loss) on at least ``min_labels`` labeled
    rows, every replica serves the fallback instead: ``version`` of the same model (kept loaded
    beside the champion, ``builder export --keep-serving``), or ``model`` (another served model
    with the same inputs, kind and classes; at ``version``, else its own champion)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    version: str | None = Field(None, pattern=r"^[0-9]+$")
    metric: str = "auc"
    threshold: float
    window: str = "1h"
    min_labels: int = Field(200, ge=1)

    @model_validator(mode="after")
    def _named(self) -> FallbackRule:
        from gateway.drift.monitor import window_seconds
        from gateway.errors import GatewayError
        from gateway.quality.metrics import HIGHER_IS_BETTER

        if self.model is None and self.version is None:
            raise ValueError("name the fallback: a version of the model (version) or another model (model)")
        if self.metric not in HIGHER_IS_BETTER:
            raise ValueError(f"metric {self.metric!r} is not one of {', '.join(sorted(HIGHER_IS_BETTER))}")
        try:
            window_seconds(self.window)
        except GatewayError as exc:
            raise ValueError(exc.message) from None
        return self


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    grpc_port: int = Field(50051, ge=0, le=65535)  # 0: no gRPC server
    # Triton's HTTP endpoint (the default: cheaper per call, gateway/triton_http.py), or its gRPC
    # one as grpc://host:8001 (host:port with no scheme is gRPC too, as before).
    triton_url: str = "http://127.0.0.1:8000"
    feature_repo: Path = Path("feature_repo")
    models: tuple[str, ...] = ("fraud-detector",)  # what /readyz checks (any model can be asked)
    online_store: Literal["sqlite", "redis"] = "sqlite"
    redis_url: str | None = None  # Feast's form, host:port[,password=...]
    # Gateway processes on the same ports (SO_REUSEPORT), for a node with cores to spare: one
    # process is one GIL. Each has its own batches, /metrics and drift counts.
    workers: int = Field(1, ge=1, le=64)
    # The event loop: uvloop (measured faster, gateway/cli.py) or Python's own asyncio loop.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"

    triton_timeout_s: float = Field(2.0, gt=0)
    # The longest wait between reconnects to Triton after it went away: gRPC's default grows to
    # 120 s, so a gateway kept answering 503 for seconds after Triton was back (docs/gateway-limits.md).
    triton_reconnect_max_s: float = Field(0.5, gt=0)
    spec_ttl_s: float = Field(30.0, ge=0)  # how often a model's version and feature list are re-read
    feature_timeout_s: float = Field(1.0, gt=0)
    # SQLite reads on the event loop (fast) or in a worker thread (loop never blocked); see
    # gateway/features.py. The Redis profile always reads asynchronously.
    feature_reads: Literal["inline", "thread"] = "inline"
    # What to do when an entity has no online features: reject (404), or stand in for them and
    # flag the prediction (defaults_used): NaN in a float32 column (the model's imputer reads
    # it), "" in a string column (a OneHotEncoder with handle_unknown="ignore" reads it as an
    # unseen category). An int64 or bool column has no stand-in: that entity is a 404 either way.
    missing_entities: Literal["reject", "default"] = "reject"
    missing_entities_by_model: dict[str, Literal["reject", "default"]] = Field(default_factory=dict)

    max_body_bytes: int = Field(1 << 20, gt=0)
    max_batch_rows: int = Field(256, gt=0)
    # Concurrent requests to one model share a feature read and a Triton call; this many such
    # batches may be in flight at once (see gateway/batching.py for why one is the default).
    batch_in_flight: int = Field(1, ge=1)

    # A connection (HTTP or gRPC) with no request in flight is closed after this long; one that
    # never sends a request too. Behind a load balancer that pools connections, set it above the
    # balancer's own idle timeout, so the gateway is never the side that closes first.
    idle_timeout_s: float = Field(15.0, gt=0)

    # Auth: keys from GATEWAY_API_KEYS (comma separated) and/or a mounted file (one per line).
    api_keys: SecretStr | None = None
    api_keys_file: Path | None = None
    # /metrics stays open with keys on, so Prometheus inside the cluster scrapes it without a
    # secret; set this to require a key there too.
    metrics_require_key: bool = False
    log_level: str = "info"

    # Drift monitoring (docs/drift.md, gateway/drift/): the share of served rows counted against
    # the version's reference (0: off, no observer at all), PSI thresholds, and the window rows
    # below which no verdict is given (at 500 rows PSI's own noise on 10 bins is ~0.02, its 99.9th
    # percentile ~0.06: under the warn threshold; at 100 rows it reaches it by chance).
    drift_sample: float = Field(1.0, ge=0.0, le=1.0)
    drift_psi_warn: float = Field(0.1, gt=0)
    drift_psi_alert: float = Field(0.2, gt=0)
    drift_min_rows: int = Field(500, ge=1)
    # A rise of a column's null share (absolute) that warns / alerts: a feature going missing
    # online (gateway/drift/stats.py says why only a rise is an alarm).
    drift_null_warn: float = Field(0.1, gt=0, le=1)
    drift_null_alert: float = Field(0.2, gt=0, le=1)

    @field_validator("triton_url")
    @classmethod
    def _triton_scheme(cls, url: str) -> str:
        scheme, sep, address = url.partition("://")
        if sep and scheme not in ("http", "grpc"):
            raise ValueError(f"{url!r}: the scheme must be http:// or grpc:// (or none, for gRPC)")
        host, _, port = (address if sep else url).rstrip("/").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{url!r} is not host:port (for example http://triton:8000)")
        return url

    @field_validator("state_url")
    @classmethod
    def _state_scheme(cls, url: str | None) -> str | None:
        if url is not None and url != "off" and not url.startswith(("redis://", "rediss://", "sqlite:///")):
            raise ValueError(
                f"{url!r}: the shared store is redis://host:port[/db], rediss://..., sqlite:///path or off"
            )
        return url

    @model_validator(mode="after")
    def _evidence_for_shadow_and_fallback(self) -> GatewaySettings:
        if self.state_url == "off" and (self.shadow or self.fallback):
            raise ValueError(
                "GATEWAY_SHADOW and GATEWAY_FALLBACK keep their evidence in the shared store: "
                "GATEWAY_STATE_URL cannot be off"
            )
        return self

    @model_validator(mode="after")
    def _warn_below_alert(self) -> GatewaySettings:
        for kind, warn, alert in (
            ("PSI", self.drift_psi_warn, self.drift_psi_alert),
            ("NULL", self.drift_null_warn, self.drift_null_alert),
        ):
            if warn > alert:
                raise ValueError(
                    f"GATEWAY_DRIFT_{kind}_WARN ({warn}) is above GATEWAY_DRIFT_{kind}_ALERT ({alert})"
                )
        return self

    # The payload log (gateway/payload_log/): sampled rows and predictions as Parquet, in Feast's
    # feature-logging layout. Off unless set: payloads are user data, so keeping them is a
    # decision (retention, access, consent) the operator makes, not a default. A local folder or
    # an object-store URL (file://, s3://, gs://; pyarrow.fs resolves it and its credentials).
    payload_log: str | None = None
    payload_log_sample: float = Field(1.0, gt=0, le=1)  # share of served rows logged
    # Rows waiting for the writer; a full queue drops rows (counted), never delays a request.
    payload_log_queue_rows: int = Field(20_000, gt=0)
    payload_log_flush_rows: int = Field(5_000, gt=0)  # a file per this many rows...
    payload_log_flush_s: float = Field(10.0, gt=0)  # ...or per this many seconds, whichever first
    payload_log_close_s: float = Field(5.0, ge=0)  # how long shutdown waits to write what is queued
    # Entity keys as HMAC-SHA256(salt, str(key)) hex: joinable across the log, not readable.
    # A salt is required (an unsalted hash of a small integer id is reversed by enumeration).
    payload_log_hash_keys: bool = False
    payload_log_salt: SecretStr | None = None

    @model_validator(mode="after")
    def _salted(self) -> GatewaySettings:
        salt = self.payload_log_salt.get_secret_value() if self.payload_log_salt else ""
        if self.payload_log_hash_keys and not salt:
            raise ValueError("GATEWAY_PAYLOAD_LOG_HASH_KEYS needs GATEWAY_PAYLOAD_LOG_SALT")
        return self

    # Shadow traffic (gateway/shadow/): model -> its challenger, as JSON in GATEWAY_SHADOW, e.g.
    # {"fraud-detector": {"version": "2", "share": 0.5}}. Challenger calls in flight past
    # shadow_in_flight are dropped (counted), so a slow challenger never queues work.
    shadow: dict[str, ShadowTarget] = Field(default_factory=dict)
    shadow_in_flight: int = Field(64, ge=1)

    # The evidence every replica shares (gateway/evidence/): predictions awaiting their label,
    # labeled pairs, shadow counts, the fallback decision. redis://host:port[/db] or
    # sqlite:///path; default: the Feast online store's Redis (its own key prefix) on the Redis
    # profile, else a SQLite file in the temp folder that every worker of this port shares.
    # "off": no predictions are remembered (feedback answers 503; no shadow, no fallback).
    state_url: str | None = None
    # How long a prediction waits for its label (fraud labels come weeks later); an older
    # label is "expired". Redis memory: ~250 bytes a prediction (docs/quality.md).
    state_ttl_s: int = Field(30 * 24 * 3600, ge=60)
    state_pairs_per_version: int = Field(50_000, ge=1)  # labeled pairs kept per answering version
    # The CRITICAL switch: model -> its fallback and rule, as JSON in GATEWAY_FALLBACK, e.g.
    # {"fraud-detector": {"version": "1", "metric": "auc", "threshold": 0.7}}.
    fallback: dict[str, FallbackRule] = Field(default_factory=dict)
    fallback_poll_s: float = Field(1.0, gt=0)  # how often each replica reads the decision
    fallback_judge_s: float = Field(5.0, gt=0)  # how often one replica judges the rule

    def missing_policy(self, model: str) -> str:
        return self.missing_entities_by_model.get(model, self.missing_entities)
