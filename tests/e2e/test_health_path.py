"""From a failing health check to a drain and a cordon, through MQTT and the coordinator.

Each worker pod's agent runs a slurmd-alive check (and w-0's a mount check too) and publishes
its verdicts (retained) to a real mosquitto; the coordinator reads them, drains the SLURM
node for ``health:<cause>``, cordons and taints the K8s node and evicts the pod once. When
the same check fails on many nodes at once, the coordinator suspects the check and takes
nothing out. A hung mount drains for one stable cause that slonkd lifts when it answers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slonkd.testing.kube import KubeCluster
from slonkd.testing.kubelet import KubeletStandIn
from slonkd.testing.mosquitto import Mosquitto, MqttUser
from slonkd.testing.procs import die_with_parent, wait_for
from slonkd.testing.slurm import SlurmCluster, SlurmLayout
from slonkd.testing.workloads import worker_statefulset
from tests.e2e.conftest import PRESTOP, AgentProcess, marked_unhealthy, read_json_log

pytestmark = [pytest.mark.kube, pytest.mark.slurm, pytest.mark.mqtt]

NAMES = ("w-0", "w-1", "w-2", "w-3")


@dataclass(slots=True)
class HealthFleet:
    """Four workers with agents that publish health, and a coordinator that reads it."""

    kube: KubeCluster
    slurm: SlurmCluster
    namespace: str
    kube_nodes: list[str]
    agents: dict[str, AgentProcess]
    coordinator_log: Path
    mount_root: Path
    """w-0 checks the mount ``mount_root/sw/proc``; ``sw`` is a symlink to ``/`` (so the
    path is /proc, a responsive mount point) until a test points it elsewhere."""

    @property
    def mount(self) -> str:
        """The path w-0's mount check probes."""
        return str(self.mount_root / "sw" / "proc")

    def point_mount_at(self, target: Path) -> None:
        """Swap the ``sw`` symlink atomically (the next probe sees the new target)."""
        new = self.mount_root / "sw.new"
        new.unlink(missing_ok=True)
        new.symlink_to(target)
        new.replace(self.mount_root / "sw")

    def reason(self, node: str) -> str:
        """The node's reason text as SLURM shows it (without the ``[user@time]`` suffix)."""
        line = self.slurm.run("scontrol", "-o", "show", "node", node).stdout
        _, found, rest = line.partition(" Reason=")
        return rest.split(" [", 1)[0].strip() if found else ""

    def state(self, node: str) -> str:
        """The node's state as ``sinfo -N -o %T`` prints it (``idle``, ``drained`` ...)."""
        return self.slurm.node_states().get(node, "")

    def coordinator_events(self) -> list[dict[str, Any]]:
        """The coordinator's JSON log lines."""
        return read_json_log(self.coordinator_log)

    def kube_node_of(self, pod: str) -> str:
        """The K8s node a pod runs on."""
        return str(
            self.kube.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/{pod}")["spec"][
                "nodeName"
            ]
        )

    def knode(self, name: str) -> dict[str, Any]:
        """A K8s node's JSON."""
        return dict(self.kube.api.request("GET", f"/api/v1/nodes/{name}"))


