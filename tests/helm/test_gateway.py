"""The gateway as deployed: where it finds Triton and the online store, the feature specs its init
container compiles with the full image, its images and memory, its API keys, HPA and PDB."""

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
    # the serving image reads the specs the init container compiled from the full image's repo
    specs = env_of(_init(release, "feature-specs"))
    assert specs["GATEWAY_FEATURE_REPO"] == release.values["gateway"]["featureRepo"]
    assert specs["GATEWAY_ONLINE_STORE"] == "redis" and specs["GATEWAY_REDIS_URL"] == env["GATEWAY_REDIS_URL"]
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


def _init(release: Release, name: str) -> dict[str, Any]:
    (found,) = [c for c in release.pods("gateway").init_containers if c["name"] == name]
    return found


def _payload_log_on(release: Release) -> bool:
    log = release.values["gateway"]["payloadLog"]
    return bool(log["url"] or log["persistence"]["enabled"])


@on(*ALL_SETS)
def test_the_serving_image_serves_and_the_full_image_compiles_the_specs(
    release: Release, chart: Chart
) -> None:
    gateway = release.values["gateway"]
    pods = release.pods("gateway")
    version = chart.metadata["appVersion"]
    serving = f"{gateway['image']['repository']}:{gateway['image']['tag'] or version}"
    full = f"{gateway['fullImage']['repository']}:{gateway['fullImage']['tag'] or version}"
    assert (serving, full) == (f"triton-stack/gateway:{version}", f"triton-stack/gateway-full:{version}")
    # the payload log writes Parquet with pyarrow, which only the full image has
    assert pods.main["image"] == (full if _payload_log_on(release) else serving)
    # every init container reads Feast's registry: the full image, with its own resources
    names = [c["name"] for c in pods.init_containers]
    assert names == (
        ["feature-specs"] if gateway["feast"]["registry"] else ["feast-registry", "feature-specs"]
    )
    for init in pods.init_containers:
        assert init["image"] == full
        assert init["imagePullPolicy"] == gateway["fullImage"]["pullPolicy"]
        assert init["resources"] == gateway["featureSpecs"]["resources"]
        assert init["securityContext"] == gateway["securityContext"]


@on(*ALL_SETS)
def test_the_init_container_compiles_the_specs_into_the_folder_the_gateway_reads(release: Release) -> None:
    pods = release.pods("gateway")
    init = _init(release, "feature-specs")
    out = init["command"][init["command"].index("--out") + 1]
    assert init["command"][:2] == ["gateway", "compile-features"]
    (written,) = [m for m in init["volumeMounts"] if m["mountPath"] == out]
    volume = next(v for v in pods.spec["volumes"] if v["name"] == written["name"])
    assert "emptyDir" in volume  # the pod's own: compiled at every start, from this registry
    (read,) = [m for m in pods.main["volumeMounts"] if m["name"] == volume["name"]]
    assert read["readOnly"] is True
    assert release.gateway_env()["GATEWAY_FEATURE_SPECS"] == read["mountPath"]


@on(*ALL_SETS)
def test_the_redis_profile_is_mounted_where_feast_opens_it(release: Release) -> None:
    """The init containers (and the full image's gateway, which keeps the SDK's read for a service
    the compiler refused) open the Redis profile; the serving image's gateway has no Feast."""
    gateway = release.values["gateway"]
    pods = release.pods("gateway")
    (config_map,) = [c for c in release.all("ConfigMap", "gateway")]
    volume = next(
        v
        for v in pods.spec["volumes"]
        if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
    )
    opening = [*pods.init_containers, *([pods.main] if _payload_log_on(release) else [])]
    for container in opening:
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        # the file Feast opens for GATEWAY_ONLINE_STORE=redis inside GATEWAY_FEATURE_REPO
        assert mount["mountPath"] == f"{gateway['featureRepo']}/feature_store.redis.yaml"
        assert config_map["data"][mount["subPath"]]
        assert env_of(container)["REDIS_CONNECTION_STRING"] == release.gateway_env()["GATEWAY_REDIS_URL"]
    if not _payload_log_on(release):
        assert not any(m["name"] == volume["name"] for m in pods.main["volumeMounts"])
        assert not {"GATEWAY_FEATURE_REPO", "REDIS_CONNECTION_STRING"} & set(release.gateway_env())
    profile = yaml.safe_load(config_map["data"]["feature_store.redis.yaml"])
    assert profile["online_store"] == {"type": "redis", "connection_string": "${REDIS_CONNECTION_STRING}"}
    assert profile["project"] == gateway["feast"]["project"]
    if gateway["feast"]["registry"]:
        return
    # a pod-local registry must be written by the first init container, on a volume the next reads
    registry_dir = str(Path(profile["registry"]).parent)
    for container in pods.init_containers:
        assert any(m["mountPath"] == registry_dir for m in container["volumeMounts"]), container["name"]


