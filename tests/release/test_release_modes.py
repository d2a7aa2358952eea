"""``builder release`` in KServe's two deployment modes: Serverless (``canaryTrafficPercent``)
and Standard (``spec.canary``, KServe >= 0.20).

Dry runs come from the real CLI in a subprocess and are checked with the Helm tests' own CRD
check (``tests/helm/helpers.crd_errors``), independent of the code under test. What
stands in for the Kubernetes API server (which cannot run here) is ``FakeKServe``
(``tests/release/helpers.py``): the API server's merge patches, generations, CRD checks,
pruning and server-side dry run, plus a model of KServe 0.20's Standard-mode controller
(Deployments per predictor name, ``canaryStatuses``), not KServe itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from builder.errors import UsageError
from builder.release import rollout
from builder.release.api import DEPLOYMENT_MODE, TAG_ROUTING
from builder.release.errors import ManifestError, ReleaseError
from builder.release.kube import InferenceServices
from builder.release.manifest import ServiceSpec, merge_patch, render, render_standalone
from builder.release.modes import Mode, mode_of
from builder.release.schema import find_crd, read_crd
from tests.helm.helpers import crd_errors
from tests.release.helpers import NS, FakeClock, FakeKServe, builder, wait

CRD = "serving.kserve.io_inferenceservices.yaml"
APPLY = ["apply", "fraud-detector", "--version", "4", "--storage-uri", "s3://models/fraud/v4", "-n", NS]


def spec(version: str, canary: int | None = None, mode: Mode = Mode.AUTO) -> ServiceSpec:
    return ServiceSpec(
        name="fraud-detector",
        namespace=NS,
        model="fraud-detector",
        model_version=version,
        storage_uri=f"s3://models/fraud/v{version}",
        canary_percent=canary,
        mode=mode,
    )


@pytest.fixture
def old_crd(tmp_path: Path) -> Path:
    """KServe's CRD as before 0.20: the same, without spec.canary."""
    path = find_crd()
    assert path is not None
    crd = read_crd(path)
    for version in crd["spec"]["versions"]:
        del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["canary"]
    (tmp_path / CRD).write_text(yaml.safe_dump(crd))
    return tmp_path


# ---- dry runs and rendering, both modes, against KServe's CRD -------------------------------------


def test_render_in_standard_mode_has_no_knative_fields() -> None:
    manifest = render(spec("1", canary=10, mode=Mode.STANDARD))
    assert crd_errors(manifest) == []
    assert manifest["metadata"]["annotations"][DEPLOYMENT_MODE] == "Standard"
    assert TAG_ROUTING not in manifest["metadata"]["annotations"]
    assert "canaryTrafficPercent" not in manifest["spec"]["predictor"]  # a first version takes it all


RENDER = ["render", "fraud-detector", "--version", "4", "--storage-uri", "s3://models/fraud/v4", "-n", NS]


def test_render_refuses_a_standard_mode_canary_it_cannot_carry() -> None:
    # KServe ignores canaryTrafficPercent in Standard mode: the printed object, applied, would
    # send all traffic to the new version; a Standard canary is a spec.canary patch (apply)
    proc = builder(*RENDER, "--mode", "standard", "--canary-percent", "10")
    assert proc.returncode == UsageError.exit_code, proc.stderr
    assert proc.stdout == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    hints = [ln for ln in proc.stderr.splitlines() if ln.startswith("hint:")]
    assert len(errors) == 1 and len(hints) == 1, proc.stderr
    assert "--canary-percent" in errors[0] and "Standard mode" in errors[0]
    assert "builder release apply --mode standard --canary-percent" in hints[0]
    assert "--mode serverless" in hints[0]


def test_render_keeps_what_it_can_carry() -> None:
    standard = builder(*RENDER, "--mode", "standard")
    assert standard.returncode == 0, standard.stderr
    assert yaml.safe_load(standard.stdout)["metadata"]["annotations"][DEPLOYMENT_MODE] == "Standard"
    serverless = render_standalone(spec("4", canary=10))  # auto renders a new one Serverless
    assert serverless["spec"]["predictor"]["canaryTrafficPercent"] == 10
    with pytest.raises(UsageError, match="Standard mode"):
        render_standalone(spec("4", canary=0, mode=Mode.STANDARD))


