"""Helpers of the chart's tests: rendering the chart with the real Helm library and reading what it
rendered (objects found by kind and by the `app.kubernetes.io/component` label, expectations from the
merged values, never the template text); what the stack exports, which the chart's alerts, rules and
dashboard may read; and running the chart's PrometheusRule under promtool (rule files, synthetic
series, `promtool test rules` expectations). The fixtures built on these are in conftest.py.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from helm_python import Chart
from prometheus_client.metrics import MetricWrapperBase

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


# Every metric family Triton 2.51 (NGC 24.10, the chart's image) serves on :8002 for a loaded model
# on CPU, as its embedded server listed them; the GPU families (nv_gpu_*) come only with a GPU, and
# the dashboard reads GPU use from DCGM instead.
TRITON_METRICS = {
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_cpu_utilization",
    "nv_cpu_memory_total_bytes",
    "nv_cpu_memory_used_bytes",
}
# NVIDIA dcgm-exporter's field names (DCGM_FI_DEV_GPU_UTIL, ...).
DCGM_METRIC = re.compile(r"^DCGM_FI_[A-Z0-9_]+$")
_SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
}


# A module-level prometheus_client collector: `NAME = Counter(` (gateway/metrics.py,
# gateway/quality/prom.py, ...).
_COLLECTOR = re.compile(r"^[A-Z_][A-Z0-9_]*\s*=\s*(Counter|Gauge|Histogram)\(", re.MULTILINE)
# The metrics of the gateway's automatic fallback and shared store (the issue "one truth across
# replicas"), as the chart's fallback alerts read them: name -> (type, labels). Gauges come from
# the shared store, so every replica exports the same value. Being built in gateway/ alongside
# the chart: test_fallback_alerts.py::test_the_fallback_alerts_read_metrics_the_gateway_exports
# holds the two together.
FALLBACK_METRICS: dict[str, tuple[str, frozenset[str]]] = {
    "gateway_fallback_active": ("gauge", frozenset({"model", "fallback"})),
    "gateway_fallback_quality": ("gauge", frozenset({"model", "version", "metric"})),
    "gateway_fallback_margin": ("gauge", frozenset({"model", "metric"})),
    "gateway_fallback_labeled_rows": ("gauge", frozenset({"model"})),
    "gateway_fallback_switches_total": ("counter", frozenset({"model", "to"})),
    "gateway_evidence_lost_total": ("counter", frozenset({"model", "what"})),
}


def gateway_collectors() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every module-level collector in gateway/: family name -> (type, label names)."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for path in sorted((REPO_ROOT / "gateway").rglob("*.py")):
        if not _COLLECTOR.search(path.read_text()):
            continue
        module = importlib.import_module(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))
        for collector in vars(module).values():
            if isinstance(collector, MetricWrapperBase):
                for family in collector.describe():
                    found[family.name] = (family.type, tuple(collector._labelnames))
    return found


@cache
def gateway_metrics() -> frozenset[str]:
    """Series names the gateway exports: its modules' collectors (gateway/metrics.py,
    gateway/quality/prom.py, ...), the drift metrics docs/drift.md section 2 fixes (the table is
    the contract the drift code implements), and the fallback metrics above."""
    names: set[str] = set(FALLBACK_METRICS)
    for name, (kind, _) in gateway_collectors().items():
        names |= {name + s for s in _SAMPLE_SUFFIXES[kind]}
    doc = (REPO_ROOT / "docs" / "drift.md").read_text()
    section = doc.split("## 2.", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| `(gateway_\w+)` \| (counter|gauge) \|", section, re.MULTILINE)
    assert len(table) >= 5, "docs/drift.md section 2 lists the drift metrics"
    return frozenset(names | {name for name, _ in table})


def unknown_metrics(names: set[str]) -> set[str]:
    known = gateway_metrics() | TRITON_METRICS
    return {n for n in names if n not in known and not DCGM_METRIC.match(n)}


def gateway_error_causes() -> set[str]:
    """Every `cause` the gateway's code can put on gateway_errors_total."""
    source = "\n".join(p.read_text() for p in sorted((REPO_ROOT / "gateway").rglob("*.py")))
    return set(re.findall(r"""\bcause\s*=\s*"(\w+)\"""", source))


