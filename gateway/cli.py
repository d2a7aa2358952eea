"""The ``gateway`` command: ``gateway serve``, ``skew-check``, ``drift``, ``shadow`` and ``quality``."""

from __future__ import annotations

import asyncio
import json
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
    from gateway.settings import GatewaySettings, flat_name, nest

    try:
        settings = GatewaySettings(**nest({k: v for k, v in overrides.items() if v is not None}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f"setting {name}: " if (name := flat_name(first["loc"])) else ""
        console.print(f"[bold red]error:[/] {where}{first['msg']}")
        sys.exit(2)
    except SettingsError as exc:  # a GATEWAY_* value that must be JSON (a map) and is not
        field = str(exc).split('"')[1] if str(exc).count('"') >= 2 else "?"
        hint = 'a JSON object, e.g. GATEWAY_SHADOW=\'{"fraud-detector": {"share": 0.5}}\' (docs/gateway.md)'
        raise refuse(f"setting {field}: GATEWAY_{field.upper()} is not valid JSON", hint, 2) from None
    specs = settings.features.specs
    if specs is not None and not specs.is_dir():
        raise refuse(
            f"{specs} is not a folder of feature specs",
            "write one with `gateway compile-features --out DIR`, or unset GATEWAY_FEATURE_SPECS",
            2,
        )
    from gateway.feature_specs import refuse_what_needs_feast

    refuse_what_needs_feast(settings)  # the serving image: no Feast, no pyarrow
    if specs is None and not (settings.features.repo / "feature_store.yaml").is_file():
        raise refuse(
            f"{settings.features.repo} is not a Feast feature repository (it has no feature_store.yaml)",
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
    feature_specs: Annotated[
        Path | None,
        typer.Option(help="Feature specs `gateway compile-features` wrote [compiled at start]"),
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
        feature_specs=feature_specs,
    )
    from gateway import feature_specs as specs
    from gateway import processes

    # The refusals that take milliseconds come before the seconds of compiling the specs.
    processes.refuse_http_port_for_grpc(settings.triton.url)
    processes.refuse_busy_ports(settings)
    compiling = specs.start_compiling(settings)  # a child process, while this one imports the rest
    try:
        settings = specs.finish_compiling(settings, compiling)
        if settings.server.workers > 1:
            if not settings.server.port:
                console.print("[bold red]error:[/] --workers above 1 needs a fixed --port (not 0)")
                sys.exit(2)
            sys.exit(processes.supervise(settings))
        processes.worker(settings, reuse_port=False)
    finally:
        specs.discard(compiling)


@app.command("compile-features")
def compile_features(
    out: Annotated[Path, typer.Option(help="Folder to write into: <service>.json each, refused.json")],
    feature_repo: Annotated[Path | None, typer.Option(help="Feast repository [feature_repo]")] = None,
    online_store: Annotated[str | None, typer.Option(help="sqlite or redis [sqlite]")] = None,
    redis_url: Annotated[str | None, typer.Option(help="Redis for the redis profile, host:port")] = None,
) -> None:
    """Compile every feature service of the Feast repository for the gateway's direct online
    reader (docs/feature-reads.md), once, at deploy time: `gateway serve --feature-specs DIR`
    then reads the online store without the Feast SDK. A service the reader cannot serve (an
    on-demand view, ...) is listed in refused.json and read through the SDK."""
    settings = _settings(feature_repo=feature_repo, online_store=online_store, redis_url=redis_url)
    from gateway import feature_specs as specs

    refused = specs.compile_into(settings.features, out)
    for service, why in sorted(refused.items()):
        console.print(f"note: {service} is read through the Feast SDK: {why}", soft_wrap=True)
    console.print(f"feature specs: {out}/")


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
    engine: Annotated[
        str,
        typer.Option(help="pandas, or spark: every logged row of the window, on Spark (docs/batch.md)"),
    ] = "pandas",
    spark_master: Annotated[
        str | None, typer.Option(help="With --engine spark: e.g. local[4] (default: spark-submit's)")
    ] = None,
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
    if engine not in ("pandas", "spark") or (engine == "spark" and not payload_log):
        raise refuse(f"--engine {engine} checks a payload log on Spark, or pass --engine pandas", hint, 2)
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
    _check_triton(settings.triton.url)
    source = _SkewSource(frame, str(entities) if entities else "", payload_log, window)
    try:
        if engine == "spark" and window is not None:  # --engine spark is refused without the log
            from gateway.spark.skew import run_logged

            report = asyncio.run(run_logged(settings, model, str(payload_log), window, spark_master))
        else:
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
