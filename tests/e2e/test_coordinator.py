"""slonkd coordinator end to end against the real services.

K8s maintenance is mirrored into SLURM in bulk, SLURM failures are marked on the K8s node and
remediated once, and operators' cordons are never undone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slonkd.testing.kube import KubeCluster
from slonkd.testing.procs import die_with_parent, wait_for
from slonkd.testing.slurm import SlurmCluster, SlurmLayout
from slonkd.testing.workloads import worker_statefulset
from tests.e2e.conftest import read_json_log

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

PODS = 20
KUBE_NODES = 10


@dataclass(slots=True)
class Fleet:
    """Worker pods spread over kwok nodes, their SLURM nodes, and a running coordinator."""

    kube: KubeCluster
    slurm: SlurmCluster
    namespace: str
    kube_nodes: list[str]
    log: Path

    def events(self) -> list[dict[str, Any]]:
        """The coordinator's JSON log lines."""
        return read_json_log(self.log)

    def pods_on(self, kube_node: str) -> list[str]:
        """Names of the live pods on ``kube_node``."""
        items = self.kube.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        return sorted(
            p["metadata"]["name"]
            for p in items
            if p["spec"].get("nodeName") == kube_node and not p["metadata"].get("deletionTimestamp")
        )

    def reasons(self) -> dict[str, str]:
        """``{slurm node: reason}`` (``none`` when there is none)."""
        out = self.slurm.run("sinfo", "-h", "-N", "-o", "%N|%E").stdout
        return dict(line.split("|", 1) for line in out.splitlines() if line)

    def knode(self, name: str) -> dict[str, Any]:
        """A K8s node's JSON."""
        return dict(self.kube.api.request("GET", f"/api/v1/nodes/{name}"))


@pytest.fixture
def fleet(
    kube: KubeCluster,
    namespace: str,
    unique: Callable[[str], str],
    slurm_factory: Callable[..., SlurmCluster],
    tmp_path: Path,
) -> Iterator[Fleet]:
    """20 worker pods on 10 kwok nodes, 20 idle slurmd, one coordinator with fast timings."""
    names = tuple(f"w-{i}" for i in range(PODS))
    slurm = slurm_factory(SlurmLayout(nodes=names))  # 20 idle slurmd: nothing is out at the start
    label = {"slonk.dev/test": namespace}
    kube_nodes = kube.add_fake_nodes([unique(f"c{i}") for i in range(KUBE_NODES)], labels=label)

    def untainted() -> bool:  # the node controller lifts not-ready taints shortly after Ready
        return all(
            not kube.api.request("GET", f"/api/v1/nodes/{n}")["spec"].get("taints")
            for n in kube_nodes
        )

    wait_for("kwok nodes untainted", untainted, timeout_s=60)
    sts = worker_statefulset("w", replicas=PODS, node_selector=label, standin=False)
    sts["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": {"slonk.dev/pool": "w"}},
        }
    ]
    kube.api.request("POST", f"/apis/apps/v1/namespaces/{namespace}/statefulsets", sts)

    def all_running() -> bool:
        items = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return bool(sum(p.get("status", {}).get("phase") == "Running" for p in items) == PODS)

    wait_for("20 pods Running", all_running, timeout_s=90)
    config = tmp_path / "coordinator.json"
    config.write_text(
        json.dumps(
            {
                "resync_s": 1,
                "failure_grace_s": 1,
                "unready_grace_s": 30,
                "max_out": 15,
                "lease_duration_s": 6,
                "renew_deadline_s": 4,
                "retry_period_s": 1,
            }
        )
    )
    env = {
        **os.environ,
        "POD_NAMESPACE": namespace,
        "POD_NAME": "coordinator-0",
        "KUBECONFIG": str(kube.kubeconfig),
        "SLURM_CONF": str(slurm.conf),
        "SLONKD_CONFIG": str(config),
    }
    log = tmp_path / "coordinator.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slonkd.cli.main", "coordinator"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
    f = Fleet(kube=kube, slurm=slurm, namespace=namespace, kube_nodes=kube_nodes, log=log)
    try:
        wait_for(
            "coordinator synced",
            lambda: any(e.get("event") == "coordinator.synced" for e in f.events()),
            timeout_s=30,
            alive=lambda: None if proc.poll() is None else log.read_text()[-2000:],
        )
        yield f
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_cordoned_k8s_nodes_drain_their_slurm_nodes_in_bulk(fleet: Fleet) -> None:
    """Cordon 5 K8s nodes: their pods' SLURM nodes drain in few calls; uncordon resumes them."""
    cordoned = fleet.kube_nodes[:5]
    with ThreadPoolExecutor(5) as pool:  # an operator's script cordoning a rack at once
        list(
            pool.map(
                lambda n: fleet.kube.api.request(
                    "PATCH",
                    f"/api/v1/nodes/{n}",
                    {"spec": {"unschedulable": True}},
                    content_type="application/merge-patch+json",
                ),
                cordoned,
            )
        )
    affected = sorted(p for n in cordoned for p in fleet.pods_on(n))
    assert 2 <= len(affected) < PODS  # the scheduler spread them; the rest stay untouched

    def drained() -> bool:
        reasons = fleet.reasons()
        return all(reasons.get(n, "").startswith("slonkd:k8s-cordoned") for n in affected)

    wait_for("their SLURM nodes drained", drained, timeout_s=20)
    others = [n for n, r in fleet.reasons().items() if n not in affected]
    assert all(fleet.reasons()[n] == "none" for n in others)
    drains = [e for e in fleet.events() if e.get("event") == "slurm.nodes_drain"]
    placement = {n: fleet.pods_on(n) for n in fleet.kube_nodes}
    assert sorted(n for e in drains for n in e["nodes"]) == affected, placement
    assert len(drains) <= 3  # bulk: all of them in at most 3 hostlist updates
    assert all(e["calls"] <= 2 for e in drains)  # each: one fresh read, one update
    # the admin's cordons are the admin's: never undone by slonkd
    assert all(fleet.knode(n)["spec"].get("unschedulable") for n in cordoned)
    for node in cordoned:
        fleet.kube.kubectl("uncordon", node)
    wait_for(
        "resumed", lambda: all(fleet.reasons().get(n) == "none" for n in affected), timeout_s=20
    )


