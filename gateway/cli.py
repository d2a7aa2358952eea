"""The ``gateway`` command: ``gateway serve``, ``skew-check``, ``drift``, ``shadow`` and ``quality``."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.abc
import json
import logging
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="gateway",
    help="Online features + one Triton call, over HTTP and gRPC.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # Click's plain help: option names are never cut at 80 columns
)
console = Console(stderr=True, highlight=False)

from gateway.drift.cli import drift_app  # noqa: E402  (the sub-apps register on the app above)
from gateway.payload_log.cli import report  # noqa: E402
from gateway.shadow.cli import shadow  # noqa: E402

drift_app.command("report")(report)
app.add_typer(drift_app, name="drift")
from gateway.quality.cli import quality_app  # noqa: E402

app.add_typer(quality_app, name="quality")
from gateway.fallback.cli import fallback_app  # noqa: E402

app.add_typer(fallback_app, name="fallback")
app.command("shadow")(shadow)

ModelOpt = Annotated[list[str] | None, typer.Option("--model", help="Model(s) served; /readyz checks them")]


def _settings(**overrides: Any) -> Any:
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from gateway.refusal import refuse
    from gateway.settings import GatewaySettings

    try:
        settings = GatewaySettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f"setting {'.'.join(map(str, first['loc']))}: " if first["loc"] else ""
        console.print(f"[bold red]error:[/] {where}{first['msg']}")
        sys.exit(2)
    except SettingsError as exc:  # a GATEWAY_* value that must be JSON (a map) and is not
        field = str(exc).split('"')[1] if str(exc).count('"') >= 2 else "?"
        hint = 'a JSON object, e.g. GATEWAY_SHADOW=\'{"fraud-detector": {"share": 0.5}}\' (docs/gateway.md)'
        raise refuse(f"setting {field}: GATEWAY_{field.upper()} is not valid JSON", hint, 2) from None
    if not (settings.feature_repo / "feature_store.yaml").is_file():
        raise refuse(
            f"{settings.feature_repo} is not a Feast feature repository (it has no feature_store.yaml)",
            "pass --feature-repo DIR (the folder `feast apply` ran in), or set GATEWAY_FEATURE_REPO",
            2,
        )
    return settings


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port [8080]")] = None,
    grpc_port: Annotated[int | None, typer.Option(help="gRPC port, 0 for none [50051]")] = None,
    triton_url: Annotated[
        str | None, typer.Option(help="Triton: http://host:8000 or grpc://host:8001 [http://127.0.0.1:8000]")
    ] = None,
    feature_repo: Annotated[Path | None, typer.Option(help="Feast repository [feature_repo]")] = None,
    online_store: Annotated[str | None, typer.Option(help="sqlite or redis [sqlite]")] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis for the redis profile, host:port")] = None,
    model: ModelOpt = None,
    workers: Annotated[
        int | None, typer.Option(help="Gateway processes sharing the ports (SO_REUSEPORT) [1]")
    ] = None,
) -> None:
    """Run the gateway (HTTP and gRPC) until interrupted."""
    settings = _settings(
        models=tuple(model) if model else None,
        host=host,
        port=port,
        grpc_port=grpc_port,
        triton_url=triton_url,
        feature_repo=feature_repo,
        online_store=online_store,
        redis_url=redis_url,
        workers=workers,
    )
    _refuse_http_port_for_grpc(settings.triton_url)
    _refuse_busy_ports(settings)
    if settings.workers > 1:
        if not settings.port:
            console.print("[bold red]error:[/] --workers above 1 needs a fixed --port (not 0)")
            sys.exit(2)
        sys.exit(_supervise(settings))
    _worker(settings, reuse_port=False)


def _refuse_busy_ports(settings: Any) -> None:
    """Bind each port once, alone (no SO_REUSEPORT), before serving: a port another process
    holds is refused here. Without it, HTTP failed with uvicorn's bare errno line, and gRPC,
    which binds with SO_REUSEPORT, joined another gateway's port and split its traffic
    silently. (Only this gateway's own ``--workers`` share their ports.)"""
    import socket

    from gateway.refusal import refuse

    for flag, port in (("--port", settings.port), ("--grpc-port", settings.grpc_port)):
        if not port:
            continue
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no holder
            try:
                probe.bind((settings.host, port))
            except OSError as exc:
                raise refuse(
                    f"{settings.host}:{port} ({flag}) is in use: {exc.strerror or exc}",
                    f"pass another {flag}, or stop what listens there (ss -ltnp 'sport = :{port}')",
                    2,
                ) from None


def _refuse_http_port_for_grpc(url: str) -> None:
    """A gRPC Triton URL (``grpc://`` or no scheme) whose port answers HTTP/1 is Triton's HTTP
    port: every request would then be a 503. Refuse it at start with the URL that works. A port
    that does not answer (Triton not up yet) is no refusal: the gateway waits for it (/readyz)."""
    import socket

    from gateway.refusal import refuse

    scheme, sep, address = url.partition("://")
    if sep and scheme != "grpc":
        return
    host, _, port = (address if sep else url).rstrip("/").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5) as conn:
            conn.settimeout(0.5)
            conn.sendall(
                f"GET /v2/health/live HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            answer = conn.recv(16)
    except OSError:
        return
    if answer.startswith(b"HTTP/1."):
        raise refuse(
            f"--triton-url {url} is gRPC (no scheme means gRPC), but {host}:{port} answers HTTP: "
            "it is Triton's HTTP port",
            f"use --triton-url http://{host}:{port} (or Triton's gRPC port, grpc://{host}:8001)",
            2,
        )


def _worker(settings: Any, reuse_port: bool) -> None:
    """One gateway process: logging, then the servers until interrupted."""
    _without_torch()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if not reuse_port:
        _run(settings, _serve(settings, settings.models))
        return
    # a worker stopped by Ctrl-C with its process group: uvicorn has shut down already
    with contextlib.suppress(KeyboardInterrupt):
        _run(settings, _serve(settings, settings.models, reuse_port))


def _without_torch() -> None:
    """Keep Feast from importing PyTorch into the server: ``feast.torch_wrapper`` imports it, when
    installed, on ``import feast``, for an offline-store helper the gateway never calls. In the
    project's venv (torch is there for model export) that was ~190 MiB of the gateway's ~510 MiB
    resident (issue 16); the gateway image has no torch. A finder first on ``sys.meta_path``
    makes the import fail as if torch were not installed, which Feast catches and remembers as
    "torch not available" (a ``None`` in ``sys.modules`` would not do: scipy looks torch up there)."""
    if "torch" not in sys.modules:
        sys.meta_path.insert(0, _NoTorch())


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"the gateway server does not load {name}", name=name)
        return None