BASE = {"modelRepository": {"pvc": {"claimName": "triton-models"}}}
HOURS = 3  # every series runs 3 h at a 1 m interval: the 1 h windows fill, the `for`s pass
STEPS = HOURS * 60


def find_promtool() -> str:
    """promtool (Debian package prometheus), installed by `make prometheus` (a `make test` step)."""
    found = shutil.which("promtool")
    if found is None:
        subprocess.run(["make", "-s", "prometheus"], cwd=REPO_ROOT, check=False, timeout=600)
        found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing and `make prometheus` could not install it (not root?)")
    return found


def write_rule_files(release: Release, folder: Path) -> dict[str, Path]:
    """The PrometheusRule's groups as Prometheus rule files: as shipped ("full"), and without
    annotations ("bare": promtool compares alert annotations verbatim, so the unit tests run on
    this copy; `promtool check rules` checks the annotation templates on the full one)."""
    (rule,) = release.all("PrometheusRule")
    groups = rule["spec"]["groups"]
    full, bare = folder / "rules.yaml", folder / "rules-bare.yaml"
    full.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    stripped = [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in groups
    ]
    bare.write_text(yaml.safe_dump({"groups": stripped}, sort_keys=False))
    return {"full": full, "bare": bare}


def selector_labels(expr: str, metric: str) -> dict[str, str]:
    """The label matchers of the first selector of `metric` in `expr`."""
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name == metric:
            found.append(node)

    promql_parser.walk(promql_parser.parse(expr), visit)
    assert found, (metric, expr)
    return {m.name: m.value for m in found[0].matchers.matchers if m.name != "__name__"}


def run_promtool(promtool: str, rules: Path, tests: list[dict[str, Any]], tmp_path: Path) -> None:
    spec = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# --- series -------------------------------------------------------------------------------------


def labels_text(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    return {"series": name + labels_text(labels), "values": values}


def counter(labels: dict[str, str], name: str, per_minute: float) -> dict[str, str]:
    return series(name, labels, f"0+{float(per_minute)!r}x{STEPS}")


def gauge(labels: dict[str, str], name: str, value: float) -> dict[str, str]:
    return series(name, labels, f"{float(value)!r}+0x{STEPS}")


def replica(target: dict[str, str], index: int, port: int = 8080) -> dict[str, str]:
    """A scraped pod's target labels, as a ServiceMonitor gives them."""
    return {
        **target,
        "pod": f"{target.get('job', 'gateway')}-{index}",
        "instance": f"10.0.0.{index + 10}:{port}",
        "service": target.get("job", "gateway"),
        "endpoint": "http",
        "container": "main",
    }


def replica_common(gw: dict[str, str]) -> dict[str, str]:
    """The target labels every replica shares, which survive `sum without (pod, instance)`."""
    shared = replica(gw, 0)
    return {k: v for k, v in shared.items() if k not in ("pod", "instance")}


def rounded(value: float) -> float:
    """PromQL's round(v, 0.001)."""
    return math.floor(value * 1000 + 0.5) / 1000


def firing(alert: str, at: str, *labelsets: dict[str, str]) -> dict[str, Any]:
    """An alert_rule_test: exactly these alerts firing at `at` (none: quiet, or only pending)."""
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": ls} for ls in labelsets]}


def evaluates(expr: str, at: str, *samples: tuple[dict[str, str], float]) -> dict[str, Any]:
    """A promql_expr_test: `expr` at `at` gives exactly these (labels, value) samples."""
    exp = [{"labels": labels_text(labels), "value": value} for labels, value in samples]
    return {"expr": expr, "eval_time": at, "exp_samples": exp}
