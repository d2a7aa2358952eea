"""``builder serve`` and ``builder runtime install|info``: the embedded Triton runtime's CLI.

Registered on import (``builder.cli.main._register_commands``). The commands only translate
options into ``builder.runtime`` calls; every failure is a BuilderError that ``main()`` prints.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from builder.cli.main import app, runtime_app
from builder.errors import RepositoryError, RuntimeSetupError, UsageError
from builder.runtime.foreground import raise_interrupt, wait_for_stop
from builder.runtime.install import install_runtime
from builder.runtime.paths import default_runtime_dir, locate_runtime, read_stamp
from builder.runtime.server import CONTROL_MODES, ServerOptions, TritonServer

console = Console(highlight=False)

RuntimeDirOption = Annotated[
    Path | None,
    typer.Option(
        "--runtime-dir",
        help="Runtime root (default: $BUILDER_RUNTIME_DIR, else the project's installed .runtime/, "
        "else ~/.cache/triton-stack/runtime).",
        show_default=False,
    ),
]


def _models_table(models: list[dict[str, Any]]) -> Table:
    table = Table(title="models", title_justify="left")
    for column in ("model", "version", "state", "reason"):
        table.add_column(column)
    for model in models:
        state = str(model.get("state", "UNKNOWN"))
        style = "green" if state == "READY" else "red"
        table.add_row(
            str(model.get("name", "")),
            str(model.get("version", "")),
            f"[{style}]{state}[/]",
            str(model.get("reason", "")),
        )
    return table


def _serve_until_stopped(server: TritonServer, show_log: bool) -> None:
    """Block until Ctrl-C or SIGTERM; a server that dies on its own is an error."""
    offset = server.log_path.stat().st_size if show_log else 0

    def copy_log() -> None:
        nonlocal offset
        if show_log:
            offset = _copy_log(server.log_path, offset)

    code = wait_for_stop(server, copy_log)
    if code is not None:
        raise RuntimeSetupError(
            f"tritonserver exited unexpectedly (exit code {code})\n{server.log_tail()}",
            hint="read the log lines above",
        )


def _copy_log(path: Path, offset: int) -> int:
    with open(path, "rb") as handle:
        handle.seek(offset)
        chunk = handle.read()
    sys.stderr.write(chunk.decode("utf-8", errors="replace"))
    sys.stderr.flush()
    return offset + len(chunk)


@app.command("serve")
def serve(
    repo: Annotated[Path, typer.Option("--repo", help="Model repository to serve.")],
    http_port: Annotated[int, typer.Option(help="HTTP/REST port.")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port.")] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics port.")] = 8002,
    address: Annotated[str, typer.Option(help="Address all endpoints bind to.")] = "0.0.0.0",
    model_control_mode: Annotated[
        str, typer.Option(help="none | poll | explicit (Triton's --model-control-mode).")
    ] = "none",
    load_model: Annotated[
        list[str] | None,
        typer.Option(
            "--load-model",
            help="Model to load at start (explicit mode; repeatable; '*' loads all, as Triton's).",
        ),
    ] = None,
    runtime_dir: RuntimeDirOption = None,
    log_verbose: Annotated[int, typer.Option(help="Triton's --log-verbose level.")] = 0,
    log_file: Annotated[
        Path | None, typer.Option(help="Write Triton's log here (default: a temp file).")
    ] = None,
    show_log: Annotated[bool, typer.Option(help="Copy Triton's log to stderr.")] = False,
    start_timeout: Annotated[float, typer.Option(help="Seconds to wait for ready.")] = 120,
) -> None:
    """Serve a model repository with the embedded Triton server, in the foreground."""
    if not repo.is_dir():
        raise RepositoryError(
            f"model repository {repo} does not exist",
            hint="pass --repo pointing at a directory of models (see `builder export`)",
        )
    if model_control_mode not in CONTROL_MODES:  # before the runtime is looked for
        raise UsageError(
            f"unknown model control mode '{model_control_mode}'",
            hint="use one of: " + ", ".join(CONTROL_MODES),
        )
    # '*' is Triton's own "load every model" (tritonserver --load-model=*), passed through as is
    missing = [m for m in load_model or () if m != "*" and not (repo / m).is_dir()]
    if missing:
        present = sorted(p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith("."))
        raise RepositoryError(
            f"--load-model {', '.join(missing)}: no such model in {repo}",
            hint="load one of: " + (", ".join(present) or "(the repository has no models)"),
        )
    options = ServerOptions(
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        model_control_mode=model_control_mode,
        load_models=load_model or (),
        log_verbose=log_verbose,
        address=address,
    )
    server = TritonServer(repo, options, runtime=locate_runtime(runtime_dir), log_path=log_file)
    console.print(f"starting Triton on {repo} (mode {model_control_mode}) ...")
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        server.start(timeout=start_timeout)
        console.print(f"[bold green]ready[/]  HTTP  {server.http_url}")
        console.print(f"       gRPC  {server.grpc_url}")
        console.print(f"       metrics  {server.metrics_url}")
        console.print(f"       log  {server.log_path}")
        console.print(_models_table(server.models()))
        console.print("[dim]Ctrl-C to stop[/]")
        _serve_until_stopped(server, show_log)
        console.print("stopping ...")
    except KeyboardInterrupt:  # during the start
        console.print("stopping ...")
    except RuntimeSetupError as exc:  # Triton failed: its log stays, named in the hint
        exc.hint = f"{exc.hint}; the full log is {server.log_path}" if exc.hint else f"see {server.log_path}"
        raise
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    if log_file is None:
        server.discard_log()  # a clean exit leaves no temp file behind
    console.print("stopped")


@runtime_app.command("install")
def runtime_install(runtime_dir: RuntimeDirOption = None) -> None:
    """Install the embedded Triton runtime (server, backends, model env); idempotent."""
    install_runtime(runtime_dir or default_runtime_dir(), log=console.print)


@runtime_app.command("info")
def runtime_info(
    runtime_dir: RuntimeDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show where the runtime is and what it was installed from."""
    paths = locate_runtime(runtime_dir)
    stamp = read_stamp(paths.root) or {}
    facts: dict[str, Any] = {
        "root": str(paths.root),
        "tritonserver": str(paths.tritonserver),
        "backends_dir": str(paths.backends_dir),
        "libs_dir": str(paths.libs_dir),
        "model_env": str(paths.model_env),
        "model_env_python": str(paths.model_env_python),
        "python_libdir": str(paths.python_libdir),
        "versions": {
            "tritonserver": stamp.get("tritonserver"),
            "wheel": stamp.get("pytriton"),
            "python": stamp.get("python"),
            "model_env": stamp.get("model_env", []),
        },
        "installed_at": stamp.get("installed_at"),
    }
    if as_json:
        typer.echo(json.dumps(facts, indent=2))
        return
    table = Table(show_header=False, box=None)
    for key, value in facts.items():
        if key != "versions":
            table.add_row(key, str(value))
    versions = facts["versions"]
    table.add_row("tritonserver version", f"{versions['tritonserver']} ({versions['wheel']})")
    table.add_row("python", str(versions["python"]))
    table.add_row("model env", ", ".join(versions["model_env"]))
    console.print(table)
