"""What every builder command shares: JSON output and the error contract."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from builder.errors import BuilderError

console = Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_warnings(warnings: list[str]) -> None:
    """One ``warning:`` line each, on stderr: something the user should know, not a failure."""
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}", soft_wrap=True)


def run_json_aware(json_output: bool, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; with --json a BuilderError is printed as a JSON object on stdout too."""
    try:
        return fn()
    except BuilderError as exc:
        if json_output:
            emit_json(
                {
                    "ok": False,
                    "error": exc.message,
                    "hint": exc.hint,
                    "kind": type(exc).__name__,
                    "problems": getattr(exc, "problems", None),
                }
            )
        raise
