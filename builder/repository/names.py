"""Names that become directories in a Triton model repository.

A model name is a path component on disk and a URL segment in Triton's HTTP API
(``/v2/models/NAME``), so it must be safe for both: no separators, no ``..``, no leading dot
(hidden, and Triton would skip or trip on it), and only characters Triton and URLs carry as-is.
"""

from __future__ import annotations

import re

from builder.errors import UsageError

_LEGAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def validate_model_name(name: str, *, what: str = "model name") -> str:
    """Return ``name`` if it can be a Triton model directory, else raise UsageError."""
    if "/" in name or "\\" in name or name in {".", ".."} or ".." in name:
        raise UsageError(
            f"{what} {name!r} would escape the model repository (path separators or '..')",
            hint="use letters, digits, '_', '-' and '.' only, e.g. --name fraud-detector",
        )
    if not _LEGAL.match(name):
        raise UsageError(
            f"{what} {name!r} is not a legal Triton model name",
            hint="start with a letter or digit; then letters, digits, '_', '-', '.'; at most 128",
        )
    return name
