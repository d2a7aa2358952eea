"""The gateway's evidence as deployed: the shared store (the chart's Redis: its memory bound and an
eviction policy that spares Feast's features, the prediction TTL), the fallback rules, and the
payload log (an object store, or a volume every replica shares), each as a user finds it in the
rendered manifests and as the gateway's own settings parse it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from helm_python import Chart, HelmValuesError

from gateway.quality.metrics import HIGHER_IS_BETTER
from gateway.settings import GatewaySettings
from support import servers
from tests.helm.helpers import (
    ALL_SETS,
    CHART_DIR,
    VALUE_SETS,
    Release,
    on,
    render,
)

BASE = VALUE_SETS["deployment-pvc"]
REDIS_SETS = [n for n in ALL_SETS if VALUE_SETS[n].get("redis", {}).get("enabled", True)]
# What a secretKeyRef resolves to in a pod; the chart never holds the value.
FROM_SECRET = "value-from-a-secret"


def _bytes(redis_size: str) -> int:
    """Redis' memory units: 1k = 1000, 1kb = 1024 (redis.conf), case-insensitive."""
    match = re.fullmatch(r"(\d+)([a-z]*)", redis_size.lower())
    assert match, redis_size
    number, unit = match.groups()
    scale = {"": 1, "b": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}
    return int(number) * scale[unit]


def _quantity(quantity: str) -> float:
    """A Kubernetes memory quantity in bytes (2Gi, 1536Mi, 2G)."""
    match = re.fullmatch(r"([\d.]+)([A-Za-z]*)", quantity)
    assert match, quantity
    number, unit = match.groups()
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    decimal = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    return float(number) * {**binary, **decimal}[unit]


