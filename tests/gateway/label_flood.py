"""A label sender run in processes of its own (tests/gateway/test_evidence_replicas.py's flood):
a module with nothing heavy to import, so spawned senders start at once."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import requests


def flood_labels(job: tuple[str, str, list[dict[str, Any]], int, float, float]) -> list[int]:
    """Batches of 100 labels to ``url``'s ``model`` as fast as the gateway answers, from the
    wall-clock time ``start`` to ``end``; the statuses got (-1: a 503 without Retry-After)."""
    url, model, labels, seed, start, end = job
    rng = np.random.default_rng(seed)
    statuses = []
    time.sleep(max(0.0, start - time.time()))
    with requests.Session() as session:
        while time.time() < end:
            picked = [labels[i] for i in rng.integers(0, len(labels), 100)]
            response = session.post(f"{url}/v1/models/{model}/feedback", json={"labels": picked}, timeout=30)
            told = response.status_code != 503 or bool(response.headers.get("Retry-After"))
            statuses.append(response.status_code if told else -1)
    return statuses
