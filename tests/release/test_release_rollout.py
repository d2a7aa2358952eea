"""The canary rollout's transitions and its readiness wait, with no cluster.

What stands in for the Kubernetes API server (which cannot run here): ``FakeKServe`` in
``tests/release/helpers.py``, injected where ``kubernetes.client.CustomObjectsApi`` goes. It
applies merge patches, generations and KServe's CRD schema like the API server, and models
KServe's controller for the status (revisions, readiness, traffic split). The rollout code
under test is the real one, talking to it through the same calls it makes to a cluster; the
errors it raises are the ``kubernetes`` client's real ``ApiException``.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from typer.testing import CliRunner

from builder.release import rollout
from builder.release.errors import ReleaseError, RolloutTimeoutError
from builder.release.kube import InferenceServices
from builder.release.manifest import ServiceSpec
from tests.release.helpers import NS, FakeClock, FakeKServe, wait


def spec(version: str, canary: int | None = None) -> ServiceSpec:
    return ServiceSpec(
        name="fraud-detector",
        namespace=NS,
        model="fraud-detector",
        model_version=version,
        storage_uri=f"s3://models/fraud/v{version}",
        canary_percent=canary,
    )


@pytest.fixture
def kserve() -> FakeKServe:
    return FakeKServe(ready_after=2)


@pytest.fixture
def services(kserve: FakeKServe) -> InferenceServices:
    return InferenceServices(kserve, NS)


def deploy_v1(services: InferenceServices) -> None:
    result = rollout.apply(services, spec("1"))
    assert result.action == "created"
    wait(services, FakeClock(), latest_percent=100)


def test_first_apply_creates_and_the_wait_sees_the_revision_become_ready(
    kserve: FakeKServe, services: InferenceServices
) -> None:
    result = rollout.apply(services, spec("1", canary=10))
    assert result.action == "created"
    assert rollout.expected_latest_percent(result, spec("1", canary=10)) == 100  # nothing to split with
    clock, seen = FakeClock(), []
    status = wait(services, clock, latest_percent=100, on_poll=lambda s: seen.append(s.ready))
    assert seen == [False, False, True]  # ready_after=2: two polls see the revision still starting
    assert clock.now == 2
    assert status.latest_ready == status.latest_created == "fraud-detector-predictor-00001"
    assert status.latest_url == "http://latest-fraud-detector-predictor.serving.serving.example.com"


def test_canary_then_promote(kserve: FakeKServe, services: InferenceServices) -> None:
    deploy_v1(services)
    result = rollout.apply(services, spec("2", canary=10))
    assert result.action == "patched"
    patch = kserve.calls[-1][1]
    assert patch["spec"]["predictor"] == {
        "canaryTrafficPercent": 10,
        "model": {"storageUri": "s3://models/fraud/v2"},
    }
    canary = wait(
        services, FakeClock(), latest_percent=rollout.expected_latest_percent(result, spec("2", 10))
    )
    assert canary.latest_created == canary.latest_ready == "fraud-detector-predictor-00002"
    assert canary.latest_percent == 10 and canary.latest_rolled_out == "fraud-detector-predictor-00001"
    assert canary.prev_url and canary.latest_url and canary.latest_url.startswith("http://latest-")

    promoted = rollout.promote(services, "fraud-detector")
    assert kserve.calls[-1] == ("patch", {"spec": {"predictor": {"canaryTrafficPercent": None}}})
    assert promoted.canary_percent is None  # the field is gone from the spec, not set to null
    assert "canaryTrafficPercent" not in kserve.objects[(NS, "fraud-detector")]["spec"]["predictor"]
    final = wait(services, FakeClock(), latest_percent=100)
    assert final.latest_rolled_out == "fraud-detector-predictor-00002"
    assert final.previous_rolled_out == "fraud-detector-predictor-00001"


def test_canary_then_rollback(kserve: FakeKServe, services: InferenceServices) -> None:
    deploy_v1(services)
    rollout.apply(services, spec("2", canary=20))
    wait(services, FakeClock(), latest_percent=20)
    rolled_back = rollout.rollback(services, "fraud-detector")
    assert kserve.calls[-1] == ("patch", {"spec": {"predictor": {"canaryTrafficPercent": 0}}})
    assert rolled_back.canary_percent == 0
    final = wait(services, FakeClock(), latest_percent=0)
    by_revision = {t["revisionName"]: t["percent"] for t in final.traffic}
    assert by_revision == {"fraud-detector-predictor-00002": 0, "fraud-detector-predictor-00001": 100}
    assert final.latest_rolled_out == "fraud-detector-predictor-00001"  # v1 still the rolled-out one


def test_promote_refuses_a_canary_that_is_not_ready(kserve: FakeKServe, services: InferenceServices) -> None:
    deploy_v1(services)
    kserve.broken = True  # the next revision never becomes ready (e.g. its model fails to load)
    rollout.apply(services, spec("2", canary=10))
    with pytest.raises(ReleaseError, match="refusing to promote fraud-detector: not Ready: Revision"):
        rollout.promote(services, "fraud-detector")
    assert kserve.calls[-1][0] == "get"  # nothing was patched
    forced = rollout.promote(services, "fraud-detector", force=True)
    assert forced.canary_percent is None


def test_wait_times_out_with_the_reason(kserve: FakeKServe, services: InferenceServices) -> None:
    deploy_v1(services)
    kserve.broken = True
    rollout.apply(services, spec("2", canary=10))
    clock = FakeClock()
    with pytest.raises(RolloutTimeoutError) as info:
        wait(services, clock, timeout_s=30, latest_percent=10)
    assert "Revision fraud-detector-predictor-00002 is not ready after 30 s" in info.value.message
    assert info.value.exit_code == 11
    assert clock.now == 30  # waited the whole timeout, no more
    assert "rollback" in (info.value.hint or "")


def test_wait_does_not_trust_a_status_from_before_the_patch(
    kserve: FakeKServe, services: InferenceServices
) -> None:
    """Right after a patch the stored status still describes the old revision as Ready."""
    deploy_v1(services)
    patched = rollout.apply(services, spec("2", canary=10)).status
    assert patched.ready and patched.latest_ready == "fraud-detector-predictor-00001"
    assert not patched.revision_ready  # generation 2 not yet observed
    assert patched.waiting_for(10) == "controller has not seen generation 2 yet"


def test_rollback_without_a_previous_revision_is_refused(services: InferenceServices) -> None:
    deploy_v1(services)
    with pytest.raises(ReleaseError, match="no previous revision"):
        rollout.rollback(services, "fraud-detector")


def test_reapplying_the_same_version_is_a_no_op_rollout(
    kserve: FakeKServe, services: InferenceServices
) -> None:
    deploy_v1(services)
    rollout.apply(services, spec("1"))
    status = wait(services, FakeClock(), latest_percent=100)
    assert status.latest_created == "fraud-detector-predictor-00001"
    assert kserve.objects[(NS, "fraud-detector")]["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (ApiException(status=403, reason="Forbidden"), "cannot patch InferenceService in serving (HTTP 403)"),
        (ApiException(status=401, reason="Unauthorized"), "(HTTP 401)"),
        (ApiException(status=500, reason="Internal Server Error"), "Internal Server Error"),
    ],
)
def test_api_errors_become_one_line_release_errors(
    kserve: FakeKServe, services: InferenceServices, error: ApiException, message: str
) -> None:
    deploy_v1(services)
    kserve.fail_next = error
    with pytest.raises(ReleaseError, match="Kubernetes API") as info:
        services.patch("fraud-detector", {"spec": {"predictor": {"canaryTrafficPercent": 5}}})
    assert message in info.value.message and info.value.exit_code == 10
    assert "\n" not in info.value.message


def test_missing_object_vs_missing_kserve(kserve: FakeKServe) -> None:
    assert InferenceServices(kserve, NS).get("absent") is None
    with pytest.raises(ReleaseError, match="not found in namespace serving"):
        InferenceServices(kserve, NS).require("absent")
    kserve.fail_next = ApiException(status=404, reason="Not Found", body="404 page not found")
    with pytest.raises(ReleaseError, match="HTTP 404") as info:
        InferenceServices(kserve, NS).get("absent")  # KServe's CRD not installed: an error, not "absent"
    assert "KServe installed" in (info.value.hint or "")


def test_the_api_server_rejects_objects_that_break_the_crd(
    kserve: FakeKServe, services: InferenceServices
) -> None:
    deploy_v1(services)
    with pytest.raises(ReleaseError, match="HTTP 422"):
        services.patch("fraud-detector", {"spec": {"predictor": {"canaryTrafficPercent": "ten"}}})


def test_unreachable_api_server_is_a_clear_error() -> None:
    """A real CustomObjectsApi aimed at a closed port: the client's own connection error."""
    from kubernetes import client

    from builder.runtime.ports import free_port

    configuration = client.Configuration(host=f"http://127.0.0.1:{free_port()}")
    configuration.retries = 0
    api = client.CustomObjectsApi(client.ApiClient(configuration))
    with pytest.raises(ReleaseError, match="cannot reach the Kubernetes API server"):
        InferenceServices(api, NS, request_timeout=2).get("fraud-detector")


def test_cli_apply_promote_status_through_the_fake(
    monkeypatch: pytest.MonkeyPatch, kserve: FakeKServe
) -> None:
    """The real commands (in-process, no gevent here), with the fake injected for the cluster."""
    import json

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

    first = apply("1")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["action"] == "created"
    second = apply("2", "--canary-percent", "10")
    assert second.exit_code == 0, second.output
    canary = json.loads(second.stdout)
    assert canary["action"] == "patched" and canary["latest_percent"] == 10 and canary["revision_ready"]
    promoted = runner.invoke(app, ["release", "promote", "fraud-detector", "-n", NS, "--json"])
    assert promoted.exit_code == 0, promoted.output
    assert json.loads(promoted.stdout)["latest_percent"] == 100
    status = runner.invoke(app, ["release", "status", "fraud-detector", "-n", NS, "--json"])
    assert json.loads(status.stdout)["latest_rolled_out"] == "fraud-detector-predictor-00002"
