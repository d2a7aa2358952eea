"""Rendering the chart with the real Helm library, and reading what it rendered.

Nothing here knows the template text: objects are found by kind and by the
`app.kubernetes.io/component` label, and expectations come from the merged values
(`Chart.merge_values`, Helm's own coalescing) or from other rendered objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python import Chart

from builder.release import schema as crd_schema

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "triton-stack"

KUBE_VERSION = "1.30"
RELEASE = "demo"
NAMESPACE = "serving"

S3_URI = "s3://models/triton-repo"

# The value sets a user would deploy with; every rendered-object test runs on the ones it concerns.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "kserve-canary": {
        "triton": {"mode": "kserve", "gpu": {"enabled": True, "count": 1}},
        "kserve": {"canary": {"enabled": True, "trafficPercent": 20}},
        "modelRepository": {"storageUri": S3_URI},
    },
    "kserve-stable": {
        "triton": {"mode": "kserve"},
        "kserve": {"canary": {"enabled": False}},
        "modelRepository": {"pvc": {"claimName": "model-repo", "subPath": "v3"}},
    },
    "deployment-pvc": {
        "triton": {"mode": "deployment"},
        "modelRepository": {"pvc": {"claimName": "triton-models", "subPath": "repo"}},
        "gateway": {"auth": {"apiKeys": ["key-one", "key-two"]}},
    },
    "deployment-object-storage": {
        "triton": {"mode": "deployment"},
        "modelRepository": {
            "storageUri": S3_URI,
            "sync": {"s3": {"endpointUrl": "http://minio.storage:9000"}},
        },
    },
    "gpu-on": {
        "triton": {
            "mode": "deployment",
            "gpu": {"enabled": True, "count": 2},
            "nodeSelector": {"pool": "inference"},
        },
        "modelRepository": {"pvc": {"claimName": "triton-models"}},
    },
    "gpu-off": {
        "triton": {"mode": "deployment", "gpu": {"enabled": False}},
        "modelRepository": {"pvc": {"claimName": "triton-models"}},
        "gateway": {"autoscaling": {"enabled": False}, "replicas": 3},
    },
    "monitoring-off": {
        "triton": {"mode": "kserve"},
        "modelRepository": {"storageUri": S3_URI},
        # no Prometheus Operator, no Grafana: none of their objects
        "monitoring": {
            "serviceMonitors": {"enabled": False},
            "prometheusRule": {"enabled": False},
            "dashboard": {"enabled": False},
        },
    },
    "redis-external": {
        "triton": {"mode": "deployment"},
        "modelRepository": {"storageUri": S3_URI},
        "redis": {"enabled": False, "external": {"url": "feast-redis.cache.svc:6379"}},
        "gateway": {"auth": {"existingSecret": "gateway-keys", "existingSecretKey": "keys.txt"}},
    },
    # the gateway's evidence: a fallback rule, a week's TTL in a larger Redis, the payload log in
    # an S3-compatible store with hashed keys
    "payload-log-s3": {
        "triton": {"mode": "deployment"},
        "modelRepository": {"storageUri": S3_URI},
        "gateway": {
            "stateTtlSeconds": 604800,
            "fallback": {
                "fraud-detector": {"version": "1", "metric": "auc", "threshold": 0.85, "min_labels": 500}
            },
            "payloadLog": {
                "url": "s3://fraud-logs/payload-log",
                "endpointUrl": "http://minio.storage:9000",
                "existingSecret": "payload-log-s3",
                "sample": 0.1,
                "hashKeys": True,
                "salt": {"existingSecret": "payload-log-salt", "key": "hmac-salt"},
            },
        },
        "redis": {
            "maxmemory": "4gb",
            "resources": {
                "requests": {"cpu": "250m", "memory": "6Gi"},
                "limits": {"cpu": "1", "memory": "6Gi"},
            },
            "persistence": {"size": "10Gi"},
        },
    },
    # ... or on a ReadWriteMany volume the chart creates, beside another model as a fallback
    "payload-log-volume": {
        "triton": {"mode": "kserve"},
        "modelRepository": {"pvc": {"claimName": "triton-models"}},
        "gateway": {
            "fallback": {
                "churn": {"model": "churn-baseline", "metric": "log_loss", "threshold": 0.45, "window": "6h"}
            },
            "payloadLog": {"persistence": {"enabled": True, "size": "200Gi", "storageClassName": "efs-sc"}},
        },
    },
}
# chart-testing's value files (helm/triton-stack/ci/*-values.yaml), one per supported mode, join
# the sets as "ci/<file stem>": every rendered-object test runs on them too.
CI_DIR = CHART_DIR / "ci"
CI_SETS = {f"ci/{p.stem}": yaml.safe_load(p.read_text()) for p in sorted(CI_DIR.glob("*-values.yaml"))}
VALUE_SETS |= CI_SETS
ALL_SETS = list(VALUE_SETS)
KSERVE_SETS = [n for n, v in VALUE_SETS.items() if v["triton"]["mode"] == "kserve"]
DEPLOYMENT_SETS = [n for n, v in VALUE_SETS.items() if v["triton"]["mode"] == "deployment"]

COMPONENT = "app.kubernetes.io/component"
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"


def on(*sets: str) -> pytest.MarkDecorator:
    """Run a test once per named value set, on the module-scoped `release` fixture."""
    return pytest.mark.parametrize("release", list(sets), indirect=True)


def subset(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether a matchLabels selector selects objects carrying `labels`."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def arg_value(args: list[str], flag: str) -> str | None:
    """The value of a `--flag=value` argument, or None."""
    prefix = f"{flag}="
    values = [a[len(prefix) :] for a in args if a.startswith(prefix)]
    return values[-1] if values else None


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def listening_ports(container: dict[str, Any]) -> dict[str | int, int]:
    """Ports a container listens on, by name and by number (Triton's flags included: in KServe
    mode only the serving port is declared, but HTTP and metrics still listen)."""
    ports: dict[str | int, int] = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    ports |= {p["containerPort"]: p["containerPort"] for p in container.get("ports", [])}
    for flag in ("--http-port", "--grpc-port", "--metrics-port"):
        if value := arg_value(container.get("args", []), flag):
            ports[int(value)] = int(value)
    return ports


@dataclass(frozen=True)
class Pods:
    """What a workload's pods look like: their labels and containers (init ones apart)."""

    labels: dict[str, str]
    containers: list[dict[str, Any]]
    init_containers: list[dict[str, Any]] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)

    @property
    def main(self) -> dict[str, Any]:
        assert len(self.containers) == 1, self.containers
        return self.containers[0]