@pytest.fixture
def health_fleet(
    kube: KubeCluster,
    namespace: str,
    unique: Callable[[str], str],
    slurm_factory: Callable[..., SlurmCluster],
    session_root: Path,
    tmp_path: Path,
) -> Iterator[HealthFleet]:
    """Workers w-0..w-3 on four kwok nodes with agents, mosquitto and a coordinator.

    The stand-in binds slurmd; each agent checks its slurmd every 0.3 s (2 failures of 3 make
    a fail, 2 passes clear it) and publishes its verdicts.
    """
    slurm = slurm_factory(SlurmLayout(nodes=NAMES, autostart=False))
    users = {"coordinator": MqttUser(password="coordinator-pw", acl=("topic readwrite slonk/#",))}
    users.update({n: MqttUser(password=f"{n}-pw") for n in NAMES})
    broker = Mosquitto(
        Path(tempfile.mkdtemp(prefix="hp-", dir=session_root)),
        users=users,
        patterns=("pattern write slonk/v1/+/nodes/%u/status",),
    )
    broker.start()
    label = {"slonk.dev/test": namespace}
    kube_nodes = kube.add_fake_nodes([unique(f"h{i}") for i in range(4)], labels=label)
    wait_for(
        "untainted",
        lambda: all(
            not kube.api.request("GET", f"/api/v1/nodes/{n}")["spec"].get("taints")
            for n in kube_nodes
        ),
        timeout_s=60,
    )
    mount_root = Path(tempfile.mkdtemp(prefix="m", dir="/tmp"))  # short: a readable cause
    (mount_root / "sw").symlink_to("/")
    standin = KubeletStandIn(kube=kube, slurm=slurm, namespace=namespace, root=tmp_path / "kubelet")
    standin.start()
    procs: list[subprocess.Popen[bytes]] = []
    agents: dict[str, AgentProcess] = {}
    try:
        sts = worker_statefulset("w", replicas=4, node_selector=label, grace_s=12, prestop=PRESTOP)
        sts["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"slonk.dev/pool": "w"}},
            }
        ]
        kube.api.request("POST", f"/apis/apps/v1/namespaces/{namespace}/statefulsets", sts)
        slurm.wait_idle(NAMES, timeout_s=60)
        mqtt = {"SLONKD_MQTT_HOST": broker.host, "SLONKD_MQTT_PORT": str(broker.port)}
        base = {
            **os.environ,
            **mqtt,
            "POD_NAMESPACE": namespace,
            "KUBECONFIG": str(kube.kubeconfig),
            "SLURM_CONF": str(slurm.conf),
        }
        for i, name in enumerate(NAMES):
            pod = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
            config = tmp_path / f"agent-{name}.json"
            config.write_text(
                json.dumps(
                    {
                        "health": {
                            "disk_paths": [],
                            "slurmd_port": slurm.slurmd_port + i,
                            "fast_period_s": 0.3,
                            "mounts": [str(mount_root / "sw" / "proc")] if i == 0 else [],
                            "mount_timeout_s": 2.0,
                        },
                        "hysteresis": {"fail_n": 2, "window_m": 3, "clear_k": 2},
                    }
                )
            )
            env = {
                **base,
                "POD_NAME": name,
                "NODE_NAME": pod["spec"]["nodeName"],
                "SLONKD_CONFIG": str(config),
                "SLONKD_MQTT_USER": name,
                "SLONKD_MQTT_PASSWORD": f"{name}-pw",
                "SLONKD_RESYNC_S": "2",
                "SLONKD_READY_FILE": str(tmp_path / f"ready-{name}"),
            }
            agents[name] = AgentProcess(env=env, log=tmp_path / f"agent-{name}.log")
            agents[name].start()
        config = tmp_path / "coordinator.json"
        config.write_text(
            json.dumps(
                {
                    "resync_s": 1,
                    "failure_grace_s": 1,
                    "max_out": 4,
                    "max_out_percent": 100,
                    "mass_percent": 100,
                    "suspect_min_nodes": 3,
                    "suspect_fraction": 0.5,
                    "lease_duration_s": 6,
                    "renew_deadline_s": 4,
                    "retry_period_s": 1,
                }
            )
        )
        env = {
            **base,
            "POD_NAME": "coordinator-0",
            "SLONKD_CONFIG": str(config),
            "SLONKD_MQTT_USER": "coordinator",
            "SLONKD_MQTT_PASSWORD": "coordinator-pw",
        }
        log = tmp_path / "coordinator.log"
        with log.open("ab") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "slonkd.cli.main", "coordinator"],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                )
            )
        fleet = HealthFleet(
            kube=kube,
            slurm=slurm,
            namespace=namespace,
            kube_nodes=kube_nodes,
            agents=agents,
            coordinator_log=log,
            mount_root=mount_root,
        )
        wait_for(
            "coordinator synced",
            lambda: any(e.get("event") == "coordinator.synced" for e in fleet.coordinator_events()),
            timeout_s=30,
        )
        yield fleet
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=15)
        for agent in agents.values():
            agent.stop()
        standin.stop()
        broker.stop()
        shutil.rmtree(mount_root, ignore_errors=True)


def test_failing_check_drains_cordons_and_evicts_once(health_fleet: HealthFleet) -> None:
    """slurmd dies under a Ready pod: drain, cordon, taint, condition, and one eviction.

    The agent's check fails; the coordinator drains the SLURM node for health:slurmd-dead,
    cordons, taints and marks the K8s node, and evicts the pod once.
    """
    f = health_fleet
    kube_node = f.kube_node_of("w-0")
    f.slurm.control({"op": "kill_slurmd", "node": "w-0"})

    def marked() -> bool:
        return marked_unhealthy(f.knode(kube_node))

    wait_for("K8s node marked unhealthy", marked, timeout_s=30)
    drains = [e for e in f.coordinator_events() if e.get("event") == "slurm.nodes_drain"]
    assert any(e["cause"] == "health:slurmd-dead" and "w-0" in e["nodes"] for e in drains)
    wait_for(
        "evicted once",
        lambda: any(e.get("event") == "kube.evict" for e in f.coordinator_events()),
        timeout_s=30,
    )
    time.sleep(3)
    assert len([e for e in f.coordinator_events() if e.get("event") == "kube.evict"]) == 1
    others = [e for e in f.coordinator_events() if e.get("event") == "kube.cordon"]
    assert {e["kube_node"] for e in others} == {kube_node}


