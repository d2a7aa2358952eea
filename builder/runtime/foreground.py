"""Serving in the foreground until Ctrl-C or SIGTERM (``builder serve``, MLflow's ``run-local``).

Why a flag and not ``KeyboardInterrupt``: an exception raised by a signal handler lands at any
bytecode, and one that lands inside ``subprocess.Popen.wait``/``poll`` between taking and
releasing the Popen's ``_waitpid_lock`` leaves that lock held for good. ``TritonServer.stop()``
then waits on it forever (CI saw it: "stopping ..." printed, then a hang). So, once the server
is up, SIGINT and SIGTERM only set an event that the wait loop reads between waits.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Protocol

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_TICK_S = 0.5  # how soon a stop signal is noticed, and how often ``tick`` runs


class Waitable(Protocol):
    def wait(self, timeout: float | None = None) -> int | None: ...


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM takes Ctrl-C's path while a server starts, so a stop during a long start is clean."""
    raise KeyboardInterrupt


@contextmanager
def stop_requested() -> Iterator[threading.Event]:
    """An event that SIGINT or SIGTERM sets (instead of raising), the previous handlers restored."""
    event = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        event.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in _STOP_SIGNALS}
    try:
        yield event
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def wait_for_stop(server: Waitable, tick: Callable[[], None] = lambda: None) -> int | None:
    """Block until SIGINT or SIGTERM (None) or until the server exits on its own (its exit code).

    ``tick`` runs every half second (``builder serve --show-log`` copies the log there)."""
    with stop_requested() as stop:
        while not stop.is_set():
            code = server.wait(timeout=_TICK_S)
            tick()
            if code is not None:
                return code
    return None