def _run(settings: Any, main: Any) -> None:
    """``main`` on uvloop (GATEWAY_EVENT_LOOP, default) or asyncio's own loop. uvloop's C loop
    took the gateway from 0.34x to 0.48x of direct Triton's rate over gRPC at 16 clients and
    0.41x to 0.51x over HTTP (make bench's setup, alternated side by side): the grpc aio server
    and client run their completions as loop callbacks, several per call."""
    if settings.event_loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)
    else:
        asyncio.run(main)


def _supervise(settings: Any) -> int:
    """``settings.workers`` gateway processes on the same HTTP and gRPC ports: each binds with
    SO_REUSEPORT, and the kernel spreads new connections across them. One Python process is one
    GIL (the gateway's ceiling, ``make bench``); on a node with cores to spare, more processes
    serve more. Each keeps its own batches, metrics and drift counts (docs/gateway-limits.md).

    The supervisor only waits: when one worker exits, the others are stopped and its exit code
    is this command's, so the orchestrator restarts the whole gateway rather than run it short."""
    import multiprocessing
    import signal
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")  # fresh interpreters: no state of this one shared
    procs = [
        context.Process(target=_worker, args=(settings, True), name=f"gateway-worker-{i}")
        for i in range(settings.workers)
    ]
    for proc in procs:
        proc.start()

    def stop(*_: Any) -> None:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: uvicorn's graceful shutdown

    signal.signal(signal.SIGTERM, stop)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reached the whole group: workers stop too
        wait([p.sentinel for p in procs])
    stop()
    for proc in procs:
        proc.join(15)
        if proc.is_alive():
            proc.kill()
            proc.join()
    failed = [p.exitcode for p in procs if p.exitcode not in (0, None, -signal.SIGTERM, -signal.SIGINT)]
    return failed[0] if failed else 0


