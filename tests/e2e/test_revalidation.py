"""Proof of health before return, on the real services (slurmctld/slurmd, mosquitto, apiserver).

A worker's slurmd check fails: the coordinator drains it ``health:slurmd-dead`` and cordons
its K8s node; its pod is replaced on another K8s node whose agent still sees the check fail.
The node must not resume while the new agent's first verdicts show no fail yet (too few
failures are only a ``warn``): slonkd holds it ``slonkd:revalidating``, sends the fenced
recheck to the new pod's agent and waits for an answer where every check passes. When the
check passes the node resumes, exactly once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.sampling import Sampler
from tests.e2e import health_path_fleet
from tests.e2e.conftest import AgentProcess
from tests.e2e.health_path_fleet import FleetOptions, HealthFleet

health_fleet = health_path_fleet.health_fleet
"""The health path's fleet: workers with agents (gated slurmd checks), mosquitto, a leader."""

pytestmark = [pytest.mark.kube, pytest.mark.slurm, pytest.mark.mqtt]

RECHECK_S = 2.0
REVALIDATE: dict[str, bool] = {}
"""``{"revalidate": False}`` shows the test failing without revalidation (the gap it closes)."""


def _slow_verdicts(agent: AgentProcess, *, fail_n: int) -> None:
    """Rewrite ``agent``'s settings file: a failing check says fail after ``fail_n`` runs.

    Fast checks every 2.5 s; a failing check is a warn until ``fail_n`` of the last ``fail_n``
    runs failed; one pass clears it.
    """
    config = Path(agent.env["SLONKD_CONFIG"])
    settings = json.loads(config.read_text())
    settings["health"]["fast_period_s"] = 2.5
    settings["hysteresis"] = {"fail_n": fail_n, "window_m": fail_n, "clear_k": 1}
    config.write_text(json.dumps(settings))


class StateSampler(Sampler):
    """Samples one SLURM node's state (``sinfo``) in a thread, as fast as slurmctld answers."""

    period_s = 0.05

    def __init__(self, fleet: HealthFleet, node: str) -> None:
        super().__init__()
        self.fleet, self.node = fleet, node
        self.samples: list[tuple[float, str]] = []

    def sample(self) -> None:
        """The node's state now (a slow sinfo under load: skipped, the next one comes)."""
        try:
            state = self.fleet.slurm.node_states().get(self.node, "")
        except Exception:  # noqa: BLE001 - a slow sinfo under load: sample again
            return
        self.samples.append((time.time(), state))

    def resumed(self, since: float = 0.0) -> list[float]:
        """When the node went from out of service to ``idle`` (each return once)."""
        out, last = [], ""
        for at, state in self.samples:
            if at >= since and state == "idle" and last not in ("", "idle"):
                out.append(at)
            last = state
        return out

    def states(self, since: float = 0.0) -> list[str]:
        """The distinct states seen since ``since``, in order."""
        seen: list[str] = []
        for at, state in self.samples:
            if at >= since and (not seen or seen[-1] != state):
                seen.append(state)
        return seen


@pytest.mark.parametrize(
    "health_fleet",
    [
        FleetOptions(
            gated=True,
            # the test replaces the pod itself: an eviction from the new K8s node (its own
            # ladder) would move the pod again, away from the agent the test runs for it
            coordinator={"revalidate_recheck_s": RECHECK_S, "remediate": False, **REVALIDATE},
        )
    ],
    indirect=True,
)
def test_a_replaced_node_returns_only_after_its_new_pod_passes_a_recheck(
    health_fleet: HealthFleet,
) -> None:
    """Failed, replaced, still failing: never resumes; the check passes: resumes once.

    The new pod's agent reports the still failing check as ``warn`` first (fewer failures
    than its hysteresis needs): without revalidation the coordinator lifted the health drain
    right then and the node resumed. Now the node is held ``slonkd:revalidating`` and its
    agent is sent rechecks whose answers do not pass. Once the gate opens the recheck's
    answer passes and slonkd releases revalidating: the node resumes exactly once, and the
    state record is gone.
    """
    f = health_fleet
    node = "w-0"
    old_kube = f.kube_node_of(node)
    pod_path = f"/api/v1/namespaces/{f.namespace}/pods/{node}"

    def show() -> str:
        return f.slurm.run("scontrol", "-o", "show", "node", node).stdout

    def audited(action: str) -> list[dict[str, Any]]:
        return [a for a in f.audit_records() if a["action"] == action and a["node"] == node]

    def replaced() -> bool:
        try:
            pod = f.kube.api.request("GET", pod_path)
        except Exception:  # noqa: BLE001 - between the old pod and the new one
            return False
        ready = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        return (
            pod["spec"].get("nodeName") not in (None, old_kube)
            and pod["status"].get("phase") == "Running"
            and ready.get("Ready") == "True"
        )

    with StateSampler(f, node) as sampler:
        f.gates[node].shut()
        wait_for(
            "drained for health, K8s node cordoned",
            lambda: (
                f.reason(node).startswith("slonkd:health:slurmd-dead") and bool(audited("cordon"))
            ),
            timeout_s=40,
        )
        f.kube.api.request("DELETE", pod_path)  # replaced (as the ladder's first rung would)
        wait_for("pod replaced on another K8s node", replaced, timeout_s=60)
        # the new pod's agent: its check still fails, but it takes 5 failures of 5 runs (2.5 s
        # apart) to say so; until then its verdict is warn, and warn is no failure
        _slow_verdicts(f.agents[node], fail_n=5)
        f.restart_agent(node)
        restarted = time.time()
        wait_for(
            "the new agent's first verdicts",
            lambda: any(
                e.get("event") == "agent.status_published" and e.get("health")
                for e in f.agents[node].events()
            ),
            timeout_s=30,
        )
        time.sleep(10)  # passes, rechecks (every 2 s) and answers that do not pass
        assert sampler.resumed(restarted) == [], (
            f"{node} resumed while its check still failed: states {sampler.states(restarted)}"
        )
        assert f.state(node) != "idle"
        assert "revalidating" in show(), show()
        sent = [
            e
            for e in f.coordinator_events()
            if e.get("event") == "coordinator.revalidating" and e.get("node") == node
        ]
        assert len(sent) >= 2, sent  # sent again while the answers do not pass
        answered = {
            e["answers"]
            for e in f.agents[node].events()
            if e.get("event") == "agent.status_published" and e.get("answers")
        }
        assert {e["command"] for e in sent} & answered  # the new pod's agent answered
        record = json.loads(f.state_cm().get("revalidating", "{}"))
        assert node in record, record
        assert record[node]["command"], record

        opened = time.time()
        f.gates[node].open()
        wait_for("resumed once its checks pass", lambda: f.state(node) == "idle", timeout_s=40)
        time.sleep(4)  # more passes: nothing takes it out again, nothing resumes twice
        assert f.state(node) == "idle"
    assert len(sampler.resumed(restarted)) == 1, sampler.states(restarted)
    assert sampler.resumed(restarted)[0] >= opened
    took = sampler.resumed(restarted)[0] - opened
    print(f"revalidation: resumed {took:.2f} s after the gate opened")
    releases = [a for a in audited("release") if a["cause"] == "revalidating"]
    assert [a["outcome"] for a in releases] == ["changed"], releases
    assert "slonkd" not in show().partition(" Reason=")[2]
    assert node not in json.loads(f.state_cm().get("revalidating", "{}"))


