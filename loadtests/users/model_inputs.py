"""Where the Triton users get their input tensors: the local repository, else the server."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable
from typing import Any

from locust.exception import StopUser

from loadtests.payloads import ModelInputs
from loadtests.settings import LoadOptions

logger = logging.getLogger(__name__)


def model_inputs(
    options: LoadOptions, seed: str, fetch_metadata: Callable[[], dict[str, Any]]
) -> ModelInputs:
    """The model's input example from ``--model-repo`` when it has the model; otherwise the
    server's v2 model metadata (``fetch_metadata``) and generated rows."""
    try:
        local = ModelInputs.from_repo(options.repo_path, options.model, options.model_version, seed=seed)
        return local if local is not None else ModelInputs.from_v2_metadata(fetch_metadata(), seed=seed)
    except Exception as exc:
        # Any failure here means this user cannot send one valid request. StopUser (not the raw
        # error) ends the user cleanly: Locust then runs on_stop, which closes its connections.
        logger.error("cannot build inputs for model %r: %s: %s", options.model, type(exc).__name__, exc)
        raise StopUser() from exc


def http_metadata(base_url: str, options: LoadOptions) -> dict[str, Any]:
    """``GET /v2/models/{model}[/versions/{v}]`` outside Locust's client, so it stays out of the stats."""
    path = f"/v2/models/{options.model}" + (
        f"/versions/{options.model_version}" if options.model_version else ""
    )
    headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
    request = urllib.request.Request(base_url.rstrip("/") + path, headers=headers)
    with urllib.request.urlopen(request, timeout=options.request_timeout) as response:
        metadata: dict[str, Any] = json.loads(response.read())
    return metadata