def test_slurm_failure_cordons_taints_marks_and_evicts_once(fleet: Fleet) -> None:
    """A SLURM-reported failure on a settled pod marks its K8s node and evicts the pod once.

    Cordon, slonk.dev taint, SlurmHealthy=False, an Event, one eviction; the evicted pod's
    replacement elsewhere is not blamed for the old failure.
    """
    victim = "w-3"
    kube_node = next(n for n in fleet.kube_nodes if victim in fleet.pods_on(n))
    fleet.slurm.run(
        "scontrol", "update", f"nodename={victim}", "state=fail", "reason=Kill task failed"
    )

    def marked() -> bool:
        node = fleet.knode(kube_node)
        taints = {t["key"] for t in node["spec"].get("taints", [])}
        conds = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        return (
            bool(node["spec"].get("unschedulable"))
            and "slonk.dev/unhealthy" in taints
            and conds.get("SlurmHealthy") == "False"
        )

    wait_for("K8s node marked", marked, timeout_s=20)
    assert fleet.knode(kube_node)["metadata"]["annotations"].get("slonk.dev/cordoned-by")
    wait_for(
        "evicted", lambda: any(e.get("event") == "kube.evict" for e in fleet.events()), timeout_s=20
    )
    events = (
        fleet.kube.api.request("GET", "/api/v1/namespaces/default/events")["items"]
        + fleet.kube.api.request("GET", f"/api/v1/namespaces/{fleet.namespace}/events")["items"]
    )
    assert any(
        e.get("reason") == "SlurmUnhealthy" and e["involvedObject"]["name"] == kube_node
        for e in events
    )
    # the replacement pod settles elsewhere; nothing else is cordoned, and no second eviction
    wait_for(
        "replacement running",
        lambda: any(victim in fleet.pods_on(n) for n in fleet.kube_nodes if n != kube_node),
        timeout_s=30,
    )
    time.sleep(4)
    evictions = [e for e in fleet.events() if e.get("event") == "kube.evict"]
    assert len(evictions) == 1
    cordons = [e for e in fleet.events() if e.get("event") == "kube.cordon"]
    assert {e["kube_node"] for e in cordons} == {kube_node}
    assert fleet.reasons()[victim] == "Kill task failed"  # SLURM's reason: slonkd never clears it