def test_same_failure_on_many_nodes_suspects_the_check(health_fleet: HealthFleet) -> None:
    """Three of four slurmd die at once: the check is suspected, the breaker opens.

    At most two nodes go out (before the third verdict arrived), none after.
    """
    f = health_fleet
    for name in NAMES[:3]:
        f.slurm.control({"op": "kill_slurmd", "node": name})
    wait_for(
        "cause suspected",
        lambda: any(e.get("event") == "health.cause_suspected" for e in f.coordinator_events()),
        timeout_s=30,
    )
    time.sleep(2)
    events = f.coordinator_events()
    # Verdicts arrive one by one: nodes may go out until the count is reached, none after.
    cordoned = {e["kube_node"] for e in events if e.get("event") == "kube.cordon"}
    drained = {
        n
        for e in events
        if e.get("event") == "slurm.nodes_drain" and e["cause"].startswith("health")
        for n in e["nodes"]
    }
    assert len(cordoned) <= 2  # suspect_min_nodes - 1: taken out before the third verdict came
    assert len(drained) <= 2
    assert sum(bool(f.knode(n)["spec"].get("unschedulable")) for n in f.kube_nodes) <= 2
    # and the breaker opens: no automated action until a human has looked (slonkd budget reset)
    cm = f"/api/v1/namespaces/{f.namespace}/configmaps/slonkd-state"
    state = f.kube.api.request("GET", cm)["data"]
    assert state["breakerOpen"] == "true"
    assert "suspected" in state["breakerReason"]


def test_a_hung_home_drains_for_one_stable_cause_and_is_lifted_when_it_answers(
    health_fleet: HealthFleet,
) -> None:
    """A hung home drains its node for one stable cause, lifted when the mount answers.

    w-0's mount stops answering (a FIFO without a writer blocks the probe like a hung NFS
    server): w-0's agent publishes one fail verdict that the coordinator accepts, the
    coordinator drains w-0 for one cause ``slonkd:health:mount-...-deadline-missed`` that
    stays the same over further missed deadlines, and slonkd lifts its own drain once the
    mount answers again.
    """
    f = health_fleet
    check = f"mount:{f.mount}"
    detail = "mount-" + f.mount.strip("/").replace("/", "-") + "-deadline-missed"
    assert len(detail) <= 48  # short enough to stay readable (longer ones end in a hash)
    cause = f"health:{detail}"

    def published() -> list[str]:
        return [
            str(e["health"][check])
            for e in f.agents["w-0"].events()
            if e.get("event") == "agent.status_published" and check in e.get("health", {})
        ]

    wait_for("the mount is published ok", lambda: "ok" in published(), timeout_s=30)
    hung = f.mount_root / "hung"
    hung.mkdir()
    os.mkfifo(hung / "proc")
    f.point_mount_at(hung)
    wait_for(
        "w-0 drained for the hung home",
        lambda: f.reason("w-0").startswith(f"slonkd:{cause}") and f.state("w-0") == "drained",
        timeout_s=60,
    )
    time.sleep(6)  # three more missed deadlines: the cause must not change
    assert f.reason("w-0").startswith(f"slonkd:{cause}")
    assert {v for v in published() if v.startswith("fail")} == {f"fail:{detail}:manual"}
    events = f.coordinator_events()
    assert [e for e in events if e.get("event") == "bus.message_dropped"] == []
    drains = {
        e["cause"] for e in events if e.get("event") == "slurm.nodes_drain" and "w-0" in e["nodes"]
    }
    assert drains == {cause}
    f.point_mount_at(Path("/"))
    wait_for("w-0 resumed", lambda: f.state("w-0") == "idle", timeout_s=60)
    releases = [
        e
        for e in f.coordinator_events()
        if e.get("event") == "slurm.nodes_release" and "w-0" in e["nodes"]
    ]
    assert [e["cause"] for e in releases] == [cause]
    assert published()[-1] == "ok"