@pytest.mark.parametrize(
    "health_fleet",
    [FleetOptions(gated=True, coordinator={"revalidate_recheck_s": RECHECK_S, **REVALIDATE})],
    indirect=True,
)
def test_a_node_slurm_failed_returns_after_an_operators_resume_only_once_rechecked(
    health_fleet: HealthFleet,
) -> None:
    """SLURM's own failure: evicted, resumed by the operator, held until the recheck passes.

    SLURM reports ``Kill task failed``: slonkd cordons the K8s node and evicts the pod (its
    ladder's first rung) but never writes to the SLURM node SLURM's reason holds. The
    operator resumes it: that is the node's return, and slonkd drains it
    ``slonkd:revalidating`` at once; the new pod's agent, whose check does not pass yet, is
    rechecked; once the check passes the node resumes, exactly once. Without this the
    operator's resume put the node straight back into service, unproven.
    """
    f = health_fleet
    node = "w-0"
    old_kube = f.kube_node_of(node)

    def evicted() -> bool:
        return any(
            a["action"] == "evict" and a["node"] == node and a["outcome"] == "changed"
            for a in f.audit_records()
        )

    f.slurm.run("scontrol", "update", f"nodename={node}", "state=fail", "reason=Kill task failed")
    wait_for("the pod evicted for SLURM's failure", evicted, timeout_s=40)

    def moved() -> bool:
        try:
            return f.kube_node_of(node) not in ("", "None", old_kube)
        except Exception:  # noqa: BLE001 - between the old pod and the new one
            return False

    wait_for("pod back on another K8s node", moved, timeout_s=60)
    # the new pod's agent: its check will fail, but as warn for its first runs (no health
    # cause, no second eviction); the gate shuts once it runs, not before (the old agent's
    # fail would mark the new K8s node)
    _slow_verdicts(f.agents[node], fail_n=20)

    def verdicts() -> int:
        return sum(
            1
            for e in f.agents[node].events()
            if e.get("event") == "agent.status_published" and e.get("health")
        )

    before = verdicts()
    f.restart_agent(node)
    wait_for("the new agent's first verdicts", lambda: verdicts() > before, timeout_s=30)
    f.gates[node].shut()
    assert f.reason(node) == "Kill task failed"  # SLURM's, untouched while it holds
    with StateSampler(f, node) as sampler:
        resumed_at = time.time()
        f.slurm.run("scontrol", "update", f"nodename={node}", "state=resume")
        wait_for(
            "drained revalidating after the operator's resume",
            lambda: f.reason(node).startswith("slonkd:revalidating"),
            timeout_s=10,
        )
        time.sleep(8)  # rechecks (every 2 s) whose answers do not pass
        assert f.reason(node).startswith("slonkd:revalidating"), f.reason(node)
        opened = time.time()
        f.gates[node].open()
        wait_for("resumed once its checks pass", lambda: f.state(node) == "idle", timeout_s=40)
        time.sleep(4)
        assert f.state(node) == "idle"
    back = [t for t in sampler.resumed(resumed_at) if t >= opened]
    assert len(back) == 1, sampler.states(resumed_at)
    # out of service from the resume until the pass: at most a pass's poll in between
    early = [t for t in sampler.resumed(resumed_at) if t < opened]
    assert len(early) <= 1, sampler.states(resumed_at)
    assert node not in json.loads(f.state_cm().get("revalidating", "{}"))
