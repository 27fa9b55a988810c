"""The coordinator where counts matter: 100 worker pods on 100 kwok nodes.

One SLURM node has a real slurmd; the other 99 are declared without one (state UNKNOWN,
no reason), which SLURM drains, resumes and fails like any other. One pod per K8s node, so
a K8s node and a SLURM node are counted the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from slonkd.core.log_events import COORDINATOR_SYNCED
from slonkd_sandbox.daemon import Coordinators
from slonkd_sandbox.fleet import LEASE_TIMINGS, FleetShape
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.workloads import spread_over_nodes
from tests.e2e.conftest import set_unschedulable
from tests.rig import OnRig, Rig

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

PODS = 100
CONFIG: dict[str, Any] = {
    "resync_s": 5,
    "failure_grace_s": 1,
    "unready_grace_s": 3600,
    "remediate": False,
    **LEASE_TIMINGS,
    "api_host": "127.0.0.1",
    "api_port": 0,
}


@dataclass(slots=True)
class BigFleet(OnRig):
    """100 pods on 100 kwok nodes, their SLURM nodes, and the coordinator processes."""

    placement: dict[str, str]
    """SLURM node (pod) -> K8s node."""
    env: dict[str, str]
    coordinators: Coordinators
    """The first is the fleet's; a test starts a standby."""

    def events(self, name: str) -> list[dict[str, Any]]:
        """The first coordinator's log lines of event ``name``."""
        return self.coordinators[0].events(name)

    def reasons(self) -> dict[str, str]:
        """``{slurm node: reason}`` (``none`` when there is none)."""
        out = self.slurm.run("sinfo", "-h", "-N", "-o", "%N|%E").stdout
        return dict(line.split("|", 1) for line in out.splitlines() if line)

    def _nodes(self) -> list[dict[str, Any]]:
        """The fleet's K8s nodes (JSON)."""
        mine = set(self.placement.values())
        items = self.kube.api.request("GET", "/api/v1/nodes")["items"]
        return [n for n in items if n["metadata"]["name"] in mine]

    def cordoned(self) -> set[str]:
        """K8s nodes of the fleet that are cordoned."""
        return {n["metadata"]["name"] for n in self._nodes() if n["spec"].get("unschedulable")}

    def tainted(self) -> set[str]:
        """K8s nodes of the fleet that carry slonkd's failure taint (or any NoSchedule of ours)."""
        return {
            n["metadata"]["name"]
            for n in self._nodes()
            if any(t["key"].startswith("slonk.dev/") for t in n["spec"].get("taints") or [])
        }

    def state(self) -> dict[str, str]:
        """The coordinator's state ConfigMap data."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/slonkd-state"
        return dict(self.kube.api.request("GET", path).get("data") or {})


@pytest.fixture
def big_config() -> dict[str, Any]:
    """The coordinator's settings (tests override)."""
    return dict(CONFIG)


@pytest.fixture
def big_fleet(
    rig: Rig,
    big_config: dict[str, Any],
    coordinators: Coordinators,
) -> BigFleet:
    """100 pods, one per kwok node, 1 real slurmd and 99 declared SLURM nodes; a coordinator."""
    shape = FleetShape(
        slurmds=1, declared=PODS - 1, kube_nodes=PODS, slurmd_timeout_s=3600, coordinator=big_config
    )
    slurm = rig.slurm_factory(shape.layout())
    build = rig.fleet(shape)
    kube_nodes = build.add_kube_nodes("s", untainted_s=None)
    sts = build.statefulset(standin=False)
    spread_over_nodes(sts)
    build.create(sts)
    placement = build.wait_running(f"{PODS} pods Running", timeout_s=180)
    assert len(set(placement.values())) == PODS  # one pod a K8s node
    assert set(placement.values()) <= set(kube_nodes)
    time.sleep(2)  # Ready for longer than failure_grace_s
    config = build.coordinator_config(rig.tmp_path / "coordinator.json")
    env = build.coordinator_env(slurm.conf, SLONKD_CONFIG=str(config))
    coordinators.start(env, timeout_s=60)  # until it is synced; stopped at the end
    return BigFleet(
        rig=rig,
        slurm=slurm,
        placement=placement,
        env=env,
        coordinators=coordinators,
    )


