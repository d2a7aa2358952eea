"""The ``gateway`` command: ``gateway serve``, ``gateway skew-check`` and ``gateway drift``."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
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
)
console = Console(stderr=True, highlight=False)

from gateway.drift.cli import drift_app  # noqa: E402  (the sub-apps register on the app above)
from gateway.payload_log.cli import report  # noqa: E402

drift_app.command("report")(report)
app.add_typer(drift_app, name="drift")

ModelOpt = Annotated[list[str] | None, typer.Option("--model", help="Model(s) served; /readyz checks them")]


def _settings(**overrides: Any) -> Any:
    from pydantic import ValidationError

    from gateway.settings import GatewaySettings

    try:
        return GatewaySettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f"setting {'.'.join(map(str, first['loc']))}: " if first["loc"] else ""
        console.print(f"[bold red]error:[/] {where}{first['msg']}")
        sys.exit(2)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port [8080]")] = None,
    grpc_port: Annotated[int | None, typer.Option(help="gRPC port, 0 for none [50051]")] = None,
    triton_url: Annotated[str | None, typer.Option(help="Triton gRPC host:port [127.0.0.1:8001]")] = None,
    feature_repo: Annotated[Path | None, typer.Option(help="Feast repository [feature_repo]")] = None,
    online_store: Annotated[str | None, typer.Option(help="sqlite or redis [sqlite]")] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis for the redis profile, host:port")] = None,
    model: ModelOpt = None,
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
    )
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    asyncio.run(_serve(settings, settings.models))


async def _serve(settings: Any, models: tuple[str, ...]) -> None:
    import uvicorn

    from gateway.grpc_app import create_server
    from gateway.http_app import IdleTimeoutProtocol, create_app
    from gateway.service import Service

    service = await Service.open(settings, models)
    config = uvicorn.Config(
        create_app(service),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=IdleTimeoutProtocol,  # also closes connections that never send a request
        timeout_keep_alive=settings.idle_timeout_s,  # uvicorn says int; its timer takes a float
    )
    http = uvicorn.Server(config)
    grpc_server = None
    if settings.grpc_port:
        grpc_server = create_server(service, f"{settings.host}:{settings.grpc_port}")
        await grpc_server.start()
    console.print(
        f"gateway: HTTP http://{settings.host}:{settings.port}  gRPC {settings.host}:{settings.grpc_port}"
        f"  Triton {settings.triton_url}  online store {settings.online_store}"
        f"  auth {'on' if service.auth.enabled else 'off'}"
    )
    try:
        await http.serve()
    finally:
        if grpc_server is not None:
            await grpc_server.stop(grace=2)


@app.command("skew-check")
def skew_check_cmd(
    model: Annotated[str, typer.Option(help="Model whose input to check")] = "fraud-detector",
    sample: Annotated[int, typer.Option(help="Entities to sample from the transactions")] = 50,
    triton_url: Annotated[str | None, typer.Option(help="Triton gRPC host:port")] = None,
    feature_repo: Annotated[Path | None, typer.Option(help="Feast repository")] = None,
    online_store: Annotated[str | None, typer.Option(help="sqlite or redis")] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Compare the input the gateway builds online with the training path's, for sampled entities."""
    settings = _settings(triton_url=triton_url, feature_repo=feature_repo, online_store=online_store)
    report = asyncio.run(_skew(settings, model, sample, seed))
    if json_output:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        table = Table(title=f"skew check: {model} ({report.feature_service}), {report.entities} entities")
        for col in ("entity", "column", "online", "training"):
            table.add_column(col)
        for m in report.mismatches[:20]:
            table.add_row(json.dumps(m["entity"]), m["column"], repr(m["online"]), repr(m["training"]))
        if report.mismatches:
            console.print(table)
        verdict = "[green]PASS[/]" if report.passed else f"[red]FAIL[/] ({len(report.mismatches)} mismatches)"
        console.print(
            f"skew check {verdict}: {report.entities} entities x {len(report.columns)} columns "
            f"({', '.join(report.columns)})"
        )
    sys.exit(0 if report.passed else 1)


async def _skew(settings: Any, model: str, sample: int, seed: int) -> Any:
    from feature_repo.store import load_transactions
    from gateway.service import Service
    from gateway.skew import skew_check

    service = await Service.open(settings, (model,))
    try:
        tx = load_transactions(service.predictor.features.store)
        pairs = sorted(set(zip(tx.user_id.astype(int), tx.merchant_id.astype(int), strict=True)))
        rows = [
            {"user_id": u, "merchant_id": m}
            for u, m in random.Random(seed).sample(pairs, min(sample, len(pairs)))
        ]
        return await skew_check(service, model, rows)
    finally:
        await service.close()


def main() -> None:
    from gateway.errors import GatewayError

    try:
        app()
    except GatewayError as exc:
        console.print(f"[bold red]error:[/] {exc.message}")
        sys.exit(1)
