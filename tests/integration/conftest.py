"""Fixtures for tests that run the real Triton server.

``triton_runtime`` installs the embedded runtime once per session (a no-op when it is already
installed) into ``$BUILDER_RUNTIME_DIR`` or the default cache dir. ``start_triton`` starts
servers on free ports with their log under the test's tmp dir, and stops every one it
started when the test ends, pass or fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.runtime.install import install_runtime
from builder.runtime.paths import RuntimePaths, default_runtime_dir
from builder.runtime.server import TritonServer


@pytest.fixture(scope="session")
def triton_runtime() -> RuntimePaths:
    """The embedded Triton runtime, installed once for the whole test session."""
    return install_runtime(default_runtime_dir(), log=print)


StartTriton = Callable[..., TritonServer]


@pytest.fixture
def start_triton(triton_runtime: RuntimePaths, tmp_path: Path) -> Iterator[StartTriton]:
    """``start_triton(repo, **TritonServer_kwargs)`` -> a started server, stopped at teardown.

    Ports default to free ones; the log goes to ``tmp_path/tritonserver-N.log``.
    """
    servers: list[TritonServer] = []

    def start(repo: Path, *, timeout: float = 120, **kwargs: Any) -> TritonServer:
        kwargs.setdefault("log_path", tmp_path / f"tritonserver-{len(servers)}.log")
        server = TritonServer(repo, runtime=triton_runtime, **kwargs)
        servers.append(server)
        return server.start(timeout=timeout)

    yield start
    for server in servers:
        server.stop()
