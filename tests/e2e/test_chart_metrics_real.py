"""A real Prometheus scrapes the chart's coordinators and agents on the real node.

One ``helm install`` with the chart's default metrics values on a :class:`RealNode`, as
``test_chart_real`` installs it (:func:`slonkd_sandbox.chart.release.install`). Debian's
Prometheus (:mod:`slonkd_sandbox.prometheus`) runs inside the node's network namespace, as a
pod of the monitoring namespace would reach the pods: at their pod addresses and the ports
the chart names ``metrics`` (the coordinators) and ``agent-metrics`` (the agents), never a
ClusterIP. The live NetworkPolicy is read back: the metrics port's rule admits the monitoring
namespace, the API's does not. The node's bridge CNI enforces no NetworkPolicy, so a refused
stranger cannot be shown here (docs/threat-model.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slonkd_sandbox.chart.release import RELEASE, Obj, Release, install
from slonkd_sandbox.prometheus import Prometheus
from tests.e2e.chart_install import reported

pytestmark = [
    pytest.mark.kube,
    pytest.mark.real,
    pytest.mark.timeout(1500),
]


@pytest.fixture(scope="module")
def deployed(session_root: Path) -> Iterator[Release]:
    """The chart (default metrics values) installed on a fresh real node; every pod Ready."""
    with reported("chart-metrics", install(session_root, replicas=2)) as release:
        yield release


def _targets(pods: list[Obj], port_name: str) -> list[str]:
    """``podIP:port`` of the container port ``port_name`` of each pod."""
    found = []
    for pod in pods:
        spec = pod["spec"]
        ports = [
            p["containerPort"]
            for c in [*spec["containers"], *spec.get("initContainers", [])]
            for p in c.get("ports", [])
            if p.get("name") == port_name
        ]
        assert len(ports) == 1, f"{pod['metadata']['name']}: port {port_name}: {ports}"
        found.append(f"{pod['status']['podIP']}:{ports[0]}")
    return sorted(found)


def test_prometheus_scrapes_both_coordinators_and_every_agent_on_their_metrics_ports(
    deployed: Release, tmp_path: Path
) -> None:
    """Every target up; one ``slonkd_info`` per process; the fleet's families from one leader."""
    path = f"/apis/networking.k8s.io/v1/namespaces/{deployed.ns}/networkpolicies"
    policy = deployed.kube.api.request("GET", f"{path}/{RELEASE}-coordinator")
    rules = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    coordinators = deployed.pods(**{"app.kubernetes.io/component": "coordinator"})
    agents = deployed.pods(**{"app.kubernetes.io/component": "slurmd"})
    targets = {
        "coordinator": _targets(coordinators, "metrics"),
        "agent": _targets(agents, "agent-metrics"),
    }
    metrics_port = int(targets["coordinator"][0].rsplit(":", 1)[1])
    assert rules[metrics_port] == [monitoring]
    assert monitoring not in rules[8081]  # Prometheus's namespace never reaches the API
    prom = Prometheus(
        tmp_path / "prometheus",
        targets,
        wrap=deployed.node.nsexec(),
        host=deployed.node.node_ip,
    )
    with prom:
        prom.wait_scraped(timeout_s=90)
        assert len(prom.targets_up()) == len(coordinators) + len(agents) == 4
        info = prom.query("slonkd_info")
        roles = sorted(r["metric"]["role"] for r in info)
        assert roles == ["agent", "agent", "coordinator", "coordinator"]
        leaders = prom.query("count by (instance) (slonkd_fleet_nodes)")
        assert len(leaders) == 1  # a standby exports no fleet
        assert leaders[0]["metric"]["instance"] in targets["coordinator"]