def _listening_socket(host: str, port: int) -> Any:
    """A TCP socket bound with SO_REUSEPORT, so every worker's HTTP server binds the one port."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said, not left 0: asyncio sets TCP_NODELAY only on sockets whose proto is TCP,
    # and without it a response's head and body wait on Nagle + the client's delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


async def _serve(settings: Any, models: tuple[str, ...], reuse_port: bool = False) -> None:
    """One gateway process's servers until SIGINT/SIGTERM (gateway/lifecycle.py: the service is
    opened, both servers started, and on shutdown both drained before the service closes)."""
    from gateway.lifecycle import Gateway, serve

    def banner(gateway: Gateway) -> None:
        console.print(
            f"gateway: HTTP http://{settings.host}:{settings.port}  gRPC {settings.host}:{settings.grpc_port}"
            f"  Triton {settings.triton_url}  online store {settings.online_store}"
            f"  auth {'on' if gateway.service.auth.enabled else 'off'}"
            + (f"  workers {settings.workers} (this one pid {os.getpid()})" if reuse_port else "")
        )

    sockets = [_listening_socket(settings.host, settings.port)] if reuse_port else None
    await serve(settings, models, reuse_port=reuse_port, sockets=sockets, banner=banner)


@app.command("skew-check")
def skew_check_cmd(
    model: Annotated[str, typer.Option(help="Model whose input to check")] = "fraud-detector",
    sample: Annotated[int, typer.Option(help="Entity rows to sample from the source", min=1)] = 50,
    triton_url: Annotated[
        str | None, typer.Option(help="Triton: http://host:8000 or grpc://host:8001")
    ] = None,
    feature_repo: Annotated[Path | None, typer.Option(help="Feast repository")] = None,
    online_store: Annotated[str | None, typer.Option(help="sqlite or redis")] = None,
    payload_log: Annotated[
        str | None,
        typer.Option(
            help="Check the rows the gateway served: its payload log (folder or URL), recomputed "
            "offline at their logged times"
        ),
    ] = None,
    since: Annotated[str, typer.Option(help="With --payload-log: rows logged since (1h, 7d, ISO)")] = "24h",
    entities: Annotated[
        Path | None,
        typer.Option(
            help="Check these entity rows: a Parquet/CSV file with the model's entity keys "
            "(and event_timestamp, default now)"
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Compare the model input the gateway builds (or built) with the training path's, for
    entity rows from the payload log, a file, or (neither) the feature repo's transactions."""
    import datetime as dt

    from gateway.payload_log.cli import parse_since
    from gateway.refusal import refuse
    from gateway.skew import SkewInputError, read_entity_file

    hint = "pass --payload-log DIR|URL or --entities FILE.parquet|FILE.csv with the model's entity keys"
    if payload_log and entities:
        raise refuse("--payload-log and --entities are two sources: pass one", hint, 2)
    window: tuple[dt.datetime, dt.datetime] | None = None
    if payload_log:
        now = dt.datetime.now(dt.UTC)
        try:
            window = (parse_since(since, now), now + dt.timedelta(seconds=1))
        except ValueError as exc:
            raise refuse(str(exc), "write --since as 30m, 1h, 7d or an ISO time", 2) from None
    frame = None
    if entities is not None:
        try:
            frame = read_entity_file(entities)
        except SkewInputError as exc:
            raise refuse(str(exc), hint, 2) from None
    settings = _settings(triton_url=triton_url, feature_repo=feature_repo, online_store=online_store)
    _check_triton(settings.triton_url)
    source = _SkewSource(frame, str(entities) if entities else "", payload_log, window)
    try:
        report = asyncio.run(_skew(settings, model, sample, seed, source))
    except SkewInputError as exc:
        raise refuse(str(exc), hint, 2) from None
    if json_output:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        table = Table(title=f"skew check: {model} ({report.feature_service}), {report.entities} entities")
        for col in ("entity", "at", "column", "online", "training"):
            table.add_column(col)
        for m in report.mismatches[:20]:
            row = (json.dumps(m["entity"]), m["at"], m["column"], repr(m["online"]), repr(m["training"]))
            table.add_row(*row)
        if report.mismatches:
            console.print(table)
        verdict = "[green]PASS[/]" if report.passed else f"[red]FAIL[/] ({len(report.mismatches)} mismatches)"
        console.print(
            f"skew check {verdict}: {report.entities} entity rows x {len(report.columns)} columns "
            f"({', '.join(report.columns)})"
        )
    sys.exit(0 if report.passed else 1)


