"""Triton as each mode deploys it: the NGC image, its ports and probes, KServe canary, GPU,
and where the model repository comes from."""

from __future__ import annotations

import re

import pytest
from helm_python import Chart

from tests.helm.helpers import (
    ALL_SETS,
    DEPLOYMENT_SETS,
    KSERVE_SETS,
    TRITON_IMAGE,
    VALUE_SETS,
    Release,
    arg_value,
    crd_errors,
    env_of,
    on,
    render,
    subset,
)

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@on(*DEPLOYMENT_SETS)
def test_triton_deployment_runs_the_ngc_image_with_its_ports_and_probes(release: Release) -> None:
    triton = release.pods("triton").main
    assert triton["image"] == TRITON_IMAGE
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    args = triton["args"]
    assert args[0] == "tritonserver"
    assert arg_value(args, "--model-control-mode") == release.values["triton"]["modelControlMode"]
    assert (
        arg_value(args, "--http-port"),
        arg_value(args, "--grpc-port"),
        arg_value(args, "--metrics-port"),
    ) == ("8000", "8001", "8002")
    assert triton["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8000}
    assert triton["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": 8000}
    # Triton reads the repository where the model-repository volume is mounted.
    mounts = {m["name"]: m["mountPath"] for m in triton["volumeMounts"]}
    assert arg_value(args, "--model-repository") == mounts["model-repository"]


@on(*KSERVE_SETS)
def test_kserve_runtime_runs_the_ngc_image_and_serves_grpc(release: Release) -> None:
    isvc = release.one("InferenceService")
    runtime = release.one("ServingRuntime")
    model = isvc["spec"]["predictor"]["model"]
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert DNS_LABEL.match(isvc["metadata"]["name"])
    assert model["modelFormat"] == {"name": "triton"}
    assert model["runtime"] == runtime["metadata"]["name"]
    assert {"name": "triton"}.items() <= runtime["spec"]["supportedModelFormats"][0].items()
    container = release.pods("triton").main
    assert container["image"] == TRITON_IMAGE
    # Knative routes a single port: gRPC (h2c), what the gateway speaks.
    assert container["ports"] == [{"name": "h2c", "containerPort": 8001, "protocol": "TCP"}]
    args = container["args"]
    assert arg_value(args, "--model-repository") == "/mnt/models"  # KServe's download target
    assert arg_value(args, "--grpc-port") == "8001"
    http = int(arg_value(args, "--http-port") or 0)
    assert http == 8000 and arg_value(args, "--metrics-port") == "8002"
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": http}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": http}


def test_kserve_with_an_existing_runtime_pins_the_triton_release(chart: Chart) -> None:
    values = {**VALUE_SETS["kserve-stable"], "kserve": {"runtime": {"create": False}}}
    rel = render(chart, "kserve-builtin-runtime", values)
    assert rel.all("ServingRuntime") == []
    model = rel.one("InferenceService")["spec"]["predictor"]["model"]
    assert "runtime" not in model  # KServe picks its Triton runtime by modelFormat
    assert model["runtimeVersion"] == TRITON_IMAGE.rpartition(":")[2]
    assert arg_value(model["args"], "--model-control-mode") == "explicit"
    assert crd_errors(rel.one("InferenceService")) == []


@on(*KSERVE_SETS)
def test_canary_percent_and_tag_routing_only_when_canary_is_on(release: Release) -> None:
    isvc = release.one("InferenceService")
    predictor = isvc["spec"]["predictor"]
    annotations = isvc["metadata"].get("annotations", {})
    canary = release.values["kserve"]["canary"]
    assert annotations["serving.kserve.io/deploymentMode"] == release.values["kserve"]["deploymentMode"]
    if canary["enabled"] and release.knative:
        assert predictor["canaryTrafficPercent"] == canary["trafficPercent"]
        assert annotations["serving.kserve.io/enable-tag-routing"] == "true"
        assert "canary" not in isvc["spec"]
    elif canary["enabled"]:
        # Standard/RawDeployment (KServe >= 0.20): a second predictor on the candidate repository,
        # the same runtime and pod labels (NetworkPolicy, metrics), with the canary's share.
        (entry,) = isvc["spec"]["canary"]
        assert entry["trafficPercent"] == canary["trafficPercent"]
        assert entry["predictor"]["model"]["storageUri"] == canary["storageUri"]
        assert predictor["model"]["storageUri"] != canary["storageUri"]
        assert entry["predictor"]["model"]["runtime"] == predictor["model"]["runtime"]
        assert entry["predictor"]["labels"] == predictor["labels"]
        assert "canaryTrafficPercent" not in predictor and "canaryTrafficPercent" not in entry["predictor"]
        assert "serving.kserve.io/enable-tag-routing" not in annotations
    else:
        assert "canary" not in isvc["spec"]
        assert "canaryTrafficPercent" not in predictor
        assert "serving.kserve.io/enable-tag-routing" not in annotations


