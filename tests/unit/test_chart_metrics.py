"""The chart's metrics reachability: a metrics port, its NetworkPolicy rule, the monitors.

The coordinator's metrics port, the rule admitting the monitoring namespace to it, the
ServiceMonitor/PodMonitor (tests/unit/test_chart_render.py renders the rest).

The API port stays admitted to the worker pods only; the metrics port (plain HTTP,
``coordinator.metricsPort``) to the monitoring namespace only, by its
``kubernetes.io/metadata.name`` label. Whether a CNI enforces that is not tested here
(docs/threat-model.md); what the objects say is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.chart.helm import Helm
from tests.unit.test_chart_render import MULTI_POOL, helm, kinds, one, render

__all__ = ["helm"]  # the module's fixture, shared

Obj = dict[str, Any]
API, METRICS, AGENT = 8081, 9400, 9464
COMPONENT = "app.kubernetes.io/component"


def _rules_by_port(objs: list[Obj]) -> dict[int, list[Obj]]:
    """The coordinator policy's ingress rules, by the one port each admits to."""
    spec = one(objs, "NetworkPolicy", "rel-coordinator")["spec"]
    by_port: dict[int, list[Obj]] = {}
    for rule in spec["ingress"]:
        (port,) = rule["ports"]
        assert port["protocol"] == "TCP"
        by_port.setdefault(port["port"], []).append(rule)
    return by_port


@pytest.mark.parametrize("values", [(), (MULTI_POOL,)], ids=["default", "multi-pool"])
def test_the_monitoring_namespace_reaches_the_metrics_port_and_nothing_else(
    helm: Helm, values: tuple[Path, ...]
) -> None:
    """Defaults: one rule per port; the metrics port's names the namespace ``monitoring``.

    The API port's rule names worker pods only (no namespace peer); the metrics port's rule
    names only the monitoring namespace (no pod of the release, no ipBlock): Prometheus
    cannot reach the API, and the workers' rule does not reach the metrics port.
    """
    objs = render(helm, *values)
    by_port = _rules_by_port(objs)
    assert set(by_port) == {API, METRICS}
    (api,) = by_port[API]
    assert [set(peer) for peer in api["from"]] == [{"podSelector"}]
    assert api["from"][0]["podSelector"]["matchLabels"][COMPONENT] == "slurmd"
    (metrics,) = by_port[METRICS]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    pod = one(objs, "Deployment", "rel-coordinator")["spec"]["template"]["spec"]
    (coord,) = pod["containers"]
    assert {p["name"]: p["containerPort"] for p in coord["ports"]} == {
        "api": API,
        "metrics": METRICS,
    }
    config = json.loads(one(objs, "ConfigMap", "rel-coordinator")["data"]["config.json"])
    assert config["coordinator"]["metrics_port"] == METRICS
    assert config["coordinator"]["api_port"] == API
    svc = one(objs, "Service", "rel-coordinator")["spec"]["ports"]
    assert {"name": "metrics", "port": METRICS, "targetPort": "metrics"} in svc
    workers = one(objs, "Service", "rel-slurmd")["spec"]["ports"]
    assert {"name": "agent-metrics", "port": AGENT, "targetPort": "agent-metrics"} in workers
    assert kinds(objs, "ServiceMonitor") == []  # off by default
    assert kinds(objs, "PodMonitor") == []


def test_the_namespace_port_and_prometheus_pods_come_from_values(helm: Helm) -> None:
    """Another namespace, port and pod selector; "" renders no metrics rule at all."""
    objs = render(
        helm,
        set_json=(
            'metrics.monitoringNamespace="obs"',
            'metrics.monitoringPodSelector={"app.kubernetes.io/name":"prometheus"}',
            "coordinator.metricsPort=9500",
        ),
    )
    (metrics,) = _rules_by_port(objs)[9500]
    assert metrics["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    none = render(helm, set_json=('metrics.monitoringNamespace=""',))
    assert set(_rules_by_port(none)) == {API}


def test_scrape_annotations_name_the_metrics_port_in_plain_http(helm: Helm) -> None:
    """prometheus.io/port is the metrics port, with no https scheme even under tls.enabled."""
    tls_on = 'tls={"enabled":true,"secretName":"slonk-tls"}'
    objs = render(helm, set_json=("metrics.prometheusAnnotations=true", tls_on))
    ann = one(objs, "Deployment", "rel-coordinator")["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/port"] == str(METRICS)
    assert "prometheus.io/scheme" not in ann


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In"
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_monitors_render_when_enabled_with_the_ports_and_selector(helm: Helm, kind: str) -> None:
    """Each names the ports by name; its selector picks the coordinator's and workers' only."""
    key = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    objs = render(
        helm,
        MULTI_POOL,
        set_json=(
            f'metrics.{key}={{"enabled":true,"labels":{{"release":"kps"}},"interval":"30s"}}',
        ),
    )
    (monitor,) = kinds(objs, kind)
    assert monitor["metadata"]["name"] == "rel-slonkd"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    endpoints = monitor["spec"]["endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"]
    assert [(e["port"], e["path"], e["scheme"], e["interval"]) for e in endpoints] == [
        ("metrics", "/metrics", "http", "30s"),
        ("agent-metrics", "/metrics", "http", "30s"),
    ]
    selector = monitor["spec"]["selector"]
    if kind == "ServiceMonitor":
        picked = {
            s["metadata"]["name"]: {p["name"] for p in s["spec"]["ports"]}
            for s in kinds(objs, "Service")
            if _selects(selector, s["metadata"]["labels"])
        }
        assert picked == {
            "rel-coordinator": {"api", "metrics"},
            "rel-slurmd": {"slurmd", "agent-metrics"},
        }
    else:
        workloads = [o for o in objs if o["kind"] in ("StatefulSet", "Deployment")]
        picked_pods = {
            o["metadata"]["name"]
            for o in workloads
            if _selects(selector, o["spec"]["template"]["metadata"]["labels"])
        }
        assert picked_pods == {"rel-coordinator", "rel-h100", "rel-a100", "rel-cpu"}
        ports = {
            p["name"]
            for o in workloads
            if o["metadata"]["name"] in picked_pods
            for c in o["spec"]["template"]["spec"]["containers"]
            + o["spec"]["template"]["spec"].get("initContainers", [])
            for p in c.get("ports", [])
        }
        assert {"metrics", "agent-metrics"} <= ports