def test_apply_dry_run_in_auto_mode_plans_both_modes_each_valid_against_the_crd() -> None:
    proc = builder(*APPLY, "--canary-percent", "10", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["mode"] == "auto"
    create, serverless, standard = plan["requests"]
    assert create["body"]["metadata"]["annotations"][DEPLOYMENT_MODE] == "Serverless"
    assert "Serverless mode" in serverless["when"] and "Standard mode" in standard["when"]
    assert serverless["body"]["spec"]["predictor"]["canaryTrafficPercent"] == 10
    (canary,) = standard["body"]["spec"]["canary"]
    assert canary["trafficPercent"] == 10 and canary["predictor"]["name"] == "v4"
    assert canary["predictor"]["model"]["storageUri"] == "s3://models/fraud/v4"
    assert "predictor" not in standard["body"]["spec"]  # the stable predictor is left alone
    assert standard["serverDryRunFirst"] is True
    live = render(spec("3", mode=Mode.STANDARD))
    assert crd_errors(merge_patch(live, standard["body"])) == []


def test_standard_full_rollout_dry_run_is_a_rolling_update() -> None:
    proc = builder(*APPLY, "--mode", "standard", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    _, patch = json.loads(proc.stdout)["requests"]
    assert patch["body"]["spec"] == {"predictor": {"model": {"storageUri": "s3://models/fraud/v4"}}}


@pytest.mark.parametrize("operation", ["promote", "rollback"])
def test_standard_promote_and_rollback_dry_runs(operation: str) -> None:
    proc = builder(operation, "fraud-detector", "-n", NS, "--mode", "standard", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    (request,) = json.loads(proc.stdout)["requests"]
    body = request["body"]
    assert body["spec"]["canary"] is None and '"canary": null' in proc.stdout  # null drops the list
    if operation == "promote":  # the stable predictor becomes the canary: its name and model
        assert body["spec"]["predictor"]["name"] == "v2"
        assert body["spec"]["predictor"]["model"]["storageUri"] == "s3://example/model_repo/v2"
    else:
        assert body == {"spec": {"canary": None}}
    assert "live spec.canary" in request["bodyFrom"]


def test_standard_canary_on_a_crd_without_spec_canary_is_refused(old_crd: Path) -> None:
    proc = builder(*APPLY, "--canary-percent", "10", "--mode", "standard", "--dry-run", "--crd", str(old_crd))
    assert proc.returncode == 12
    assert "has no spec.canary: Standard-mode canaries need KServe >= 0.20" in proc.stderr
    # auto: the Serverless plan still stands, the Standard one is listed as refused
    proc = builder(*APPLY, "--canary-percent", "10", "--dry-run", "--json", "--crd", str(old_crd))
    assert proc.returncode == 0, proc.stderr
    refused = json.loads(proc.stdout)["requests"][-1]
    assert refused["exitCode"] == 12 and "KServe >= 0.20" in refused["refused"]
    # a rolling update needs no spec.canary
    assert builder(*APPLY, "--mode", "standard", "--dry-run", "--crd", str(old_crd)).returncode == 0


# ---- rollouts against the stand-in API server ---------------------------------------------------


@pytest.fixture
def kserve() -> FakeKServe:
    return FakeKServe(ready_after=2)


@pytest.fixture
def services(kserve: FakeKServe) -> InferenceServices:
    return InferenceServices(kserve, NS)


def deploy_standard_v1(services: InferenceServices) -> None:
    result = rollout.apply(services, spec("1", mode=Mode.STANDARD))
    assert result.action == "created" and result.mode is Mode.STANDARD
    wait(services, FakeClock(), latest_percent=100)


def stored(kserve: FakeKServe) -> dict[str, Any]:
    return kserve.objects[(NS, "fraud-detector")]


def test_standard_canary_then_promote(kserve: FakeKServe, services: InferenceServices) -> None:
    deploy_standard_v1(services)
    result = rollout.apply(services, spec("2", canary=10))  # auto: read from the live object
    assert result.mode is Mode.STANDARD
    assert [c[0] for c in kserve.calls[-2:]] == ["dry-run patch", "patch"]  # asked first, then sent
    clock = FakeClock()
    canary = wait(services, clock, latest_percent=rollout.expected_latest_percent(result, spec("2", 10)))
    assert clock.now == 2  # the canary's Deployment took two polls to become ready
    assert canary.canary_name == "v2" and canary.latest_percent == 10
    assert canary.canaries == [{"name": "v2", "ready": True, "trafficPercent": 10}]
    assert canary.latest_url == "http://fraud-detector-v2-predictor.serving.svc.cluster.local"
    assert stored(kserve)["spec"]["predictor"]["model"]["storageUri"] == "s3://models/fraud/v1"

    promoted = rollout.promote(services, "fraud-detector")
    predictor = stored(kserve)["spec"]["predictor"]
    assert "canary" not in stored(kserve)["spec"]
    assert predictor["name"] == "v2" and predictor["model"]["storageUri"] == "s3://models/fraud/v2"
    assert predictor["minReplicas"] == 1  # the stable predictor's own settings stay
    clock = FakeClock()
    final = wait(services, clock, latest_percent=rollout.expected_after("promote", promoted))
    assert clock.now == 0  # the canary's pods now serve everything: nothing restarted
    assert final.stable_name == "v2" and final.canaries == [] and final.latest_percent == 100


def test_standard_canary_then_rollback(kserve: FakeKServe, services: InferenceServices) -> None:
    deploy_standard_v1(services)
    rollout.apply(services, spec("2", canary=20))
    wait(services, FakeClock(), latest_percent=20)
    rolled_back = rollout.rollback(services, "fraud-detector")
    assert kserve.calls[-1] == ("patch", {"spec": {"canary": None}})
    final = wait(services, FakeClock(), latest_percent=rollout.expected_after("rollback", rolled_back))
    assert "canary" not in stored(kserve)["spec"] and final.canaries == []
    assert final.storage_uri == "s3://models/fraud/v1" and final.latest_percent == 100
    with pytest.raises(ReleaseError, match="has no canary"):
        rollout.rollback(services, "fraud-detector")


def test_standard_promote_refuses_a_canary_that_is_not_ready(
    kserve: FakeKServe, services: InferenceServices
) -> None:
    deploy_standard_v1(services)
    kserve.broken = True
    rollout.apply(services, spec("2", canary=10))
    with pytest.raises(ReleaseError, match="refusing to promote fraud-detector: canary v2 not ready"):
        rollout.promote(services, "fraud-detector")
    assert kserve.calls[-1][0] == "get"


def test_standard_canary_keeps_other_canaries(kserve: FakeKServe, services: InferenceServices) -> None:
    deploy_standard_v1(services)
    model = {"name": "kserve-container", "modelFormat": {"name": "triton"}, "storageUri": "s3://lab/x"}
    experiment = {"trafficPercent": 5, "predictor": {"name": "experiment", "model": model}}
    services.patch("fraud-detector", {"spec": {"canary": [experiment]}})  # someone else's canary
    rollout.apply(services, spec("2", canary=10))
    assert [c["predictor"]["name"] for c in stored(kserve)["spec"]["canary"]] == ["experiment", "v2"]
    rollout.rollback(services, "fraud-detector")
    assert [c["predictor"]["name"] for c in stored(kserve)["spec"]["canary"]] == ["experiment"]
    with pytest.raises(UsageError, match="canaries would take 104% of traffic"):
        rollout.apply(services, spec("3", canary=99))


@pytest.mark.parametrize("annotation", ["Standard", "RawDeployment"])
def test_auto_mode_follows_the_live_inference_service(
    kserve: FakeKServe, services: InferenceServices, annotation: str
) -> None:
    """One installed by someone else (Helm, kubectl), with KServe's legacy name or the new one."""
    manifest = render(spec("1", mode=Mode.STANDARD))
    manifest["metadata"]["annotations"][DEPLOYMENT_MODE] = annotation
    services.create(manifest)
    assert rollout.apply(services, spec("2", canary=10)).mode is Mode.STANDARD
    assert "canaryTrafficPercent" not in stored(kserve)["spec"]["predictor"]
    assert stored(kserve)["spec"]["canary"][0]["trafficPercent"] == 10
    with pytest.raises(UsageError, match="runs in Standard mode, not Serverless"):
        rollout.apply(services, spec("3", canary=10, mode=Mode.SERVERLESS))


def test_mode_from_the_status_when_no_annotation_says() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "x", "annotations": {}},
        "status": {"deploymentMode": "Standard"},
    }
    assert mode_of(obj) is Mode.STANDARD
    assert mode_of({"metadata": {"name": "x"}}) is None


def test_auto_mode_without_any_mode_on_the_live_object_asks_for_one(
    kserve: FakeKServe, services: InferenceServices
) -> None:
    manifest = render(spec("1"))
    del manifest["metadata"]["annotations"][DEPLOYMENT_MODE]
    services.create(manifest)
    with pytest.raises(UsageError, match="cannot tell the deployment mode") as info:
        rollout.apply(services, spec("2", canary=10))
    assert "--mode" in (info.value.hint or "") and info.value.exit_code == 2


def test_standard_canary_on_kserve_before_0_20_is_refused_before_anything_changes() -> None:
    kserve = FakeKServe(canary_field=False)
    services = InferenceServices(kserve, NS)
    deploy_standard_v1(services)
    with pytest.raises(
        ManifestError, match=r"has no spec\.canary: Standard-mode canaries need KServe >= 0\.20"
    ) as info:
        rollout.apply(services, spec("2", canary=10))
    assert info.value.exit_code == 12
    assert kserve.calls[-1][0] == "dry-run patch"  # only the server-side dry run was sent
    assert stored(kserve)["metadata"]["generation"] == 1
    assert stored(kserve)["metadata"]["annotations"]["triton-stack/model-version"] == "1"


def test_cli_standard_canary_status_rollback_through_the_fake(
    monkeypatch: pytest.MonkeyPatch, kserve: FakeKServe
) -> None:
    from builder.cli import release as release_cli
    from builder.cli.main import app

    kserve.ready_after = 0
    monkeypatch.setattr(
        release_cli, "_services", lambda ns, kubeconfig, context: InferenceServices(kserve, ns)
    )
    runner = CliRunner()

    def apply(version: str, *extra: str) -> Any:
        uri = f"s3://models/fraud/v{version}"
        args = ["release", "apply", "fraud-detector", "--version", version, "--storage-uri", uri, "-n", NS]
        return runner.invoke(app, [*args, "--json", *extra])

    assert apply("1", "--mode", "standard").exit_code == 0
    canary = apply("2", "--canary-percent", "20")
    assert canary.exit_code == 0, canary.output
    doc = json.loads(canary.stdout)
    assert doc["mode"] == "standard" and doc["canary_name"] == "v2" and doc["latest_percent"] == 20
    status = runner.invoke(app, ["release", "status", "fraud-detector", "-n", NS])
    assert status.exit_code == 0 and "v2 20% ready" in status.output
    rolled_back = runner.invoke(app, ["release", "rollback", "fraud-detector", "-n", NS, "--json"])
    assert rolled_back.exit_code == 0, rolled_back.output
    assert json.loads(rolled_back.stdout)["canary_names"] == []
    refused = runner.invoke(app, ["release", "promote", "fraud-detector", "-n", NS])
    # in-process the error reaches builder's main() handler, which makes it exit 10
    assert isinstance(refused.exception, ReleaseError) and refused.exception.exit_code == 10
    assert "has no canary" in refused.exception.message


def test_the_default_crd_is_the_projects_own_vendored_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No path outside the project: without --crd and $KSERVE_CRD_DIR, the CRD is the copy
    vendored in builder/release/crds/, and the CLI's help names no other."""
    from typer.testing import CliRunner

    from builder.cli.main import _register_commands, app
    from builder.release.schema import VENDORED

    monkeypatch.delenv("KSERVE_CRD_DIR", raising=False)
    path = find_crd()
    assert path is not None and path.parent == VENDORED
    _register_commands()
    shown = CliRunner().invoke(app, ["release", "render", "--help"], env={"COLUMNS": "200"}).output
    assert "vendored" in shown and "shared" not in shown
