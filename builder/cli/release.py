"""``builder release render|apply|promote|rollback|status``: KServe canary rollouts.

The commands only translate options into ``builder.release`` calls. ``--mode`` picks KServe's
deployment mode (``builder.release.modes``): ``serverless`` (Knative, ``canaryTrafficPercent``),
``standard`` (KServe >= 0.20, ``spec.canary``) or ``auto`` (default: the live object's; a new
one, ``render`` and nothing else to go by: Serverless; ``--dry-run``: the plan for each mode).
Manifests and dry-run plans go to stdout (YAML, or JSON with ``--json``), progress and tables to stderr, so
``builder release render ... > isvc.yaml`` and ``... status --json | jq`` work in pipelines.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from builder.cli.common import console, emit_json, run_json_aware
from builder.cli.main import app
from builder.release.modes import Mode

if TYPE_CHECKING:
    from builder.release.kube import InferenceServices

release_app = typer.Typer(
    help="Roll a model version out on KServe: canary, check, promote or roll back.",
    no_args_is_help=True,
)
app.add_typer(release_app, name="release")

NameArg = Annotated[str, typer.Argument(help="InferenceService name")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", "-n", help="Kubernetes namespace")]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout instead of YAML / a table")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the requests instead of sending them")]
WaitOpt = Annotated[bool, typer.Option(help="Wait until the revision and traffic have settled")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="Seconds to wait for readiness")]
KubeconfigOpt = Annotated[
    Path | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
]
ContextOpt = Annotated[str | None, typer.Option(help="kubeconfig context (default: the current one)")]
CrdOpt = Annotated[
    Path | None,
    typer.Option(
        help="KServe InferenceService CRD, file or folder "
        "(default: $KSERVE_CRD_DIR, else the vendored KServe 0.20 CRD)"
    ),
]
ModelArg = Annotated[str, typer.Argument(help="Triton model name (the InferenceService name by default)")]
VersionOpt = Annotated[str, typer.Option("--version", help="The model version this release serves")]
StorageUriOpt = Annotated[
    str, typer.Option(help="Model repository KServe downloads: s3://..., gs://..., pvc://claim/path")
]
IsvcNameOpt = Annotated[
    str | None, typer.Option("--name", help="InferenceService name (default: the model name)")
]
CanaryOpt = Annotated[
    int | None,
    typer.Option(min=0, max=100, help="Traffic share of the new revision; omit for a full rollout"),
]
RuntimeOpt = Annotated[
    str | None, typer.Option(help="ServingRuntime name (default: KServe picks one for format triton)")
]
RuntimeVersionOpt = Annotated[str | None, typer.Option(help="Runtime image tag, e.g. 24.10-py3")]
ProtocolOpt = Annotated[str, typer.Option(help="v2 (HTTP/REST) or grpc-v2")]
MinReplicasOpt = Annotated[int, typer.Option(min=0, help="Minimum predictor replicas (0: scale to zero)")]
MaxReplicasOpt = Annotated[int, typer.Option(min=1, help="Maximum predictor replicas")]
GpusOpt = Annotated[int, typer.Option(min=0, help="nvidia.com/gpu per predictor replica")]
ModeOpt = Annotated[
    Mode,
    typer.Option(
        case_sensitive=False,
        help="KServe deployment mode: serverless (canaryTrafficPercent), standard (spec.canary, "
        "KServe >= 0.20), auto (the live InferenceService's; Serverless for a new one)",
    ),
]


def _write(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(doc)
    else:
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))


def _crd(explicit: Path | None) -> Path | None:
    from builder.release.schema import find_crd

    found = find_crd(explicit)
    if found is None:
        console.print(
            "[yellow]note:[/] not checked against KServe's CRD (not found; pass --crd or set KSERVE_CRD_DIR)"
        )
    return found


def _services(namespace: str, kubeconfig: Path | None, context: str | None) -> InferenceServices:
    from builder.release.kube import InferenceServices, connect

    return InferenceServices(connect(kubeconfig, context), namespace)


@dataclass(frozen=True)
class TrafficRequest:
    """A promote or rollback, as its command's options say: built once, at the edge."""

    operation: str  # "promote" | "rollback"
    name: str
    namespace: str
    mode: Mode
    force: bool  # promote only: even if the newest revision is not ready
    dry_run: bool
    wait: bool
    timeout: float
    kubeconfig: Path | None
    context: str | None
    crd: Path | None
    json_output: bool