@on(*KSERVE_SETS)
def test_kserve_storage_uri_comes_from_the_model_repository(release: Release) -> None:
    repo = release.values["modelRepository"]
    uri = release.one("InferenceService")["spec"]["predictor"]["model"]["storageUri"]
    if repo["storageUri"]:
        assert uri == repo["storageUri"]
    else:
        assert uri == f"pvc://{repo['pvc']['claimName']}/{repo['pvc']['subPath']}".rstrip("/")


@on(*ALL_SETS)
def test_gpu_limit_and_scheduling_iff_gpu_is_on(release: Release) -> None:
    gpu = release.values["triton"]["gpu"]
    pods = release.pods("triton")
    for container in pods.containers:
        limits = container["resources"]["limits"]
        assert ("nvidia.com/gpu" in limits) == gpu["enabled"]
        if gpu["enabled"]:
            assert int(limits["nvidia.com/gpu"]) == gpu["count"]
    node_selector = pods.spec.get("nodeSelector", {})
    tolerations = pods.spec.get("tolerations", [])
    assert subset(gpu["nodeSelector"], node_selector) == gpu["enabled"]
    assert all(t in tolerations for t in gpu["tolerations"]) == gpu["enabled"]
    assert (
        subset(release.values["triton"]["nodeSelector"], node_selector)
        or not release.values["triton"]["nodeSelector"]
    )
    # The GPU belongs to Triton alone.
    for component in ["gateway"] + (["redis"] if release.values["redis"]["enabled"] else []):
        for container in release.pods(component).containers:
            assert "nvidia.com/gpu" not in container["resources"].get("limits", {})


@on("deployment-pvc", "gpu-on")
def test_pvc_repository_is_mounted_read_only_without_a_sync(release: Release) -> None:
    pvc = release.values["modelRepository"]["pvc"]
    pods = release.pods("triton")
    volumes = {v["name"]: v for v in pods.spec["volumes"]}
    assert volumes["model-repository"]["persistentVolumeClaim"]["claimName"] == pvc["claimName"]
    mount = next(m for m in pods.main["volumeMounts"] if m["name"] == "model-repository")
    assert mount["readOnly"] is True
    assert mount.get("subPath", "") == pvc["subPath"]
    assert pods.init_containers == []


@on("deployment-object-storage", "redis-external")
def test_object_storage_is_synced_into_the_directory_triton_reads(release: Release) -> None:
    repo = release.values["modelRepository"]
    pods = release.pods("triton")
    (sync,) = pods.init_containers
    assert sync["image"].startswith("amazon/aws-cli:")
    target = next(m["mountPath"] for m in sync["volumeMounts"] if m["name"] == "model-repository")
    assert sync["args"][-2:] == [repo["storageUri"], target]
    assert arg_value(sync["args"], "--endpoint-url") == (repo["sync"]["s3"]["endpointUrl"] or None)
    assert arg_value(pods.main["args"], "--model-repository") == target
    volumes = {v["name"]: v for v in pods.spec["volumes"]}
    assert "emptyDir" in volumes["model-repository"]


def test_gcs_repository_is_synced_with_the_cloud_sdk(chart: Chart) -> None:
    values = {"triton": {"mode": "deployment"}, "modelRepository": {"storageUri": "gs://b/repo"}}
    pods = render(chart, "gcs", values).pods("triton")
    (sync,) = pods.init_containers
    assert sync["image"].startswith("google/cloud-sdk:")
    assert sync["command"] == ["gcloud"] and "gs://b/repo" in sync["args"]


UTF8 = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _triton_envs(release: Release) -> list[dict[str, str]]:
    """The env of every container Triton runs in, and in KServe mode the predictor's too."""
    envs = [env_of(c) for c in release.pods("triton").containers]
    if release.kserve:
        envs.append(env_of(release.one("InferenceService")["spec"]["predictor"]["model"]))
    return envs


@on(*ALL_SETS)
def test_triton_runs_with_a_utf8_locale(release: Release) -> None:
    """ONNX string operators need it (onnxruntime_backend#153); the NGC image's default is POSIX."""
    for env in _triton_envs(release):
        assert UTF8.items() <= env.items(), env


def test_an_existing_kserve_runtime_gets_the_locale_through_the_predictor(chart: Chart) -> None:
    values = {**VALUE_SETS["kserve-stable"], "kserve": {"runtime": {"create": False}}}
    rel = render(chart, "kserve-builtin-runtime-env", values)
    model = rel.one("InferenceService")["spec"]["predictor"]["model"]
    assert UTF8.items() <= env_of(model).items()
    assert crd_errors(rel.one("InferenceService")) == []


@pytest.mark.parametrize("set_name", ["deployment-pvc", "kserve-canary"])
def test_triton_env_is_overridable(chart: Chart, set_name: str) -> None:
    values = {**VALUE_SETS[set_name]}
    values["triton"] = {
        **values["triton"],
        "env": {"LANG": "en_US.UTF-8", "LC_ALL": None, "OMP_NUM_THREADS": "4"},
    }
    rel = render(chart, f"{set_name}-env", values)
    for env in _triton_envs(rel):
        assert env == {"LANG": "en_US.UTF-8", "OMP_NUM_THREADS": "4"}  # null drops a default
