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
import time
from pathlib import Path
from typing import Any

import pytest

from slonkd.core.kube_actions import REBOOT_TAINT
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.control import control
from tests.e2e import health_path_fleet
from tests.e2e.conftest import marked_unhealthy
from tests.e2e.health_path_fleet import NAMES, FleetOptions, HealthFleet

pytestmark = [pytest.mark.kube, pytest.mark.slurm, pytest.mark.mqtt]

health_fleet = health_path_fleet.health_fleet


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
    drains = f.coordinator_events("slurm.nodes_drain")
    assert any(e["cause"] == "health:slurmd-dead" and "w-0" in e["nodes"] for e in drains)
    wait_for(
        "evicted once",
        lambda: bool(f.coordinator_events("kube.evict")),
        timeout_s=30,
    )
    time.sleep(3)
    assert len(f.coordinator_events("kube.evict")) == 1
    others = f.coordinator_events("kube.cordon")
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
        lambda: bool(f.coordinator_events("health.cause_suspected")),
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
    mount answers again (through ``revalidating``: the recheck's answer passes).
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
    # the health cause goes once revalidating holds (the node stays held: "other-causes"), and
    # revalidating goes on the recheck's passing answer: that release resumes the node, once
    assert [e["cause"] for e in releases] == ["revalidating"]
    assert any(
        e.get("event") == "slurm.nodes_release"
        and e["cause"] == cause
        and e["skipped"] == {"w-0": "other-causes"}
        for e in f.coordinator_events()
    )
    assert published()[-1] == "ok"


COOLDOWN_S = 20.0
"""The ladder test's ``remediation_cooldown_s``: long enough for a reboot and the checks on
the new boot (about 10 s here), short enough for a test."""


@pytest.mark.parametrize(
    "health_fleet",
    [FleetOptions(kube_nodes=2, gated=True, coordinator={"remediation_cooldown_s": COOLDOWN_S})],
    indirect=True,
)
def test_the_ladder_climbs_to_a_completed_reboot_and_the_node_returns(
    health_fleet: HealthFleet,
) -> None:
    """Health failures on one K8s node: restart the pod, then a reboot SLURM completes.

    Two worker pods share a K8s node. The first's slurmd check fails: its SLURM node is
    drained ``slonkd:health:slurmd-dead``, the K8s node cordoned, tainted, marked
    ``SlurmHealthy=False`` and the pod evicted once (attempt 1); the new pod lands on the
    other K8s node and returns to service there. The second pod's check fails during the
    cool-down: its node is drained, nothing more until the cool-down is over; then attempt 2
    is a reboot request: the ``slonk.dev/reboot-requested`` taint and annotation, an Event,
    and ``scontrol reboot ASAP`` sent (audited ``slurm-reboot``/``changed``). The
    RebootProgram runs once, slurmd comes back with a new boot time and SLURM returns the
    node to service. With the check passing on the new boot the second node is idle with
    nothing of slonkd's on it, and slonkd lifts every mark it put on the K8s node, the
    reboot request included; no third step (manual repair) is taken.
    """
    f = health_fleet
    kube_node = next(n for n in f.kube_nodes if len(f.pods_on(n)) >= 2)
    first, second = f.pods_on(kube_node)[:2]
    cause = "slonkd:health:slurmd-dead"
    log_dir = f.slurm.root / "log"

    def show(node: str) -> str:
        return f.slurm.run("scontrol", "-o", "show", "node", node).stdout

    def boot_time(node: str) -> str:
        return show(node).partition(" BootTime=")[2].split(" ", 1)[0]

    def slurmd_pid(node: str) -> int:
        running = control(f.slurm.socket_path, {"op": "status"})["running"]
        return int(running[f"slurmd-{node}"])

    def audited(action: str) -> list[dict[str, Any]]:
        return [a for a in f.audit_records() if a["action"] == action]

    def running_elsewhere(pod: str) -> bool:
        try:
            got = f.kube.api.request("GET", f"/api/v1/namespaces/{f.namespace}/pods/{pod}")
        except Exception:  # noqa: BLE001 - between the old pod and the new one
            return False
        return got["spec"].get("nodeName") not in (None, kube_node) and (
            got["status"].get("phase") == "Running"
        )

    def attempts() -> int:
        return int(
            json.loads(f.state_cm().get("remediation", "{}")).get(kube_node, {}).get("attempts", 0)
        )

    boot_before, pid_before = boot_time(second), slurmd_pid(second)
    # rung 1: the first pod's check fails -> drain, marks, one eviction
    f.gates[first].shut()
    wait_for(
        "first drained, K8s node marked, pod evicted",
        lambda: (
            f.reason(first).startswith(cause)
            and marked_unhealthy(f.knode(kube_node))
            and [a["node"] for a in audited("evict")] == [first]
            and attempts() == 1
        ),
        timeout_s=40,
    )
    evicted_at = audited("evict")[0]["ts"]
    f.gates[second].shut()  # the second pod fails during the cool-down
    # the first pod's successor lands on the other K8s node (the cordon keeps it away) ...
    wait_for(
        "first pod replaced on the other K8s node",
        lambda: running_elsewhere(first),
        timeout_s=60,
    )
    f.gates[first].open()  # ... where its slurmd answers: its new agent says so
    f.restart_agent(first)
    wait_for("first back in service", lambda: f.state(first) == "idle", timeout_s=60)
    assert "slonkd" not in show(first)

    # the cool-down: the second node is drained for its failure, no further step yet
    wait_for("second drained", lambda: f.reason(second).startswith(cause), timeout_s=30)
    (drained,) = [a for a in audited("drain") if a["node"] == second]
    assert drained["ts"] < evicted_at + COOLDOWN_S - 2  # it failed well inside the cool-down

    # rung 2: past the cool-down, a reboot request, and SLURM's reboot really sent
    def reboot_requested() -> bool:
        node = f.knode(kube_node)
        taints = {t["key"] for t in node["spec"].get("taints", [])}
        annotations = node["metadata"].get("annotations") or {}
        return REBOOT_TAINT in taints and REBOOT_TAINT in annotations

    wait_for("reboot requested", reboot_requested, timeout_s=COOLDOWN_S + 30)
    assert "attempt 2" in f.knode(kube_node)["metadata"]["annotations"][REBOOT_TAINT]
    reboots = audited("slurm-reboot")
    assert [(a["node"], a["outcome"]) for a in reboots] == [(second, "changed")], reboots
    assert reboots[0]["ts"] >= evicted_at + COOLDOWN_S - 1  # not before the cool-down ended
    # the history is persisted with the pass's state write, just after the actions
    wait_for("attempt 2 recorded", lambda: attempts() == 2, timeout_s=15)
    events = [
        e
        for ns in ("default", f.namespace)
        for e in f.kube.api.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    ]
    assert any(
        e.get("reason") == "SlurmRebootRequested" and e["involvedObject"]["name"] == kube_node
        for e in events
    )

    # the RebootProgram runs; slurmd comes back with a new boot time; SLURM completes it
    wait_for(
        "second rebooted",
        lambda: slurmd_pid(second) != pid_before and boot_time(second) not in ("", boot_before),
        timeout_s=45,
    )
    assert (log_dir / "reboot.log").read_text().count("reboot requested") == 1
    wait_for(
        "SLURM returned the node to service",
        lambda: (
            f"node {second} returned to service" in (log_dir / "slurmctld.log").read_text()
            and "REBOOT" not in show(second).partition(" State=")[2].split(" ", 1)[0]
        ),
        timeout_s=45,
    )

    # the check passes on the new boot: the node is back, slonkd's marks are gone
    f.gates[second].open()

    def lifted() -> bool:
        node = f.knode(kube_node)
        taints = {t["key"] for t in node["spec"].get("taints", [])}
        annotations = node["metadata"].get("annotations") or {}
        conds = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        return (
            not node["spec"].get("unschedulable")
            and not {k for k in taints | set(annotations) if k.startswith("slonk.dev/")}
            and conds.get("SlurmHealthy") == "True"
        )

    wait_for("second back in service", lambda: f.state(second) == "idle", timeout_s=30)
    wait_for("slonkd's marks lifted", lifted, timeout_s=30)
    time.sleep(3)  # a few more passes: nothing comes back
    assert f.state(second) == "idle"
    assert f.state(first) == "idle"
    assert "slonkd" not in show(second)
    assert "Reason=" not in show(second)
    assert lifted()
    assert audited("mark-manual") == []
    assert [a["node"] for a in audited("evict")] == [first]
    assert len(audited("slurm-reboot")) == 1
    assert attempts() == 2  # the history stays for the next failure on this hardware
