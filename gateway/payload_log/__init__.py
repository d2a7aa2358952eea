"""The payload log: sampled feature rows and predictions, written asynchronously as Parquet.

Off unless ``GATEWAY_PAYLOAD_LOG`` names a folder or URL. Layout: gateway/payload_log/layout.py
(columns) and sink.py (files); the observer and its writer thread: writer.py; the HTML report
(``gateway drift report``): report.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.clients.features import FeatureClient
    from gateway.payload_log.sink import ParquetSink
    from gateway.payload_log.writer import LogConfig, PayloadLog
    from gateway.settings import GatewaySettings

__all__ = ["LogConfig", "ParquetSink", "PayloadLog", "open_payload_log"]


def __getattr__(name: str) -> Any:
    """The writer's and sink's names, imported when first asked for (PEP 562): they import
    pyarrow (~40 MiB), which a gateway without a payload log never needs."""
    if name in ("LogConfig", "PayloadLog"):
        from gateway.payload_log import writer

        return getattr(writer, name)
    if name == "ParquetSink":
        from gateway.payload_log import sink

        return sink.ParquetSink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_payload_log(settings: GatewaySettings, features: FeatureClient) -> PayloadLog | None:
    """The configured payload log (its writer thread started), or None when it is off."""
    if not settings.payload_log.url:
        return None
    from gateway.payload_log.sink import ParquetSink
    from gateway.payload_log.writer import LogConfig, PayloadLog

    salt = None
    if settings.payload_log.hash_keys and settings.payload_log.salt:  # settings refuse one without
        salt = settings.payload_log.salt.get_secret_value().encode()
    config = LogConfig(
        sample=settings.payload_log.sample,
        queue_rows=settings.payload_log.queue_rows,
        flush_rows=settings.payload_log.flush_rows,
        flush_s=settings.payload_log.flush_s,
        close_s=settings.payload_log.close_s,
        salt=salt,
        explanations=settings.payload_log.explanations,
    )
    return PayloadLog(config, ParquetSink(settings.payload_log.url), features.feature_views)