@dataclass(frozen=True)
class Release:
    """One rendered value set."""

    set_name: str
    values: dict[str, Any]
    objects: list[dict[str, Any]]

    @property
    def kserve(self) -> bool:
        return bool(self.values["triton"]["mode"] == "kserve")

    @property
    def knative(self) -> bool:
        """KServe on Knative (Serverless, called Knative from KServe 0.15 on)."""
        return self.kserve and self.values["kserve"]["deploymentMode"] in ("Serverless", "Knative")

    def all(self, kind: str, component: str | None = None) -> list[dict[str, Any]]:
        return [
            o
            for o in self.objects
            if o["kind"] == kind
            and (component is None or o["metadata"]["labels"].get(COMPONENT) == component)
        ]

    def one(self, kind: str, component: str | None = None) -> dict[str, Any]:
        found = self.all(kind, component)
        assert len(found) == 1, f"expected one {kind} ({component}), got {len(found)}"
        return found[0]

    def pods(self, component: str) -> Pods:
        """The pods of a component, wherever they are declared."""
        if component == "triton" and self.kserve:
            # KServe builds the pod from the InferenceService predictor and its ServingRuntime.
            predictor = self.one("InferenceService")["spec"]["predictor"]
            runtime = self.all("ServingRuntime")
            containers = runtime[0]["spec"]["containers"] if runtime else [predictor["model"]]
            return Pods(predictor.get("labels", {}), containers, spec=predictor)
        kind = "StatefulSet" if component == "redis" else "Deployment"
        template = self.one(kind, component)["spec"]["template"]
        return Pods(
            template["metadata"]["labels"],
            template["spec"]["containers"],
            template["spec"].get("initContainers", []),
            template["spec"],
        )

    def gateway_env(self) -> dict[str, str]:
        return env_of(self.pods("gateway").main)


def render(chart: Chart, set_name: str, overrides: dict[str, Any]) -> Release:
    manifests = chart.render(overrides, name=RELEASE, namespace=NAMESPACE)
    objects = [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith((".yaml", ".yml"))
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    return Release(set_name, chart.merge_values(overrides), objects)


# --- KServe CRD schemas ------------------------------------------------------------------------

CRD_FILES = {
    "InferenceService": "serving.kserve.io_inferenceservices.yaml",
    "ServingRuntime": "serving.kserve.io_servingruntimes.yaml",
}


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """Schema violations, plus fields the API server would silently prune (typos): the same
    check ``builder release`` applies before it sends anything."""
    # $KSERVE_CRD_DIR, the shared data beside the checkout, else the vendored copy: always found
    path = crd_schema.find_crd(filename=CRD_FILES[obj["kind"]])
    assert path is not None, "builder/release/crds/ holds KServe's CRDs"
    schema = crd_schema.load_schema(path, obj["apiVersion"])
    return crd_schema.problems(obj, schema)
