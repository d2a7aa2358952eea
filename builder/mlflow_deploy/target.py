"""Where a ``triton-stack`` target points, and what a deployment's ``config`` asks.

Target URI: ``triton-stack:/path/to/model_repo?triton=http://127.0.0.1:8000`` (a relative path,
``triton-stack:model_repo``, is read from the current folder). Each part can also come from the
per-call config (``-C repo=… -C triton_url=…``, which wins) or the environment
(``TRITON_STACK_REPO``, ``TRITON_STACK_URL``, used when the URI leaves it out). The repository
must be a local folder: ``builder export`` writes through the file system, so an object-store
URI (``s3://…``) is refused; sync the folder to the bucket after the export instead. The Triton
URL defaults to ``http://127.0.0.1:8000``; that server must run in explicit model-control mode
(``builder serve --model-control-mode explicit``) so the plugin can load and unload models.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import UsageError
from builder.export.context import ExportRequest
from builder.repository.triton_config import ServingOptions, VersionPolicy

TARGET = "triton-stack"
REPO_ENV = "TRITON_STACK_REPO"
URL_ENV = "TRITON_STACK_URL"
DEFAULT_URL = "http://127.0.0.1:8000"
LOCATION_KEYS = ("repo", "triton_url")
# config key -> (what it sets, parser); every value arrives as a string from `-C key=value`
_BOOL = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
EXPORT_KEYS = (
    "ensemble",
    "ensemble_mode",
    "version_policy",
    "max_batch_size",
    "instances",
    "dynamic_batching",
    "warmup",
    "atol",
    "rtol",
    "parity_rows",
    "opset",
    "force",
)
OTHER_KEYS = ("timeout", "keep_files")
SERVED_FLAVORS = (None, "onnx")  # Triton runs the ONNX export of the model's own flavor


@dataclass(frozen=True)
class Target:
    """A model repository folder and the Triton server (HTTP) that serves it."""

    repo: Path
    triton_url: str  # host:port, as tritonclient.http wants it
    ssl: bool = False


def parse_target(target_uri: str, config: Mapping[str, Any] | None = None) -> Target:
    """The target from its URI, the call's config and the environment (in that order of
    precedence: config, URI, environment)."""
    config = config or {}
    parsed = urllib.parse.urlparse(target_uri)
    if parsed.scheme != TARGET and target_uri != TARGET:
        raise UsageError(f"target {target_uri!r} is not a {TARGET} target", hint=_URI_HINT)
    query = urllib.parse.parse_qs(parsed.query)
    unknown = sorted(set(query) - {"triton"})
    if unknown:
        raise UsageError(f"target URI parameter(s) {', '.join(unknown)} unknown", hint=_URI_HINT)
    path = parsed.path if parsed.scheme == TARGET else ""
    if parsed.netloc:  # triton-stack://host/… : a host where a folder is expected
        path = f"//{parsed.netloc}{path}"
    repo_text = str(config.get("repo") or path or os.environ.get(REPO_ENV, ""))
    url_text = str(config.get("triton_url") or (query.get("triton") or [""])[0])
    url_text = url_text or os.environ.get(URL_ENV, "") or DEFAULT_URL
    host, ssl = _server(url_text)
    return Target(repo=_local_repo(repo_text), triton_url=host, ssl=ssl)


_URI_HINT = (
    f"use {TARGET}:/path/to/model_repo?triton=http://HOST:8000, or -C repo=… -C triton_url=…, "
    f"or set {REPO_ENV} and {URL_ENV}"
)


def _local_repo(text: str) -> Path:
    if not text:
        raise UsageError("no model repository given", hint=_URI_HINT)
    scheme = urllib.parse.urlparse(text).scheme
    if "://" in text or (scheme and len(scheme) > 1):  # len 1: a Windows drive letter
        raise UsageError(
            f"model repository {text!r} is not a local folder: `builder export` writes through "
            "the file system, not to an object store",
            hint="export into a local folder (this target), then copy it to the bucket, "
            "e.g. `aws s3 sync model_repo s3://bucket/model_repo`",
        )
    return Path(text).expanduser().absolute()


def _server(text: str) -> tuple[str, bool]:
    """``host:port`` and whether it is HTTPS, from ``http(s)://host:port`` or ``host:port``."""
    parsed = urllib.parse.urlparse(text if "://" in text else f"http://{text}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/"):
        raise UsageError(
            f"Triton URL {text!r} is not http(s)://HOST:PORT",
            hint="pass Triton's HTTP endpoint, e.g. ?triton=http://127.0.0.1:8000",
        )
    port = parsed.port or (443 if parsed.scheme == "https" else 8000)
    return f"{parsed.hostname}:{port}", parsed.scheme == "https"


def check_keys(config: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse a config key this call does not read (a typo would otherwise pass silently)."""
    unknown = sorted(set(config) - set(allowed) - set(LOCATION_KEYS))
    if unknown:
        raise UsageError(
            f"unknown config key(s) {', '.join(unknown)}",
            hint="known keys: " + ", ".join((*LOCATION_KEYS, *allowed)),
        )


def flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """A boolean config value (``true``/``false``, ``1``/``0``, ``yes``/``no``)."""
    value = config.get(key, default)
    if isinstance(value, bool):
        return value
    if str(value).lower() not in _BOOL:
        raise UsageError(f"config {key}={value!r} is not true or false", hint=f"-C {key}=true")
    return _BOOL[str(value).lower()]


def number(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"config {key}={value!r} is not a number", hint=f"-C {key}={default}") from None


def export_request(model_uri: str, name: str, repo: Path, config: Mapping[str, Any]) -> ExportRequest:
    """The ``ExportRequest`` a deployment's config asks for (``builder export``'s options of
    the same names; everything else at the builder's defaults)."""
    check_keys(config, EXPORT_KEYS + OTHER_KEYS)
    defaults = ServingOptions()
    serving = ServingOptions(
        max_batch_size=int(number(config, "max_batch_size", defaults.max_batch_size)),
        dynamic_batching=flag(config, "dynamic_batching", defaults.dynamic_batching),
        instances=int(number(config, "instances", defaults.instances)),
        version_policy=VersionPolicy.parse(str(config.get("version_policy", "latest:1"))),
        warmup=flag(config, "warmup", defaults.warmup),
    )
    base = ExportRequest(model_uri=model_uri, repo=repo)
    return ExportRequest(
        model_uri=model_uri,
        repo=repo,
        name=name,
        serving=serving,
        atol=number(config, "atol", base.atol),
        rtol=number(config, "rtol", base.rtol),
        parity_rows=int(number(config, "parity_rows", base.parity_rows)),
        opset=int(number(config, "opset", base.opset)),
        ensemble=flag(config, "ensemble", False),
        ensemble_mode=str(config.get("ensemble_mode", "steps")),
        force=flag(config, "force", False),
    )


def check_flavor(flavor: str | None) -> None:
    """Refuse a flavor other than the one served (the builder picks the converter itself)."""
    if flavor not in SERVED_FLAVORS:
        raise UsageError(
            f"flavor {flavor!r}: {TARGET} serves the ONNX export of the model's own flavor",
            hint="leave out --flavor (or pass onnx); the builder picks the converter from the model",
        )
