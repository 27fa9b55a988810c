"""topology.conf from node labels, end to end: a real coordinator, kwok nodes, a real slurmctld.

The coordinator owns the topology ConfigMap; a stand-in for the kubelet's ConfigMap sync copies
its data into the file slurmctld reads, a second late (as a kubelet does). The coordinator must
wait for that copy before ``scontrol reconfigure``; `scontrol show topology` then matches the
labels. A relabel re-renders; a change that leaves the file the same does not reconfigure; a
pod that moves to another K8s node moves its SLURM node.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slonkd.core.topology import leaf_membership, stamped_hash
from slonkd_sandbox.daemon import Coordinators, Daemon, coordinator_env
from slonkd_sandbox.kube.api import ApiError
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import HarnessError, wait_for
from slonkd_sandbox.slurm.cluster import SlurmLayout
from slonkd_sandbox.workloads import spread_over_nodes, worker_statefulset
from tests.rig import OnRig, Rig

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

PODS = 4
KEYS = ("slonk.dev/zone", "slonk.dev/spine", "slonk.dev/leaf")
CONFIGMAP = "slonkd-topology"
SYNC_DELAY_S = 1.0


def _labels(leaf: str) -> dict[str, str]:
    return dict(zip(KEYS, ("z1", "s1", leaf), strict=True))


def _reconfigures(topo: Topo, n: int) -> Callable[[], bool]:
    return lambda: len(topo.events("topology.reconfigured")) == n


def _untainted(kube: KubeCluster, names: list[str]) -> bool:
    """True once no named node carries a taint the worker pods do not tolerate."""
    for name in names:
        taints = kube.api.request("GET", f"/api/v1/nodes/{name}")["spec"].get("taints") or ()
        if any(t["key"] != "kwok.x-k8s.io/node" for t in taints):
            return False
    return True


def _leaf(zone: str, spine: str, leaf: str) -> str:
    return f"l2-{zone}_{spine}_{leaf}"


class ConfigMapSync(threading.Thread):
    """The kubelet's part: copy the ConfigMap's topology.conf to slurmctld's file, late."""

    def __init__(self, kube: KubeCluster, namespace: str, target: Path) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace, self.target = kube, namespace, target
        self.stopped = threading.Event()
        self.copies = 0

    def run(self) -> None:
        """Poll the ConfigMap; copy a new content after the delay."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{CONFIGMAP}"
        while not self.stopped.wait(0.2):
            try:
                data = self.kube.api.request("GET", path).get("data") or {}
            except ApiError:
                continue  # not created yet
            text = data.get("topology.conf", "")
            current = self.target.read_text() if self.target.exists() else ""
            if text and text != current and not self.stopped.wait(SYNC_DELAY_S):
                self.target.write_text(text)
                self.copies += 1


@dataclass(slots=True)
class Topo(OnRig):
    """The cluster, the coordinator's log, and helpers."""

    kube_nodes: list[str]
    coordinator: Daemon | None = None

    def events(self, name: str) -> list[dict[str, Any]]:
        """The coordinator's log lines of one event."""
        assert self.coordinator is not None
        return self.coordinator.events(name)

    def shown(self) -> dict[str, str]:
        """``{SLURM node: leaf switch}`` as slurmctld runs it."""
        return leaf_membership(self.slurm.run("scontrol", "show", "topology").stdout)

    def placement(self) -> dict[str, str]:
        """``{pod: K8s node}`` of the live worker pods."""
        items = self.kube.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in items
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        }

    def label(self, node: str, labels: dict[str, str | None]) -> None:
        """Merge-patch a K8s node's labels (None removes one)."""
        self.kube.api.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )

    def expected(self, leaves: dict[str, str]) -> dict[str, str]:
        """``{SLURM node: leaf}`` from the pods' placement and each K8s node's leaf."""
        return {pod: leaves[node] for pod, node in self.placement().items()}


