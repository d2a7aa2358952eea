"""How the objects find each other: Service selectors and ports, ServiceMonitors, NetworkPolicy.
Every check compares one rendered object with another, never with template text."""

from __future__ import annotations

from typing import Any

from tests.helm.helpers import (
    ALL_SETS,
    COMPONENT,
    NAMESPACE,
    Release,
    arg_value,
    listening_ports,
    on,
    subset,
)


def _service_backends(release: Release, service: dict[str, Any]) -> list[str]:
    """The components whose pods a Service selects."""
    components = ["triton", "gateway"] + (["redis"] if release.values["redis"]["enabled"] else [])
    return [c for c in components if subset(service["spec"]["selector"], release.pods(c).labels)]


@on(*ALL_SETS)
def test_every_service_reaches_one_component_on_a_real_port(release: Release) -> None:
    for service in release.all("Service"):
        (component,) = _service_backends(release, service)
        assert component == service["metadata"]["labels"][COMPONENT]
        listening = listening_ports(release.pods(component).main)
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in listening, (service["metadata"]["name"], port)


@on(*ALL_SETS)
def test_service_monitors_scrape_triton_8002_and_the_gateway(release: Release) -> None:
    monitors = release.all("ServiceMonitor")
    if not release.values["monitoring"]["serviceMonitors"]["enabled"]:
        assert monitors == []
        return
    assert {m["metadata"]["labels"][COMPONENT] for m in monitors} == {"triton", "gateway"}
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        services = [
            s
            for s in release.all("Service")
            if subset(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        scraped = [p for s in services for p in s["spec"]["ports"] if p["name"] == endpoint["port"]]
        assert len(scraped) == 1, (monitor["metadata"]["name"], services)
        component = monitor["metadata"]["labels"][COMPONENT]
        pod_port = listening_ports(release.pods(component).main)[scraped[0]["targetPort"]]
        assert pod_port == (8002 if component == "triton" else 8080)


@on(*ALL_SETS)
def test_network_policy_lets_only_the_gateway_and_prometheus_reach_triton(
    release: Release,
) -> None:
    policy = release.one("NetworkPolicy")
    triton, gateway = release.pods("triton"), release.pods("gateway")
    assert subset(policy["spec"]["podSelector"]["matchLabels"], triton.labels)
    assert not subset(policy["spec"]["podSelector"]["matchLabels"], gateway.labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]

    netpol = release.values["networkPolicy"]
    gateway_rules, metrics_rules, system_rules = [], [], []
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from"), "a rule without `from` admits every pod in the cluster"
        for peer in rule["from"]:
            if set(peer) == {"podSelector"}:  # same namespace, by pod labels
                selected = [
                    c
                    for c in ("triton", "gateway", "redis")
                    if c != "redis" or release.values["redis"]["enabled"]
                    if subset(peer["podSelector"]["matchLabels"], release.pods(c).labels)
                ]
                assert selected == ["gateway"]
                gateway_rules.append(rule)
            elif peer.get("namespaceSelector") == netpol["metrics"]["namespaceSelector"]:
                assert peer["podSelector"] == netpol["metrics"]["podSelector"]
                metrics_rules.append(rule)
            else:
                namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                assert release.kserve and namespace in netpol["kserveSystemNamespaces"]
                system_rules.append(rule)
    assert len(gateway_rules) == 1 and len(metrics_rules) == 1

    metrics_port = int(arg_value(triton.main["args"], "--metrics-port") or 0)
    assert metrics_port == 8002
    assert metrics_rules[0]["ports"] == [{"port": metrics_port, "protocol": "TCP"}]
    if release.knative:
        assert system_rules  # Knative's activator and ingress sit in front of the predictor
    elif release.kserve:
        # Standard/RawDeployment: the gateway reaches the predictor pods directly, nothing else
        assert system_rules == []
    else:
        allowed = {p["port"] for p in gateway_rules[0]["ports"]}
        triton_url_port = int(release.gateway_env()["GATEWAY_TRITON_URL"].rpartition(":")[2])
        assert triton_url_port in allowed and metrics_port not in allowed
        assert allowed <= set(listening_ports(triton.main).values())
        assert system_rules == []
