"""The gateway as deployed: where it finds Triton and the online store, its API keys, HPA and PDB."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python import Chart, HelmValuesError

from tests.helm.helpers import (
    ALL_SETS,
    NAMESPACE,
    REPO_ROOT,
    VALUE_SETS,
    Release,
    env_of,
    on,
    render,
    subset,
)


@on(*ALL_SETS)
def test_gateway_points_at_triton_and_the_online_store(release: Release) -> None:
    env = release.gateway_env()
    gateway = release.pods("gateway").main
    assert {p["name"]: p["containerPort"] for p in gateway["ports"]} == {"http": 8080, "grpc": 50051}
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}

    scheme, _, address = env["GATEWAY_TRITON_URL"].partition("://")
    host, _, port = address.rpartition(":")
    if release.kserve:
        assert scheme == "grpc"  # Knative routes the ServingRuntime's one port, h2c
        # The predictor's cluster-local route, where Knative splits stable and canary traffic.
        isvc = release.one("InferenceService")["metadata"]["name"]
        assert host == f"{isvc}-predictor.{NAMESPACE}.svc.cluster.local" and port == "80"
    else:
        service = release.one("Service", "triton")
        ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
        assert host == f"{service['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
        assert scheme == "http" and int(port) == ports["http"]

    assert env["GATEWAY_ONLINE_STORE"] == "redis"
    # the gateway binds loopback unless told otherwise: in a pod it must listen on every address,
    # on the port the probes and the Service use (settings GATEWAY_HOST / GATEWAY_PORT)
    assert env["GATEWAY_HOST"] == "0.0.0.0"
    assert env["GATEWAY_PORT"] == str(release.values["gateway"]["ports"]["http"])
    assert env["GATEWAY_FEATURE_REPO"] == release.values["gateway"]["featureRepo"]
    if release.values["redis"]["enabled"]:
        redis = release.one("Service", "redis")
        # Feast's connection-string form, host:port (what the gateway hands to Feast)
        host, _, port = env["GATEWAY_REDIS_URL"].rpartition(":")
        assert host == f"{redis['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
        assert int(port) == redis["spec"]["ports"][0]["port"]
    else:
        assert env["GATEWAY_REDIS_URL"] == release.values["redis"]["external"]["url"]
        assert release.all("StatefulSet", "redis") == [] and release.all("Service", "redis") == []


@on(*ALL_SETS)
def test_api_keys_secret_is_mounted_where_the_gateway_reads_it(release: Release) -> None:
    auth = release.values["gateway"]["auth"]
    pods = release.pods("gateway")
    volume = next(v for v in pods.spec["volumes"] if "secret" in v)
    mount = next(m for m in pods.main["volumeMounts"] if m["name"] == volume["name"])
    (item,) = volume["secret"]["items"]
    keys_file = f"{mount['mountPath']}/{item['path']}"
    assert keys_file == "/etc/gateway/api-keys"
    assert release.gateway_env()["GATEWAY_API_KEYS_FILE"] == keys_file
    secrets = release.all("Secret")
    if auth["existingSecret"]:
        assert secrets == []
        assert volume["secret"]["secretName"] == auth["existingSecret"]
        assert item["key"] == auth["existingSecretKey"]
        return
    (secret,) = secrets
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    lines = base64.b64decode(secret["data"][item["key"]]).decode().splitlines()
    if auth["apiKeys"]:
        assert lines == auth["apiKeys"]
    else:  # generated at install
        assert len(lines) == 1 and len(lines[0]) >= 32


def test_auth_off_mounts_no_keys(chart: Chart) -> None:
    values = {**VALUE_SETS["deployment-pvc"], "gateway": {"auth": {"enabled": False}}}
    rel = render(chart, "auth-off", values)
    assert rel.all("Secret") == []
    assert "GATEWAY_API_KEYS_FILE" not in rel.gateway_env()
    assert not any("secret" in v for v in rel.pods("gateway").spec["volumes"])


@on(*ALL_SETS)
def test_hpa_scales_the_gateway_deployment(release: Release) -> None:
    autoscaling = release.values["gateway"]["autoscaling"]
    deployment = release.one("Deployment", "gateway")
    hpas = release.all("HorizontalPodAutoscaler")
    if not autoscaling["enabled"]:
        assert hpas == []
        assert deployment["spec"]["replicas"] == release.values["gateway"]["replicas"]
        return
    (hpa,) = hpas
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": deployment["apiVersion"],
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    target = metric["resource"]["target"]["averageUtilization"]
    assert target == autoscaling["targetCPUUtilizationPercentage"]
    assert "replicas" not in deployment["spec"]  # the HPA owns the count


@on(*ALL_SETS)
def test_pdb_protects_the_gateway_pods_only(release: Release) -> None:
    pdb = release.one("PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert subset(selector, release.pods("gateway").labels)
    assert not subset(selector, release.pods("triton").labels)


@on(*ALL_SETS)
def test_gateway_runs_the_chart_image_with_its_redis_profile_mounted(release: Release, chart: Chart) -> None:
    gateway = release.values["gateway"]
    pods = release.pods("gateway")
    image = f"triton-stack/gateway:{gateway['image']['tag'] or chart.metadata['appVersion']}"
    assert pods.main["image"] == image
    (config_map,) = [c for c in release.all("ConfigMap", "gateway")]
    volume = next(
        v
        for v in pods.spec["volumes"]
        if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
    )
    for container in [pods.main, *pods.init_containers]:
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        # the file the gateway opens for GATEWAY_ONLINE_STORE=redis inside GATEWAY_FEATURE_REPO
        assert mount["mountPath"] == f"{gateway['featureRepo']}/feature_store.redis.yaml"
        assert config_map["data"][mount["subPath"]]
        assert env_of(container)["REDIS_CONNECTION_STRING"] == release.gateway_env()["GATEWAY_REDIS_URL"]
    profile = yaml.safe_load(config_map["data"]["feature_store.redis.yaml"])
    assert profile["online_store"] == {"type": "redis", "connection_string": "${REDIS_CONNECTION_STRING}"}
    assert profile["project"] == gateway["feast"]["project"]
    # a pod-local registry must be written by the init container, on a volume both containers mount
    (init,) = pods.init_containers
    assert init["image"] == image
    registry_dir = str(Path(profile["registry"]).parent)
    for container in (init, pods.main):
        assert any(m["mountPath"] == registry_dir for m in container["volumeMounts"]), container["name"]


def test_the_rendered_redis_profile_opens_with_the_images_feature_repo(chart: Chart, tmp_path: Path) -> None:
    """The init container's command, then the gateway's own open_store, on a copy of the image's
    feature_repo/ with the rendered ConfigMap over its feature_store.redis.yaml: the feature
    service the gateway serves is in the registry. (Feast's apply needs no running Redis.)"""
    rel = render(chart, "ci/deployment-values", VALUE_SETS["ci/deployment-values"])
    pods = rel.pods("gateway")
    (init,) = pods.init_containers
    repo_in_image = rel.values["gateway"]["featureRepo"]
    repo = tmp_path / "feature_repo"
    shutil.copytree(REPO_ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    (config_map,) = rel.all("ConfigMap", "gateway")
    text = config_map["data"]["feature_store.redis.yaml"]
    registry_dir = str(Path(yaml.safe_load(text)["registry"]).parent)
    (tmp_path / "registry").mkdir()
    (repo / "feature_store.redis.yaml").write_text(text.replace(registry_dir, str(tmp_path / "registry")))
    env = {**os.environ, **env_of(init), "PYTHONPATH": str(REPO_ROOT)}
    assert init["command"][:2] == ["python", "-c"]
    script = init["command"][2].replace(repo_in_image, str(repo))
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=180, cwd=tmp_path)
    check = (
        "import sys; from feast_access.store import open_store; "
        "print(open_store(sys.argv[1], 'redis').get_feature_service('fraud_v1').name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", check, str(repo)],
        env=env,
        timeout=180,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "fraud_v1"


def test_shadow_settings_reach_the_gateway_only_when_set(chart: Chart) -> None:
    base = VALUE_SETS["deployment-pvc"]
    plain = render(chart, "no-shadow", base).gateway_env()
    assert "GATEWAY_SHADOW" not in plain and "GATEWAY_SHADOW_IN_FLIGHT" not in plain
    shadow = {
        "fraud": {"version": "2", "share": 0.25},
        "churn": {"model": "churn_challenger", "tolerance": 0.1},
    }
    env = render(chart, "shadow", {**base, "gateway": {"shadow": shadow}}).gateway_env()
    assert json.loads(env["GATEWAY_SHADOW"]) == shadow  # the gateway's JSON, defaults left to it
    assert env["GATEWAY_SHADOW_IN_FLIGHT"] == "64"
    tuned = {**base, "gateway": {"shadow": {"fraud": {}}, "shadowInFlight": 2000000}}
    env = render(chart, "shadow-tuned", tuned).gateway_env()
    assert json.loads(env["GATEWAY_SHADOW"]) == {"fraud": {}}
    assert env["GATEWAY_SHADOW_IN_FLIGHT"] == "2000000"


@pytest.mark.parametrize(
    ("shadow", "field"),
    [
        ({"fraud": {"share": 1.5}}, "share"),
        ({"fraud": {"version": 2}}, "version"),
        ({"fraud": {"tolerance": -0.1}}, "tolerance"),
        ({"fraud": {"shares": 0.5}}, "shares"),
    ],
    ids=["share-over-one", "version-not-a-string", "negative-tolerance", "unknown-key"],
)
def test_wrong_shadow_values_fail_against_the_schema(
    chart: Chart, shadow: dict[str, Any], field: str
) -> None:
    values = {**VALUE_SETS["deployment-pvc"], "gateway": {"shadow": shadow}}
    with pytest.raises(HelmValuesError, match=field):
        render(chart, "bad-shadow", values)