@on(*ALL_SETS)
def test_the_gateway_container_is_sized_for_the_image_it_runs(release: Release) -> None:
    """The serving image's gateway is sized to its measured resident memory (docs/release.md:
    `make image-check` fails above the request); the full image's, with the payload log, to Feast's."""
    gateway = release.values["gateway"]
    resources = release.pods("gateway").main["resources"]
    on_full = _payload_log_on(release)
    assert resources == (gateway["payloadLog"]["resources"] if on_full else gateway["resources"])
    memory = {kind: _mebibytes(resources[kind]["memory"]) for kind in ("requests", "limits")}
    assert memory["requests"] <= memory["limits"]
    if not on_full:  # issue 33: the serving process resident in at most ~100 MiB
        assert memory["requests"] <= 128 and memory["limits"] <= 256


def _mebibytes(quantity: str) -> float:
    units = {"Ki": 2**-10, "Mi": 1, "Gi": 2**10}
    unit = quantity[-2:]
    return float(quantity[:-2]) * units[unit] if unit in units else float(quantity) / 2**20


def test_the_init_containers_compile_the_specs_from_the_rendered_redis_profile(
    chart: Chart, tmp_path: Path
) -> None:
    """The init containers' commands, on a copy of the full image's feature_repo/ with the rendered
    ConfigMap over its feature_store.redis.yaml: the registry's apply, then `gateway
    compile-features`, which writes the spec of the service the gateway serves, on the chart's
    Redis. (Neither needs a running Redis.)"""
    rel = render(chart, "ci/deployment-values", VALUE_SETS["ci/deployment-values"])
    registry_init, specs_init = _init(rel, "feast-registry"), _init(rel, "feature-specs")
    repo_in_image = rel.values["gateway"]["featureRepo"]
    repo = tmp_path / "feature_repo"
    shutil.copytree(REPO_ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    (config_map,) = rel.all("ConfigMap", "gateway")
    text = config_map["data"]["feature_store.redis.yaml"]
    registry_dir = str(Path(yaml.safe_load(text)["registry"]).parent)
    (tmp_path / "registry").mkdir()
    (repo / "feature_store.redis.yaml").write_text(text.replace(registry_dir, str(tmp_path / "registry")))
    in_image = {repo_in_image: str(repo)}
    env = {**os.environ, **env_of(registry_init), "PYTHONPATH": str(REPO_ROOT)}
    assert registry_init["command"][:2] == ["python", "-c"]
    script = registry_init["command"][2].replace(repo_in_image, str(repo))
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=180, cwd=tmp_path)

    specs = tmp_path / "specs"
    command = [str(specs) if arg == "/specs" else arg for arg in specs_init["command"]]
    assert command[:2] == ["gateway", "compile-features"]
    env = {**os.environ, **{k: in_image.get(v, v) for k, v in env_of(specs_init).items()}}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "gateway", *command[1:]],
        env=env,
        timeout=180,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((specs / "refused.json").read_text()) == {}
    spec = json.loads((specs / "fraud_v1.json").read_text())
    assert spec["project"] == rel.values["gateway"]["feast"]["project"]
    assert spec["store"]["type"] == "redis"
    assert spec["store"]["connection_string"] == rel.gateway_env()["GATEWAY_REDIS_URL"]


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