def _secret_env(container: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env", []) if "valueFrom" in e}


def _pod_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the process sees it (a secret's value stands in)."""
    return {e["name"]: e.get("value", FROM_SECRET) for e in container.get("env", [])}


# --- the payload log ----------------------------------------------------------------------------


@on(*ALL_SETS)
def test_the_payload_log_is_off_unless_set_and_lands_where_configured(release: Release) -> None:
    log = release.values["gateway"]["payloadLog"]
    pods = release.pods("gateway")
    env = release.gateway_env()
    claims = release.all("PersistentVolumeClaim")
    if not (log["url"] or log["persistence"]["enabled"]):
        # payloads are user data: nothing logged, no credentials, no volume
        assert [k for k in env if k.startswith("GATEWAY_PAYLOAD_LOG")] == []
        assert "envFrom" not in pods.main and "AWS_ENDPOINT_URL" not in env
        assert claims == []
        return
    assert float(env["GATEWAY_PAYLOAD_LOG_SAMPLE"]) == log["sample"]
    assert int(env["GATEWAY_PAYLOAD_LOG_QUEUE_ROWS"]) == log["queueRows"]
    assert int(env["GATEWAY_PAYLOAD_LOG_FLUSH_ROWS"]) == log["flushRows"]
    assert float(env["GATEWAY_PAYLOAD_LOG_FLUSH_S"]) == log["flushSeconds"]
    assert float(env["GATEWAY_PAYLOAD_LOG_CLOSE_S"]) == log["closeSeconds"]
    if log["url"]:
        assert env["GATEWAY_PAYLOAD_LOG"] == log["url"]
        assert claims == []
        if log["existingSecret"]:  # every key of it becomes a variable pyarrow.fs reads
            assert pods.main["envFrom"] == [{"secretRef": {"name": log["existingSecret"]}}]
        if log["endpointUrl"]:
            assert env["AWS_ENDPOINT_URL"] == log["endpointUrl"]
        return
    # a volume: one claim, mounted writable where GATEWAY_PAYLOAD_LOG points, on every replica
    (claim,) = claims
    persistence = log["persistence"]
    assert claim["spec"]["accessModes"] == persistence["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["resources"]["requests"]["storage"] == persistence["size"]
    assert claim["spec"].get("storageClassName", "") == persistence["storageClassName"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volume = next(
        v
        for v in pods.spec["volumes"]
        if v.get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"]
    )
    mount = next(m for m in pods.main["volumeMounts"] if m["name"] == volume["name"])
    assert env["GATEWAY_PAYLOAD_LOG"] == mount["mountPath"] == "/var/lib/gateway/payload-log"
    assert not mount.get("readOnly")
    assert "AWS_ENDPOINT_URL" not in env and "envFrom" not in pods.main


def test_hashed_keys_take_the_salt_from_a_secret_key(chart: Chart) -> None:
    url = {"url": "gs://logs/payload-log", "existingSecret": "gcs-creds", "hashKeys": True}
    own = render(chart, "salt-in-log-secret", {**BASE, "gateway": {"payloadLog": url}})
    refs = _secret_env(own.pods("gateway").main)
    assert own.gateway_env()["GATEWAY_PAYLOAD_LOG_HASH_KEYS"] == "true"
    assert refs == {"GATEWAY_PAYLOAD_LOG_SALT": {"name": "gcs-creds", "key": "salt"}}
    salted = {**url, "salt": {"existingSecret": "payload-salt", "key": "hmac"}}
    other = render(chart, "salt-secret", {**BASE, "gateway": {"payloadLog": salted}})
    assert _secret_env(other.pods("gateway").main) == {
        "GATEWAY_PAYLOAD_LOG_SALT": {"name": "payload-salt", "key": "hmac"}
    }
    plain = render(chart, "no-hash", {**BASE, "gateway": {"payloadLog": {"url": "gs://logs/p"}}})
    assert "GATEWAY_PAYLOAD_LOG_HASH_KEYS" not in plain.gateway_env()
    assert _secret_env(plain.pods("gateway").main) == {}
    # a salt in the values themselves (and so in the release's history) is refused
    with pytest.raises(HelmValuesError, match="salt"):
        render(chart, "plain-salt", {**BASE, "gateway": {"payloadLog": {**url, "salt": "pepper"}}})


@on(*ALL_SETS)
def test_the_gateway_parses_what_the_chart_renders(release: Release, monkeypatch: pytest.MonkeyPatch) -> None:
    """The container's environment through the gateway's own settings: the fallback rules, the
    TTL and the payload log arrive as the gateway reads them, or it would not start."""
    import os

    for name in [n for n in os.environ if n.startswith("GATEWAY_")]:
        monkeypatch.delenv(name)
    for name, value in _pod_env(release.pods("gateway").main).items():
        monkeypatch.setenv(name, value)
    settings = GatewaySettings()
    gateway = release.values["gateway"]
    assert settings.state.ttl_s == gateway["stateTtlSeconds"]
    assert set(settings.fallback.rules) == set(gateway["fallback"])
    for model, rule in gateway["fallback"].items():
        assert settings.fallback.rules[model].model_dump(include=set(rule)) == rule
    log = gateway["payloadLog"]
    expected_log = log["url"] or ("/var/lib/gateway/payload-log" if log["persistence"]["enabled"] else None)
    assert settings.payload_log.url == expected_log
    assert settings.payload_log.hash_keys == (bool(expected_log) and log["hashKeys"])
    # the evidence goes to the Feast online store's Redis: no store of its own to configure
    assert (
        settings.state.url is None
        and settings.features.online_store == "redis"
        and settings.features.redis_url
    )


# --- the fallback rules and the TTL -------------------------------------------------------------


def test_fallback_rules_reach_the_gateway_as_json_only_when_set(chart: Chart) -> None:
    plain = render(chart, "no-fallback", BASE).gateway_env()
    assert "GATEWAY_FALLBACK" not in plain
    assert plain["GATEWAY_STATE_TTL_S"] == str(30 * 24 * 3600)  # always: 30 days by default
    rules = {
        "fraud-detector": {"version": "1", "metric": "auc", "threshold": 0.85, "min_labels": 500},
        "churn": {"model": "churn-baseline", "version": "3", "metric": "log_loss", "threshold": 0.4},
    }
    values = {**BASE, "gateway": {"fallback": rules, "stateTtlSeconds": 7 * 24 * 3600}}
    env = render(chart, "fallback", values).gateway_env()
    assert json.loads(env["GATEWAY_FALLBACK"]) == rules  # the gateway's keys, its defaults left to it
    assert env["GATEWAY_STATE_TTL_S"] == "604800"


def test_the_fallback_metrics_the_schema_allows_are_the_gateways() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    rule = schema["properties"]["gateway"]["properties"]["fallback"]["additionalProperties"]
    assert set(rule["properties"]["metric"]["enum"]) == set(HIGHER_IS_BETTER)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"gateway": {"fallback": {"fraud": {"version": "1"}}}}, "threshold"),
        ({"gateway": {"fallback": {"fraud": {"version": "1", "below": 0.8}}}}, "below"),
        ({"gateway": {"fallback": {"fraud": {"threshold": 0.8}}}}, "version"),
        ({"gateway": {"fallback": {"fraud": {"version": 1, "threshold": 0.8}}}}, "version"),
        ({"gateway": {"fallback": {"fraud": {"version": "1", "threshold": 0.8, "metric": "f1"}}}}, "metric"),
        (
            {"gateway": {"fallback": {"fraud": {"version": "1", "threshold": 0.8, "minLabels": 9}}}},
            "minLabels",
        ),
        ({"gateway": {"fallback": {"fraud": {"version": "1", "threshold": 0.8, "window": "1 h"}}}}, "window"),
        ({"gateway": {"stateTtlSeconds": 30}}, "stateTtlSeconds"),
        ({"gateway": {"payloadLog": {"url": "https://logs.example.com/p"}}}, "url"),
        ({"gateway": {"payloadLog": {"url": "s3://logs/p", "sample": 0}}}, "sample"),
        ({"gateway": {"payloadLog": {"persistence": {"accessModes": ["ReadWriteSome"]}}}}, "accessModes"),
        ({"redis": {"maxmemoryPolicy": "allkeys-lru"}}, "maxmemoryPolicy"),
        ({"redis": {"maxmemory": "2 GB"}}, "maxmemory"),
    ],
    ids=[
        "no-threshold",
        "below-is-not-the-gateways-key",
        "no-fallback-named",
        "version-not-a-string",
        "unknown-metric",
        "camel-case-min-labels",
        "bad-window",
        "ttl-under-a-minute",
        "not-an-object-store",
        "sample-zero",
        "unknown-access-mode",
        "policy-evicting-features",
        "maxmemory-not-redis-units",
    ],
)
def test_wrong_evidence_values_fail_against_the_schema(
    chart: Chart, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(HelmValuesError, match=re.escape(field)):
        render(chart, "bad-evidence", {**BASE, **overrides})


# --- the shared store: the chart's Redis ----------------------------------------------------------


@on(*REDIS_SETS)
def test_redis_is_bounded_under_its_limit_and_evicts_only_keys_with_a_ttl(release: Release) -> None:
    redis_values = release.values["redis"]
    container = release.pods("redis").main
    args = container["args"]
    maxmemory = args[args.index("--maxmemory") + 1]
    policy = args[args.index("--maxmemory-policy") + 1]
    assert (maxmemory, policy) == (redis_values["maxmemory"], "volatile-ttl")
    # Redis' bound sits under the container's limit (else the kernel kills it first) ...
    limit = _quantity(container["resources"]["limits"]["memory"])
    assert _bytes(maxmemory) < limit
    assert _quantity(container["resources"]["requests"]["memory"]) == limit  # never reclaimed
    # ... and the append-only file (base + increments) fits its volume
    if redis_values["persistence"]["enabled"]:
        (claim,) = release.one("StatefulSet", "redis")["spec"]["volumeClaimTemplates"]
        assert _quantity(claim["spec"]["resources"]["requests"]["storage"]) >= 2 * _bytes(maxmemory)
    # Feast writes its features without a TTL (no key_ttl_seconds in the profile): never evicted
    (config_map,) = release.all("ConfigMap", "gateway")
    profile = yaml.safe_load(config_map["data"]["feature_store.redis.yaml"])
    assert "key_ttl_seconds" not in profile["online_store"]


@pytest.mark.integration
def test_a_full_redis_with_the_charts_policy_evicts_evidence_never_features(
    chart: Chart, tmp_path: Path
) -> None:
    """A real redis-server with the chart's eviction policy, its bound scaled down to 2 MB: the
    gateway's evidence (hashes with a TTL) makes room; Feast's features (no TTL) all stay; with
    no evidence left to evict, a write fails loudly. With an allkeys policy features go."""
    args = render(chart, "redis-policy", BASE).pods("redis").main["args"]
    policy = args[args.index("--maxmemory-policy") + 1]

    def fill(client: redis.Redis) -> tuple[int, int]:
        """200 feature rows, then 20,000 remembered predictions: (features left, evictions)."""
        client.flushall()
        for row in range(200):
            client.hset(f"fraud:user_id:{row}", mapping={f"f{i}": "x" * 40 for i in range(10)})
        pipe = client.pipeline(transaction=False)
        for i in range(20_000):
            pipe.hset(
                f"gateway:p:{i:032x}", mapping={"m": "fraud-detector", "k": "fraud-detector:2", "a": "0.93"}
            )
            pipe.expire(f"gateway:p:{i:032x}", 30 * 24 * 3600)
        pipe.execute()
        features = sum(1 for _ in client.scan_iter("fraud:*", count=1000))
        return features, int(client.info("stats")["evicted_keys"])

    with servers.redis_server(tmp_path) as server:
        client = redis.Redis(port=server.port)
        client.config_set("maxmemory", "2mb")
        client.config_set("maxmemory-policy", policy)
        features, evicted = fill(client)
        assert features == 200 and evicted > 0
        # nothing volatile left: a write is refused, not a feature dropped
        client.delete(*client.keys("gateway:*"))
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for row in range(100_000):
                client.hset(f"fraud:user_id:{1000 + row}", mapping={f"f{i}": "x" * 40 for i in range(10)})
        assert sum(1 for _ in client.scan_iter("fraud:user_id:*", count=1000)) >= 200
        # what the schema refuses: an allkeys policy evicts features to keep evidence
        client.config_set("maxmemory-policy", "allkeys-lru")
        client.config_set("maxmemory", "2mb")
        features, _ = fill(client)
        assert features < 200
        client.close()
