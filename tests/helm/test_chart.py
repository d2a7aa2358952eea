"""The chart as a whole: `helm lint`, values checked against values.schema.json, and every
rendered object validated the way an API server would (Kubernetes 1.30 schemas through
kubernetes-validate, KServe's CRD openAPIV3Schema for InferenceService/ServingRuntime).

Helm here is the real library (helm-python-sdk, Helm v4 in-process); no cluster is involved.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
from helm_python import Chart, HelmRenderError, HelmValuesError, lint

from tests.helm.helpers import (
    ALL_SETS,
    CHART_DIR,
    CI_SETS,
    COMPONENT,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    S3_URI,
    VALUE_SETS,
    Release,
    crd_errors,
    on,
)

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# --- lint and values schema -------------------------------------------------------------------


@pytest.mark.parametrize("set_name", ALL_SETS)
def test_helm_lint_is_clean(set_name: str) -> None:
    report = lint(CHART_DIR, VALUE_SETS[set_name], strict=True, kube_version=f"v{KUBE_VERSION}.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], problems


def test_bare_defaults_ask_for_a_model_repository(chart: Chart) -> None:
    # Helm's lint mode turns `fail` into a log line, so only rendering reports this.
    with pytest.raises(HelmRenderError, match="modelRepository: set storageUri"):
        chart.render(name=RELEASE, namespace=NAMESPACE)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"triton": {"gpu": {"count": "two"}}}, "/triton/gpu/count"),
        ({"kserve": {"canary": {"trafficPercent": 150}}}, "/kserve/canary/trafficPercent"),
        ({"triton": {"mode": "k8s"}}, "/triton/mode"),
        ({"gateway": {"auth": {"apiKeys": "one-key"}}}, "/gateway/auth/apiKeys"),
        ({"triton": {"gpu": {"enable": True}}}, "enable"),  # a typo must not pass silently
        ({"triton": {"env": {"LANG": 8}}}, "/triton/env/LANG"),
        ({"triton": {"env": {"LC ALL": "C.UTF-8"}}}, "LC ALL"),
        (
            {"monitoring": {"prometheusRule": {"alerts": {"modelDrift": {"for": "30 minutes"}}}}},
            "/monitoring/prometheusRule/alerts/modelDrift/for",
        ),
        (
            {"monitoring": {"prometheusRule": {"alerts": {"gatewayErrors": {"ratio": 5}}}}},
            "/monitoring/prometheusRule/alerts/gatewayErrors/ratio",
        ),
    ],
    ids=[
        "wrong-type",
        "out-of-range",
        "not-in-enum",
        "string-for-list",
        "unknown-key",
        "env-number",
        "env-name",
        "alert-duration",
        "error-ratio-over-one",
    ],
)
def test_wrong_values_fail_against_the_schema(chart: Chart, overrides: dict[str, Any], field: str) -> None:
    values = {**VALUE_SETS["deployment-pvc"], **overrides}
    errors = "\n".join(lint(CHART_DIR, values)["errors"])
    assert field in errors
    with pytest.raises(HelmValuesError, match=re.escape(field)):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {
                "triton": {"mode": "kserve"},
                "kserve": {"canary": {"enabled": True}, "deploymentMode": "RawDeployment"},
                "modelRepository": {"storageUri": S3_URI},
            },
            "needs kserve.canary.storageUri",
        ),
        ({"modelRepository": {"storageUri": S3_URI, "pvc": {"claimName": "x"}}}, "not both"),
        ({"redis": {"enabled": False}}, "redis.external.url"),
        (
            {"triton": {"mode": "deployment"}, "modelRepository": {"storageUri": "https://example.com/repo"}},
            "s3:// or gs://",
        ),
        (
            {"gateway": {"payloadLog": {"url": "s3://logs/payload-log", "persistence": {"enabled": True}}}},
            "gateway.payloadLog: set either url (an object store) or persistence.enabled",
        ),
        (
            {"gateway": {"payloadLog": {"persistence": {"enabled": True}, "hashKeys": True}}},
            "gateway.payloadLog.hashKeys needs a salt",
        ),
        (
            {"gateway": {"payloadLog": {"url": "gs://logs/p", "endpointUrl": "http://minio:9000"}}},
            "needs an s3:// url",
        ),
    ],
    ids=[
        "standard-canary-without-candidate",
        "two-repositories",
        "no-online-store",
        "unsyncable-uri",
        "payload-log-in-two-places",
        "hashed-keys-without-salt",
        "endpoint-without-s3",
    ],
)
def test_impossible_combinations_fail_rendering(
    chart: Chart, overrides: dict[str, Any], message: str
) -> None:
    base = {"modelRepository": {"pvc": {"claimName": "triton-models"}}}
    with pytest.raises(HelmRenderError, match=re.escape(message)):
        chart.render({**base, **overrides}, name=RELEASE, namespace=NAMESPACE)


def test_ci_value_files_cover_every_supported_mode() -> None:
    modes = {
        name: (v["triton"]["mode"], v.get("kserve", {}).get("deploymentMode"), v["triton"].get("gpu", {}))
        for name, v in CI_SETS.items()
    }
    kserve = {m[1] for m in modes.values() if m[0] == "kserve"}
    assert {"Serverless", "Standard"} <= kserve or {"Serverless", "RawDeployment"} <= kserve, modes
    assert any(m[0] == "deployment" and not m[2].get("enabled") for m in modes.values()), modes
    assert any(m[2].get("enabled") for m in modes.values()), modes
    assert any(v.get("kserve", {}).get("canary", {}).get("storageUri") for v in CI_SETS.values())


# --- every object is valid -------------------------------------------------------------------


@on(*ALL_SETS)
def test_every_object_passes_its_api_schema(release: Release) -> None:
    errors = []
    for obj in release.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in ("InferenceService", "ServingRuntime"):
            errors += [f"{where}: {e}" for e in crd_errors(obj)]
        elif obj["kind"] in ("ServiceMonitor", "PrometheusRule"):
            continue  # Prometheus Operator CRDs: test_wiring.py and test_monitoring.py check them
        else:
            try:
                kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                errors.append(f"{where}: {'/'.join(map(str, exc.path))}: {exc.message}")
    assert errors == []


@on(*ALL_SETS)
def test_every_object_carries_the_standard_labels(release: Release, chart: Chart) -> None:
    for obj in release.objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == chart.name
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["helm.sh/chart"] == f"{chart.name}-{chart.version}"
        assert labels[COMPONENT] in {"triton", "gateway", "redis", "monitoring"}
        assert labels["app.kubernetes.io/version"]
        assert all(LABEL_VALUE.match(v) and len(v) <= 63 for v in labels.values()), labels
    # The version label tells which image runs: the component's own tag.
    for component in ("triton", "gateway"):
        image = release.pods(component).main.get("image")
        if image:
            version = release.pods(component).labels["app.kubernetes.io/version"]
            assert image.endswith(f":{version}")


@on(*ALL_SETS)
def test_every_container_has_requests_and_limits(release: Release) -> None:
    components = ["triton", "gateway"] + (["redis"] if release.values["redis"]["enabled"] else [])
    for component in components:
        pods = release.pods(component)
        for container in pods.containers + pods.init_containers:
            resources = container.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind, {})), (component, container)