# "a few bulk calls" needs the 50 cordons (8 threads of PATCHes, 1 to 3 s on 2 busy cores) to
# land in a pass or two: a debounce of 0.5 s (the default 0.05 s cut the burst into 7 calls,
# once in a serial run here) and, beside parallel workers, no other test running
@pytest.mark.alone
@pytest.mark.parametrize(
    "big_config",
    [{**CONFIG, "max_out": 60, "max_out_percent": 100, "mass_percent": 100, "debounce_s": 0.5}],
)
def test_cordon_50_k8s_nodes_drains_50_slurm_nodes_in_few_bulk_calls(big_fleet: BigFleet) -> None:
    """An operator cordons 50 K8s nodes at once: 50 SLURM drains in a few hostlist calls."""
    f = big_fleet
    pods = sorted(f.placement, key=lambda p: int(p.split("-")[1]))
    chosen = pods[::2]  # every other pod: the hostlist cannot collapse into one range
    set_unschedulable(f.kube, [f.placement[p] for p in chosen])

    def drained() -> bool:
        reasons = f.reasons()
        return all(reasons[p].startswith("slonkd:k8s-cordoned") for p in chosen)

    wait_for("50 drained", drained, timeout_s=60)
    reasons = f.reasons()
    assert all(reasons[p] == "none" for p in pods if p not in chosen)
    drains = f.events("slurm.nodes_drain")
    assert sorted(n for e in drains for n in e["nodes"]) == sorted(chosen)
    assert sum(e["calls"] for e in drains) <= 6, drains  # a few bulk calls, not 50
    set_unschedulable(f.kube, [f.placement[p] for p in chosen], on=False)
    wait_for("resumed", lambda: all(f.reasons()[p] == "none" for p in chosen), timeout_s=60)
    resumes = f.events("slurm.nodes_release")
    assert sum(e["calls"] for e in resumes) <= 6, resumes


@pytest.mark.parametrize(
    "big_config", [{**CONFIG, "max_out": 5, "max_out_percent": 100, "mass_percent": 100}]
)
def test_same_cause_on_30_of_100_opens_the_breaker_and_a_failover_keeps_it(
    big_fleet: BigFleet,
) -> None:
    """30 of 100 nodes fail with the same SLURM reason: at most 5 marked, the breaker opens.

    Taints are marks that keep a pod away: only nodes the budget admitted carry one, also
    from the poll's fast path (issue 15 item 11). A second coordinator taking over after a
    SIGKILL finds the breaker open and marks nothing more.
    """
    f = big_fleet
    failing = [f"w-{i}" for i in range(2, 92, 3)]
    assert len(failing) == 30
    f.slurm.run(
        "scontrol",
        "update",
        f"nodename={','.join(failing)}",
        "state=fail",
        "reason=Kill task failed",
    )
    wait_for("breaker open", lambda: f.state().get("breakerOpen") == "true", timeout_s=30)
    time.sleep(3)
    assert 1 <= len(f.cordoned()) <= 5
    assert f.tainted() <= f.cordoned(), f.tainted() - f.cordoned()
    before = f.cordoned()
    second = f.coordinators.start(f.env, identity="coordinator-1", until=None)
    f.coordinators[0].kill()
    second.wait(COORDINATOR_SYNCED, timeout_s=40)  # it leads
    time.sleep(5)
    assert f.cordoned() == before
    assert f.tainted() <= before
    assert f.state()["breakerOpen"] == "true"
    assert not second.events("kube.cordon")
    assert second.events("budget.refused")
