"""What the rollout commands render and would send, checked against KServe's CRD schema.

The CRD check here is the Helm tests' own (``tests/helm/helpers.crd_errors``: jsonschema on
the CRD's openAPIV3Schema plus fields pruning would drop), independent of the code under test.
Dry-run output comes from the real ``builder release`` CLI in a subprocess.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from helm_python import Chart

from builder.errors import UsageError
from builder.release.manifest import (
    TAG_ROUTING,
    ServiceSpec,
    merge_patch,
    promote_patch,
    release_patch,
    render,
    rollback_patch,
)
from tests.helm.helpers import CHART_DIR, VALUE_SETS, crd_errors
from tests.helm.helpers import render as render_chart
from tests.release.helpers import builder

BASE: dict[str, Any] = {
    "name": "fraud-detector",
    "namespace": "serving",
    "model": "fraud-detector",
    "model_version": "3",
    "storage_uri": "s3://models/fraud/v3",
}


@pytest.mark.parametrize(
    "extra",
    [
        {"canary_percent": 10},
        {},
        {"canary_percent": 0, "runtime": "triton-stack-triton", "protocol": "grpc-v2"},
        {"runtime_version": "24.10-py3", "gpus": 1, "min_replicas": 0, "max_replicas": 5},
    ],
)
def test_rendered_inference_service_passes_the_crd(extra: dict[str, Any]) -> None:
    manifest = render(ServiceSpec(**BASE, **extra))
    assert crd_errors(manifest) == []
    annotations = manifest["metadata"]["annotations"]
    assert annotations[TAG_ROUTING] == "true"  # the gate reaches the canary at its latest- host
    assert annotations["serving.kserve.io/deploymentMode"] == "Serverless"  # canary needs Knative
    predictor = manifest["spec"]["predictor"]
    assert predictor["model"]["modelFormat"] == {"name": "triton"}
    assert predictor["model"]["storageUri"] == "s3://models/fraud/v3"
    assert predictor.get("canaryTrafficPercent") == extra.get("canary_percent")


def test_patches_keep_the_object_valid_and_do_what_kserve_expects() -> None:
    manifest = render(ServiceSpec(**BASE))
    canary = merge_patch(manifest, release_patch(ServiceSpec(**BASE, canary_percent=10)))
    assert crd_errors(canary) == [] and canary["spec"]["predictor"]["canaryTrafficPercent"] == 10
    promoted = merge_patch(canary, promote_patch())
    assert crd_errors(promoted) == [] and "canaryTrafficPercent" not in promoted["spec"]["predictor"]
    rolled_back = merge_patch(canary, rollback_patch())
    assert crd_errors(rolled_back) == [] and rolled_back["spec"]["predictor"]["canaryTrafficPercent"] == 0
    # a full rollout (no canary) removes a leftover percent instead of keeping the old split
    full = merge_patch(rolled_back, release_patch(ServiceSpec(**BASE)))
    assert "canaryTrafficPercent" not in full["spec"]["predictor"]


def test_release_patch_fits_the_helm_charts_inference_service() -> None:
    """The rollout patches the object the chart installs, changing only the release fields."""
    with Chart.load(CHART_DIR) as chart:
        release = render_chart(chart, "kserve-canary", VALUE_SETS["kserve-canary"])
    (isvc,) = [o for o in release.objects if o["kind"] == "InferenceService"]
    patched = merge_patch(
        isvc, release_patch(ServiceSpec(**{**BASE, "name": isvc["metadata"]["name"]}, canary_percent=5))
    )
    assert crd_errors(patched) == []
    predictor, before = patched["spec"]["predictor"], isvc["spec"]["predictor"]
    assert (
        predictor["canaryTrafficPercent"] == 5 and predictor["model"]["storageUri"] == "s3://models/fraud/v3"
    )
    assert predictor["model"]["runtime"] == before["model"]["runtime"]  # the chart's runtime stays
    assert predictor["model"]["resources"] == before["model"]["resources"]
    assert patched["metadata"]["labels"] == isvc["metadata"]["labels"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"name": "Fraud_Detector"}, "not a DNS label"),
        ({"name": "a" * 46}, "at most 45"),
        ({"storage_uri": "model_repo"}, "has no scheme"),
        ({"canary_percent": 101}, "0..100"),
        ({"protocol": "http"}, "protocol"),
        ({"min_replicas": 4, "max_replicas": 2}, "replicas"),
    ],
)
def test_bad_specs_are_usage_errors(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        render(ServiceSpec(**{**BASE, **extra}))


def test_render_cli_prints_a_manifest_kubectl_can_apply() -> None:
    proc = builder(
        "render",
        "fraud-detector",
        "--version",
        "3",
        "--storage-uri",
        "s3://models/fraud/v3",
        "-n",
        "serving",
        "--canary-percent",
        "10",
    )
    assert proc.returncode == 0, proc.stderr
    manifest = yaml.safe_load(proc.stdout)
    assert crd_errors(manifest) == []
    assert manifest["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert manifest["metadata"]["annotations"]["triton-stack/model-version"] == "3"


def test_apply_dry_run_prints_both_requests_each_valid_against_the_crd() -> None:
    proc = builder(
        "apply",
        "fraud-detector",
        "--version",
        "4",
        "--storage-uri",
        "s3://models/fraud/v4",
        "-n",
        "serving",
        "--canary-percent",
        "10",
        "--mode",
        "serverless",
        "--dry-run",
        "--kubeconfig",
        "/nonexistent",
    )
    assert proc.returncode == 0, proc.stderr  # no cluster was contacted (the kubeconfig does not exist)
    plan = yaml.safe_load(proc.stdout)
    assert plan["dryRun"] is True and plan["operation"] == "apply"
    create, patch = plan["requests"]
    assert create["method"] == "POST" and create["path"].endswith("/namespaces/serving/inferenceservices")
    assert crd_errors(create["body"]) == []
    assert patch["method"] == "PATCH" and patch["contentType"] == "application/merge-patch+json"
    assert patch["path"].endswith("/inferenceservices/fraud-detector")
    assert crd_errors(merge_patch(create["body"], patch["body"])) == []
    assert patch["body"]["spec"]["predictor"] == {
        "canaryTrafficPercent": 10,
        "model": {"storageUri": "s3://models/fraud/v4"},
    }


@pytest.mark.parametrize(("operation", "percent"), [("promote", None), ("rollback", 0)])
def test_promote_and_rollback_dry_runs_print_the_merge_patch(operation: str, percent: int | None) -> None:
    proc = builder(
        operation, "fraud-detector", "-n", "serving", "--mode", "serverless", "--dry-run", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    (request,) = plan["requests"]
    assert request["body"] == {"spec": {"predictor": {"canaryTrafficPercent": percent}}}
    # JSON null is what removes the field in a merge patch
    assert ('"canaryTrafficPercent": null' in proc.stdout) == (percent is None)
    canary = render(ServiceSpec(**BASE, canary_percent=10))
    assert crd_errors(merge_patch(canary, request["body"])) == []


def test_commands_without_a_cluster_fail_fast_and_clearly() -> None:
    start = time.monotonic()
    env = {"KUBECONFIG": "/nonexistent/kubeconfig", "KUBERNETES_SERVICE_HOST": ""}
    proc = builder("status", "fraud-detector", "-n", "serving", env=env)
    assert time.monotonic() - start < 10
    assert proc.returncode == 10, proc.stderr
    assert proc.stderr.startswith("error: no Kubernetes configuration")
    assert "--dry-run" in proc.stderr


def test_bad_options_are_usage_errors_on_the_cli() -> None:
    proc = builder("render", "Fraud_Detector", "--version", "1", "--storage-uri", "s3://x")
    assert proc.returncode == 2 and "not a DNS label" in proc.stderr
    proc = builder(
        "apply", "fraud-detector", "--version", "1", "--storage-uri", "s3://x", "--canary-percent", "150"
    )
    assert proc.returncode == 2