@pytest.fixture
def topo(
    rig: Rig,
    coordinators: Coordinators,
) -> Iterator[Topo]:
    """4 worker pods on 2 labelled kwok nodes, a tree-topology slurmctld, a coordinator."""
    names = tuple(f"w-{i}" for i in range(PODS))
    slurm = rig.slurm_factory(SlurmLayout(nodes=names, topology_plugin="topology/tree"))
    test_label = {"slonk.dev/test": rig.namespace}
    kube_nodes = [
        rig.kube.add_fake_nodes([rig.unique(f"t{leaf}")], labels={**test_label, **_labels(leaf)})[0]
        for leaf in ("l1", "l2")
    ]
    # Ready is not enough: a new node carries the not-ready taint until the node lifecycle
    # controller lifts it (6 of 10 still had it when seen Ready), and a tainted node gets no pod
    # (the soft spread then puts all four on the other one). The tests must not depend on the
    # spread either: the scheduler's cache may still lag.
    wait_for("both nodes schedulable", lambda: _untainted(rig.kube, kube_nodes), timeout_s=60)
    sts = worker_statefulset("w", replicas=PODS, node_selector=test_label, standin=False)
    spread_over_nodes(sts, when="ScheduleAnyway")  # a cordon must not block a move
    rig.create_statefulset(sts)
    t = Topo(rig=rig, slurm=slurm, kube_nodes=kube_nodes)
    wait_for("4 pods placed", lambda: len(t.placement()) == PODS, timeout_s=90)
    config = rig.tmp_path / "coordinator.json"
    config.write_text(
        json.dumps(
            {
                "resync_s": 5,
                "max_out": 0,  # this test is about topology: no automated drains
                "lease_duration_s": 6,
                "renew_deadline_s": 4,
                "retry_period_s": 1,
                "topology": {
                    "tree_keys": list(KEYS),
                    "configmap": CONFIGMAP,
                    "slurmctld_copy": str(slurm.topology_conf),
                    "debounce_s": 0.3,
                    "max_delay_s": 2,
                    "resync_s": 30,
                    "copy_timeout_s": 30,
                    "copy_poll_s": 0.2,
                    "min_reconfigure_interval_s": 1,  # a relabel right after the first
                },
            }
        )
    )
    env = coordinator_env(
        namespace=rig.namespace, kubeconfig=rig.kube.kubeconfig, slurm_conf=slurm.conf
    )
    sync = ConfigMapSync(rig.kube, rig.namespace, slurm.topology_conf)
    sync.start()
    try:
        t.coordinator = coordinators.start(env, config=config)
        yield t
    finally:
        coordinators.stop()
        sync.stopped.set()
        sync.join(timeout=5)


def test_labels_render_reconfigure_and_only_on_change(topo: Topo) -> None:
    """Labels -> ConfigMap -> (late) copy -> reconfigure -> show topology; again on relabel only.

    The relabelled node is one that hosts a worker pod: relabelling a node that hosts none
    changes no SLURM node, renders the same file and rightly does not reconfigure.
    """
    leaves = dict(
        zip(topo.kube_nodes, (_leaf("z1", "s1", "l1"), _leaf("z1", "s1", "l2")), strict=True)
    )
    b = topo.placement()["w-0"]  # hosts a pod, whatever the scheduler did
    (a,) = set(topo.kube_nodes) - {b}
    wait_for("first reconfigure", _reconfigures(topo, 1), timeout_s=40)
    assert topo.shown() == topo.expected(leaves)
    cm = topo.kube.api.request("GET", f"/api/v1/namespaces/{topo.namespace}/configmaps/{CONFIGMAP}")
    assert cm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "slonkd"
    published = stamped_hash(cm["data"]["topology.conf"])
    (first,) = topo.events("topology.reconfigured")
    assert published is not None
    assert published.startswith(first["sha256"])
    (copied,) = topo.events("topology.copy_current")
    assert copied["waited_s"] >= SYNC_DELAY_S * 0.9  # it waited for the late copy

    # relabel: b's leaf changes -> one more reconfigure, slurmctld follows
    topo.label(b, {KEYS[2]: "l3"})
    leaves[b] = _leaf("z1", "s1", "l3")
    try:
        wait_for("second reconfigure", _reconfigures(topo, 2), timeout_s=40)
    except HarnessError:
        assert topo.coordinator is not None
        topo.coordinator.signal(signal.SIGUSR1)  # its asyncio tasks, to its log
        time.sleep(1)
        raise AssertionError(topo.coordinator.log.read_text()[-15000:]) from None
    assert topo.shown() == topo.expected(leaves)

    # a label the topology does not read: rendered again, same file, no reconfigure
    before = len(topo.events("topology.unchanged"))
    topo.label(a, {"slonk.dev/unrelated": "x"})
    wait_for("re-rendered", lambda: len(topo.events("topology.unchanged")) > before, timeout_s=30)
    assert len(topo.events("topology.reconfigured")) == 2
    assert topo.shown() == topo.expected(leaves)


def test_a_pod_that_moves_moves_its_slurm_node(topo: Topo) -> None:
    """w-0 rescheduled onto the other K8s node: its SLURM node changes leaf."""
    a, b = topo.kube_nodes
    leaves = {a: _leaf("z1", "s1", "l1"), b: _leaf("z1", "s1", "l2")}
    wait_for("first reconfigure", _reconfigures(topo, 1), timeout_s=40)
    old = topo.placement()["w-0"]
    other = b if old == a else a
    topo.kube.api.request(
        "PATCH",
        f"/api/v1/nodes/{old}",
        {"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )
    topo.kube.api.request(
        "DELETE", f"/api/v1/namespaces/{topo.namespace}/pods/w-0", {"gracePeriodSeconds": 0}
    )
    wait_for("w-0 on the other node", lambda: topo.placement().get("w-0") == other, timeout_s=60)
    wait_for(
        "w-0 moved in slurmctld", lambda: topo.shown().get("w-0") == leaves[other], timeout_s=40
    )
    assert topo.shown() == topo.expected(leaves)