def _status_table(status: Any) -> Table:
    table = Table(title=f"InferenceService {status.namespace}/{status.name}", title_justify="left")
    table.add_column("field")
    table.add_column("value", overflow="fold")  # URLs whole, to copy
    ready = "[green]True[/]" if status.ready else f"[red]False[/] {escape(status.reason)}"
    rows = [
        ("ready", ready),
        ("mode", str(status.mode)),
        ("storageUri", escape(str(status.storage_uri))),
        (
            "canaryTrafficPercent",
            "(none: full rollout)" if status.canary_percent is None else str(status.canary_percent),
        ),
        ("latest created / ready", f"{status.latest_created} / {status.latest_ready}"),
        ("rolled out (latest / previous)", f"{status.latest_rolled_out} / {status.previous_rolled_out}"),
        (
            "traffic",
            escape(", ".join(f"{t.get('revisionName')} {t.get('percent', 0)}%" for t in status.traffic)),
        ),
        ("url", escape(str(status.url))),
        ("latest- url (canary alone)", escape(str(status.latest_url))),
        ("prev- url", escape(str(status.prev_url))),
    ]
    if status.mode == Mode.STANDARD.value:  # no revisions: the stable predictor and its canaries
        canaries = ", ".join(
            f"{c.get('name')} {c.get('trafficPercent', 0)}% {'ready' if c.get('ready') else 'not ready'}"
            for c in status.canaries
        )
        rows = [
            *rows[:3],
            ("stable predictor", str(status.stable_name or "(default)")),
            ("canaries (spec.canary)", escape(", ".join(status.canary_names) or "(none)")),
            ("canary statuses", escape(canaries or "(none)")),
            ("release's canary / its traffic", f"{status.canary_name} / {status.latest_percent}%"),
            ("url", escape(str(status.url))),
            ("canary alone (in-cluster)", escape(str(status.latest_url))),
        ]
    for key, value in rows:
        table.add_row(key, value)
    return table


def _report(status: Any, as_json: bool, extra: dict[str, Any] | None = None) -> None:
    if as_json:
        emit_json({"ok": True, **(extra or {}), **status.to_json()})
    else:
        console.print(_status_table(status))


def _waiter(timeout: float) -> Any:
    last: list[str] = []

    def on_poll(status: Any) -> None:
        waiting = status.waiting_for(None)
        if waiting and (not last or last[-1] != waiting):  # one line per change, not per poll
            console.print(f"[dim]waiting ({timeout:g} s max):[/] {escape(waiting)}")
            last.append(waiting)

    return on_poll


