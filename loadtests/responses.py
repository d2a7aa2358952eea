"""What counts as a correct answer: a 200 is not enough for a release gate.

Each function returns None for a good answer, or a one-line reason the Locust user records as a
failure (so a server answering 200 with an empty body still fails the error-rate SLA).
"""

from __future__ import annotations

import json
from typing import Any


def _json(text: str | bytes | None) -> Any:
    try:
        return json.loads(text or b"")
    except (TypeError, ValueError):
        return None


def _http_problem(status: int, text: str | bytes | None) -> str | None:
    if status == 200:
        return None
    snippet = (text.decode(errors="replace") if isinstance(text, bytes) else text or "").strip()
    return f"HTTP {status}" + (f": {snippet[:200]}" if snippet else "") if status else "no response"


def gateway_problem(status: int, text: str | bytes | None, rows: int) -> str | None:
    """The gateway contract: 200 ``{"model", "version", "predictions": [{"score", "label"}, ...]}``."""
    if problem := _http_problem(status, text):
        return problem
    body = _json(text)
    if not isinstance(body, dict):
        return "answer is not a JSON object"
    predictions = body.get("predictions")
    if not isinstance(predictions, list) or len(predictions) != rows:
        got = len(predictions) if isinstance(predictions, list) else "no"
        return f"expected {rows} prediction(s), got {got}"
    first = predictions[0]
    if not isinstance(first, dict) or "score" not in first:
        return "prediction without a score"
    return None


def v2_problem(status: int, text: str | bytes | None, rows: int) -> str | None:
    """KServe v2: 200 ``{"outputs": [{"name", "shape": [rows, ...], ...}]}``."""
    if problem := _http_problem(status, text):
        return problem
    body = _json(text)
    outputs = body.get("outputs") if isinstance(body, dict) else None
    if not isinstance(outputs, list) or not outputs:
        return "answer has no outputs"
    return _rows_problem(
        [(o.get("name", "?"), o.get("shape") or []) for o in outputs if isinstance(o, dict)], rows
    )


def grpc_problem(outputs: list[tuple[str, list[int]]], rows: int) -> str | None:
    """A ModelInfer answer, as ``[(output name, shape), ...]``."""
    if not outputs:
        return "answer has no outputs"
    return _rows_problem(outputs, rows)


def _rows_problem(outputs: list[tuple[str, list[int]]], rows: int) -> str | None:
    for name, shape in outputs:
        if not shape or int(shape[0]) != rows:
            return f"output {name!r} has shape {list(shape)}, expected {rows} row(s)"
    return None