def _check_triton(url: str) -> None:
    """Refuse an unreachable Triton in a second, before the slow opening (Feast, the registry)."""
    import socket
    import urllib.parse

    from gateway.refusal import refuse

    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or (8001 if parsed.scheme.startswith("grpc") else 8000)
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        raise refuse(
            f"Triton is unreachable at {url} ({exc.strerror or exc})",
            "start Triton (`builder serve --repo model_repo`), or pass --triton-url of a running one",
            1,
        ) from None


@dataclass(frozen=True)
class _SkewSource:
    """Where skew-check's entity rows come from: a file's rows, the payload log, or neither."""

    frame: Any  # pandas.DataFrame of --entities, or None
    path: str
    payload_log: str | None
    window: Any  # (since, until) for the payload log


async def _skew(settings: Any, model: str, sample: int, seed: int, source: _SkewSource | None = None) -> Any:
    import pandas as pd

    from feast_access.training import load_transactions
    from gateway.service import Service
    from gateway.skew import SkewInputError, skew_check_frame, skew_check_logged

    source = source or _SkewSource(None, "", None, None)
    service = await Service.open(settings, (model,))
    try:
        if source.frame is not None:
            frame = source.frame
            frame = frame.sample(min(sample, len(frame)), random_state=seed) if len(frame) > sample else frame
            return await skew_check_frame(service, model, frame.reset_index(drop=True), source.path)
        if source.payload_log:
            from gateway.payload_log.report import ReportError, read_window

            try:
                logged = read_window(source.payload_log, model, *source.window)
            except ReportError as exc:
                raise SkewInputError(str(exc)) from None
            except OSError as exc:
                raise SkewInputError(f"cannot read the payload log at {source.payload_log}: {exc}") from None
            if logged.empty:
                raise SkewInputError(
                    f"no rows of {model!r} in the payload log at {source.payload_log} since "
                    f"{source.window[0]:%Y-%m-%d %H:%M:%S} UTC (--since)"
                )
            logged = logged.sample(min(sample, len(logged)), random_state=seed).reset_index(drop=True)
            return await skew_check_logged(service, model, logged, f"the payload log at {source.payload_log}")
        # Neither: the feature repo's labeled transactions (the demo's), keyed as the model is.
        spec = await service.predictor.spec(model)
        try:
            tx = load_transactions(service.predictor.features.store)
        except OSError:
            raise SkewInputError(
                f"no --payload-log or --entities, and the feature repo has no transactions to sample "
                f"(model {model!r} is keyed by {', '.join(spec.entity_key_names)})"
            ) from None
        keys = list(spec.entity_key_names)
        missing = [k for k in keys if k not in tx.columns]
        if missing:
            raise SkewInputError(f"the feature repo's transactions have no column {', '.join(missing)}")
        pairs = sorted(set(tx[keys].itertuples(index=False, name=None)))
        rows = [
            dict(zip(keys, p, strict=True))
            for p in random.Random(seed).sample(pairs, min(sample, len(pairs)))
        ]
        frame = pd.DataFrame(rows, columns=keys)
        return await skew_check_frame(service, model, frame, "the feature repo's transactions")
    finally:
        await service.close()


def main() -> None:
    from gateway.errors import GatewayError
    from gateway.refusal import report_error, run_app

    try:
        code = run_app(app, "gateway")
    except GatewayError as exc:
        report_error(exc.message, "see `gateway --help`; the error names what failed")
        code = 1
    sys.exit(code)