@release_app.command("render")
def render_cmd(
    model: ModelArg,
    version: VersionOpt,
    storage_uri: StorageUriOpt,
    name: IsvcNameOpt = None,
    namespace: NamespaceOpt = "default",
    canary_percent: CanaryOpt = None,
    runtime: RuntimeOpt = None,
    runtime_version: RuntimeVersionOpt = None,
    protocol: ProtocolOpt = "v2",
    min_replicas: MinReplicasOpt = 1,
    max_replicas: MaxReplicasOpt = 3,
    gpus: GpusOpt = 0,
    mode: ModeOpt = Mode.AUTO,
    crd: CrdOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Print the InferenceService for a model version (checked against KServe's CRD)."""
    from builder.release import schema
    from builder.release.manifest import ServiceSpec, render_standalone

    def go() -> None:
        spec = ServiceSpec(
            name=name or model,
            namespace=namespace,
            model=model,
            model_version=version,
            storage_uri=storage_uri,
            canary_percent=canary_percent,
            runtime=runtime,
            runtime_version=runtime_version,
            protocol=protocol,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            gpus=gpus,
            mode=mode,
        ).check()
        manifest = render_standalone(spec)  # refuses a canary it could not carry
        schema.check(manifest, _crd(crd))
        _write(manifest, json_output)

    run_json_aware(json_output, go)


@release_app.command("apply")
def apply_cmd(
    model: ModelArg,
    version: VersionOpt,
    storage_uri: StorageUriOpt,
    name: IsvcNameOpt = None,
    namespace: NamespaceOpt = "default",
    canary_percent: CanaryOpt = None,
    runtime: RuntimeOpt = None,
    runtime_version: RuntimeVersionOpt = None,
    protocol: ProtocolOpt = "v2",
    min_replicas: MinReplicasOpt = 1,
    max_replicas: MaxReplicasOpt = 3,
    gpus: GpusOpt = 0,
    mode: ModeOpt = Mode.AUTO,
    dry_run: DryRunOpt = False,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = 600.0,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    crd: CrdOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create the InferenceService, or patch the existing one to this version (as a canary
    with --canary-percent), then wait for the new revision to be ready."""
    from builder.release import rollout
    from builder.release.manifest import ServiceSpec
    from builder.release.plan import apply_plan

    def go() -> None:
        spec = ServiceSpec(
            name=name or model,
            namespace=namespace,
            model=model,
            model_version=version,
            storage_uri=storage_uri,
            canary_percent=canary_percent,
            runtime=runtime,
            runtime_version=runtime_version,
            protocol=protocol,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            gpus=gpus,
            mode=mode,
        ).check()
        plan = apply_plan(spec, _crd(crd))  # validated, dry run or not
        if dry_run:
            _write(plan.to_doc(), json_output)
            return
        services = _services(namespace, kubeconfig, context)
        result = rollout.apply(services, spec)
        console.print(f"{result.action} InferenceService {namespace}/{spec.name} ({spec.model} v{version})")
        console.print(f"deployment mode: {result.mode.annotation}")
        status = result.status
        if wait:
            status = rollout.wait_ready(
                services,
                spec.name,
                timeout_s=timeout,
                latest_percent=rollout.expected_latest_percent(result, spec),
                on_poll=_waiter(timeout),
            )
        _report(status, json_output, {"action": result.action})

    run_json_aware(json_output, go)


def _traffic_command(request: TrafficRequest) -> None:
    from builder.release import rollout
    from builder.release.plan import traffic_plan

    def go() -> None:
        plan = traffic_plan(
            request.operation, request.name, request.namespace, _crd(request.crd), request.mode
        )
        if request.dry_run:
            _write(plan.to_doc(), request.json_output)
            return
        services = _services(request.namespace, request.kubeconfig, request.context)
        if request.operation == "promote":
            status = rollout.promote(services, request.name, force=request.force, mode=request.mode)
        else:
            status = rollout.rollback(services, request.name, mode=request.mode)
        console.print(f"{request.operation}: patched InferenceService {request.namespace}/{request.name}")
        if request.wait:
            status = rollout.wait_ready(
                services,
                request.name,
                timeout_s=request.timeout,
                latest_percent=rollout.expected_after(request.operation, status),
                on_poll=_waiter(request.timeout),
            )
        _report(status, request.json_output, {"action": request.operation})

    run_json_aware(request.json_output, go)


@release_app.command("promote")
def promote_cmd(
    name: NameArg,
    namespace: NamespaceOpt = "default",
    force: Annotated[bool, typer.Option(help="Promote even if the newest revision is not ready")] = False,
    mode: ModeOpt = Mode.AUTO,
    dry_run: DryRunOpt = False,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = 600.0,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    crd: CrdOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Give the canary all traffic (Serverless: remove canaryTrafficPercent; Standard: the
    stable predictor becomes the canary, spec.canary loses it)."""
    _traffic_command(
        TrafficRequest(
            operation="promote",
            name=name,
            namespace=namespace,
            mode=mode,
            force=force,
            dry_run=dry_run,
            wait=wait,
            timeout=timeout,
            kubeconfig=kubeconfig,
            context=context,
            crd=crd,
            json_output=json_output,
        )
    )


@release_app.command("rollback")
def rollback_cmd(
    name: NameArg,
    namespace: NamespaceOpt = "default",
    mode: ModeOpt = Mode.AUTO,
    dry_run: DryRunOpt = False,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = 600.0,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    crd: CrdOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Send all traffic back to the previous version (Serverless: canaryTrafficPercent: 0;
    Standard: drop the canary from spec.canary)."""
    _traffic_command(
        TrafficRequest(
            operation="rollback",
            name=name,
            namespace=namespace,
            mode=mode,
            force=False,
            dry_run=dry_run,
            wait=wait,
            timeout=timeout,
            kubeconfig=kubeconfig,
            context=context,
            crd=crd,
            json_output=json_output,
        )
    )


@release_app.command("status")
def status_cmd(
    name: NameArg,
    namespace: NamespaceOpt = "default",
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Show readiness, revisions, traffic split and the latest-/prev- URLs."""
    from builder.release.rollout import RolloutStatus

    def go() -> None:
        status = RolloutStatus.of(_services(namespace, kubeconfig, context).require(name))
        _report(status, json_output)

    run_json_aware(json_output, go)
