"""``mlflow deployments run-local -t triton-stack``: export into a model repository (a temp
folder, removed on exit, or ``-C repo=DIR``, kept) and serve it with the embedded Triton in the
foreground (explicit model control, the model loaded), as ``builder serve`` does, until Ctrl-C.
Ports: ``-C http_port=8000`` (and ``grpc_port``, ``metrics_port``; defaults 8000, 8001, 8002).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from builder.errors import BuilderError, RuntimeSetupError
from builder.export.run import export_model
from builder.mlflow_deploy.errors import to_mlflow
from builder.mlflow_deploy.target import check_flavor, check_keys, export_request, number
from builder.repository.names import validate_model_name
from builder.runtime.foreground import raise_interrupt, wait_for_stop
from builder.runtime.server import ServerOptions, TritonServer

PORT_KEYS = ("http_port", "grpc_port", "metrics_port")
_PORTS = {"http_port": 8000, "grpc_port": 8001, "metrics_port": 8002}


def run_local(
    name: str, model_uri: str, flavor: str | None = None, config: Mapping[str, Any] | None = None
) -> None:
    """Export ``model_uri`` as ``name`` and serve it on local ports until interrupted.

    MLflow 3 calls ``plugin.run_local(name, model_uri, flavor, config)`` (no target: run-local
    needs none), whatever its base module's docstring says."""
    config = dict(config or {})
    try:
        serve_locally(name, model_uri, flavor, config, print)
    except BuilderError as exc:
        raise to_mlflow(exc) from None


def serve_locally(
    name: str,
    model_uri: str,
    flavor: str | None,
    config: dict[str, Any],
    say: Callable[[str], Any],
) -> None:
    check_flavor(flavor)
    name = validate_model_name(name, what="deployment name")
    ports = {k: int(number(config, k, _PORTS[k])) for k in PORT_KEYS}
    given_repo = config.pop("repo", None)
    for key in (*PORT_KEYS, "triton_url"):
        config.pop(key, None)
    check_keys(config, ())  # only export options remain (checked by export_request)
    repo = Path(str(given_repo)).absolute() if given_repo else Path(tempfile.mkdtemp(prefix="triton-stack-"))
    # SIGTERM takes Ctrl-C's path from here on: a stop while exporting or starting (or right
    # after "serving" is printed) still stops Triton and removes the temporary repository.
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    server: TritonServer | None = None
    try:
        result = export_model(export_request(model_uri, name, repo, config), progress=say)
        models = [w.name for w in result.written]
        server = TritonServer(repo, ServerOptions.explicit(models, address="127.0.0.1", **ports))
        server.start()
        say(f"serving {', '.join(models)} (version {result.version}) from {repo} at http://{server.http_url}")
        code = wait_for_stop(server)
        if code is not None:
            raise RuntimeSetupError(
                f"tritonserver exited unexpectedly (exit code {code})", hint=f"read {server.log_path}"
            )
        print("stopping", file=sys.stderr)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop()
        signal.signal(signal.SIGTERM, previous)
        if not given_repo:
            shutil.rmtree(repo, ignore_errors=True)
