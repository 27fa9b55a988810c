"""slonkd coordinator end to end against the real services.

K8s maintenance is mirrored into SLURM in bulk, SLURM failures are marked on the K8s node and
remediated once, and operators' cordons are never undone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from slonkd.core.log_events import (
    COORDINATOR_API_LISTENING,
    COORDINATOR_LEADING,
    COORDINATOR_SYNCED,
    SLURM_BACKEND_CHOSEN,
    SLURM_LIBSLURM_CHILD_EXITED,
)
from slonkd_sandbox.daemon import Daemon
from slonkd_sandbox.procs import HarnessError, wait_for
from tests.e2e import coordinator_fleet
from tests.e2e.conftest import (
    marked_unhealthy,
    set_unschedulable,
)
from tests.e2e.coordinator_fleet import BASE_CONFIG, PODS, Fleet
from tests.offline_names import offline_prefix

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

coordinator_config = coordinator_fleet.coordinator_config
fleet_slurm = coordinator_fleet.fleet_slurm
fleet = coordinator_fleet.fleet


def test_cordoned_k8s_nodes_drain_their_slurm_nodes_in_bulk(fleet: Fleet) -> None:
    """Cordon 5 K8s nodes: their pods' SLURM nodes drain in few calls; uncordon resumes them."""
    cordoned = fleet.kube_nodes[:5]
    set_unschedulable(fleet.kube, cordoned)  # an operator's script cordoning a rack at once
    affected = sorted(p for n in cordoned for p in fleet.pods_on(n))
    assert 2 <= len(affected) < PODS  # the scheduler spread them; the rest stay untouched

    def drained() -> bool:
        reasons = fleet.reasons()
        return all(reasons.get(n, "").startswith("slonkd:k8s-cordoned") for n in affected)

    wait_for("their SLURM nodes drained", drained, timeout_s=20)
    others = [n for n, r in fleet.reasons().items() if n not in affected]
    assert all(fleet.reasons()[n] == "none" for n in others)
    drains = fleet.events("slurm.nodes_drain")
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


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG, "slurm_backend": "pyslurm"}])
@pytest.mark.parametrize("fleet_slurm", ["22.05", "24.11"], indirect=True)
def test_a_coordinator_on_the_pyslurm_backend_marks_drains_and_resumes(fleet: Fleet) -> None:
    """A coordinator on ``slurm_backend: pyslurm``: marks, drains and resumes (issue 39).

    The release's build (on 24.11 the coordinator on that root's loader): a SLURM failure
    marks its K8s node, a cordon drains its pods' SLURM nodes and the uncordon resumes them,
    through the pyslurm child.
    """
    (chosen,) = fleet.events(SLURM_BACKEND_CHOSEN)
    assert chosen["backend"] == "pyslurm", chosen
    shown: list[dict[str, Any]] = []

    def status_served() -> bool:  # 503 until the leader's first pass
        try:
            with urllib.request.urlopen(f"{fleet.api_url()}/v1/status", timeout=10) as resp:  # noqa: S310
                shown.append(json.loads(resp.read())["passes"])
        except urllib.error.HTTPError:
            return False
        return True

    wait_for("the leader's status", status_served, timeout_s=20)
    passes = shown[-1]
    assert passes["slurm_backend"] == "pyslurm", passes
    assert "matches" in passes["slurm_backend_why"], passes
    victim = "w-3"
    failed_on = next(n for n in fleet.kube_nodes if victim in fleet.pods_on(n))
    fleet.fail([victim])
    wait_for("K8s node marked", lambda: (victim, failed_on) in fleet.cordons(), timeout_s=20)
    cordoned = next(n for n in fleet.kube_nodes if n != failed_on and fleet.pods_on(n))
    affected = fleet.pods_on(cordoned)
    set_unschedulable(fleet.kube, [cordoned])

    def drained() -> bool:
        reasons = fleet.reasons()
        return all(reasons.get(n, "").startswith("slonkd:k8s-cordoned") for n in affected)

    wait_for("their SLURM nodes drained", drained, timeout_s=20)
    set_unschedulable(fleet.kube, [cordoned], on=False)
    states = fleet.slurm.node_states
    wait_for("resumed", lambda: all(states().get(n) == "idle" for n in affected), timeout_s=20)
    assert fleet.reasons()[victim] == "Kill task failed"  # SLURM's reason: never cleared
    assert not fleet.events("slurm.pyslurm_child_exited")


@pytest.mark.parametrize("fleet_slurm", ["22.05", "24.11"], indirect=True)
def test_a_cordon_after_an_uncordon_drains_again(fleet: Fleet) -> None:
    """Cordon, uncordon, cordon again: the SLURM nodes are drained the second time too.

    SLURM 24.11 keeps ``slonkd:k8s-cordoned`` as text on the resumed nodes; that leftover
    holds nothing and must not pass for a drain already in place (issue 15 item 1). The
    coordinator runs the cluster's own clients: the version it sees is checked.
    """
    version = subprocess.run(
        ["scontrol", "--version"], env=fleet.env, capture_output=True, text=True, timeout=30
    ).stdout.split()[-1]
    expected = "24.11" if fleet.env["PATH"] != os.environ["PATH"] else "22.05"
    assert version.startswith(expected + "."), version
    kube_node = next(n for n in fleet.kube_nodes if fleet.pods_on(n))
    affected = fleet.pods_on(kube_node)

    def drained() -> bool:
        states, reasons = fleet.slurm.node_states(), fleet.reasons()
        return all(
            states.get(n) in {"drained", "draining"}
            and reasons.get(n, "").startswith("slonkd:k8s-cordoned")
            for n in affected
        )

    def idle() -> bool:
        states = fleet.slurm.node_states()
        return all(states.get(n) == "idle" for n in affected)

    set_unschedulable(fleet.kube, [kube_node])
    wait_for("drained for the cordon", drained, timeout_s=20)
    set_unschedulable(fleet.kube, [kube_node], on=False)
    wait_for("resumed after the uncordon", idle, timeout_s=20)
    if expected == "24.11":
        assert all(fleet.reasons()[n].startswith("slonkd:k8s-cordoned") for n in affected)
    set_unschedulable(fleet.kube, [kube_node])
    wait_for("drained again for the second cordon", drained, timeout_s=20)


def test_slurm_failure_cordons_taints_marks_and_evicts_once(fleet: Fleet) -> None:
    """A SLURM-reported failure on a settled pod marks its K8s node and evicts the pod once.

    Cordon, slonk.dev taint, SlurmHealthy=False, an Event, one eviction; the evicted pod's
    replacement elsewhere is not blamed for the old failure. The failure was seen through the
    libslurm change poll (the default; 22.05's library on the host), as ``slonkd status`` says.
    """
    victim = "w-3"
    kube_node = next(n for n in fleet.kube_nodes if victim in fleet.pods_on(n))

    def passes() -> dict[str, Any]:
        with urllib.request.urlopen(f"{fleet.api_url()}/v1/status", timeout=10) as resp:  # noqa: S310
            return dict(json.loads(resp.read())["passes"])

    # the failure comes once the library's poll answers: until its child has started (seconds
    # on a loaded machine) the scontrol poll serves, and it would be the one to see it
    wait_for(
        "the libslurm change poll answering",
        lambda: passes()["slurm_poll_backend"] == "libslurm" and passes()["slurm_change_polls"] > 0,
        timeout_s=30,
    )
    fleet.slurm.run(
        "scontrol", "update", f"nodename={victim}", "state=fail", "reason=Kill task failed"
    )

    def marked() -> bool:
        return marked_unhealthy(fleet.knode(kube_node))

    wait_for("K8s node marked", marked, timeout_s=20)
    assert fleet.knode(kube_node)["metadata"]["annotations"].get("slonk.dev/cordoned-by")
    polled = passes()
    assert polled["slurm_poll_backend"] == "libslurm", polled
    assert polled["slurm_poll_why"] == "", polled
    assert polled["slurm_change_polls"] > 0, polled
    wait_for("evicted", lambda: bool(fleet.events("kube.evict")), timeout_s=20)
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
    evictions = fleet.events("kube.evict")
    assert len(evictions) == 1
    cordons = fleet.events("kube.cordon")
    assert {e["kube_node"] for e in cordons} == {kube_node}
    assert fleet.reasons()[victim] == "Kill task failed"  # SLURM's reason: slonkd never clears it
    # every action is in the audit log with its cause and fencing token
    audit = [json.loads(line) for line in fleet.audit.read_text().splitlines()]
    cordon = [a for a in audit if a["action"] == "cordon" and a["node"] == victim]
    assert cordon, audit
    assert cordon[0]["cause"].startswith("slurm-failure")
    assert isinstance(cordon[0]["fencing_token"], int)
    assert "unschedulable=False" in cordon[0]["before"]
    # the operator's view: slonkd status and slonkd explain
    shown = fleet.slonkd("status", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    assert body["leading"] is True
    rows = {r["node"]: r for r in body["nodes"]}
    assert len(rows) == PODS
    assert rows["w-0"]["slurm_state"].startswith("IDLE")
    table = fleet.slonkd("status")
    assert table.returncode == 0
    assert "breaker: closed" in table.stdout
    explained = fleet.slonkd("explain", "w-0")
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["decision"]["actions"] == []
    assert fleet.slonkd("explain", "no-such-node").returncode == 1


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG, "change_poll": False}])
def test_with_the_change_poll_off_the_scontrol_poll_alone_marks_a_failure(fleet: Fleet) -> None:
    """``change_poll: false`` polls with scontrol alone, and a SLURM failure is still marked.

    It was the default until 2026-12; the test above runs today's default, the libslurm
    change poll. This one never asks libslurm.
    """
    fleet.fail(["w-2"])
    wait_for("marked", lambda: bool(fleet.cordons()), timeout_s=20)
    assert [slurm for slurm, _ in fleet.cordons()] == ["w-2"]
    passes = _passes(fleet)
    assert passes["slurm_poll_backend"] == "scontrol", passes
    assert "change_poll is false" in passes["slurm_poll_why"], passes
    assert passes["slurm_change_polls"] == 0, passes


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG, "max_out": 3, "mass_percent": 100}])
def test_same_failure_on_30_percent_opens_the_breaker_and_a_failover_keeps_it(
    fleet: Fleet,
) -> None:
    """6 of 20 nodes fail at once: at most the budget (3) is marked, the breaker opens and stays.

    The breaker lives in the state ConfigMap: a new leader after a SIGKILL of the old one
    finds it open and takes nothing more out; only `slonkd budget reset` closes it.
    """
    failing = [f"w-{i}" for i in (1, 4, 7, 10, 13, 16)]
    fleet.fail(failing)
    wait_for("breaker open", lambda: fleet.state().get("breakerOpen") == "true", timeout_s=20)
    time.sleep(3)  # a few more passes
    marked = {e["node"] for e in fleet.events("kube.cordon")}
    assert 1 <= len(marked) <= 3, marked
    assert len(fleet.cordoned()) <= 3
    assert "exhausted" in fleet.state()["breakerReason"]
    assert fleet.events("budget.breaker_opened")
    events = fleet.kube.api.request("GET", f"/api/v1/namespaces/{fleet.namespace}/events")
    assert any(e.get("reason") == "BreakerOpen" for e in events["items"])
    with urllib.request.urlopen(f"{fleet.api_url()}/metrics", timeout=10) as response:  # noqa: S310
        scraped = response.read().decode()
    assert "slonkd_breaker_open 1.0" in scraped
    assert re.search(
        r'slonkd_transitions_total\{action="cordon",cause="slurm-failure"\} [1-3]\.0', scraped
    )
    cordoned_before = fleet.cordoned()
    # failover: a second candidate takes over after the leader is SIGKILLed
    second = fleet.standby("coordinator-1")
    fleet.first.kill()
    second.wait(COORDINATOR_SYNCED, timeout_s=40)
    time.sleep(4)
    assert not second.events("kube.cordon") + second.events("kube.evict")
    assert second.events("budget.refused"), [
        (e.get("event"), e.get("node"), e.get("error")) for e in second.events()
    ]
    assert fleet.cordoned() == cordoned_before
    assert fleet.state()["breakerOpen"] == "true"
    # only a human closes it
    reset = fleet.slonkd("budget", "reset", "--namespace", fleet.namespace, "--by", "alice")
    assert reset.returncode == 0, reset.stderr
    written = json.loads(reset.stdout.split("done (", 1)[1].rstrip().removesuffix(")"))
    assert written["breakerOpen"] is False
    assert written["breakerReason"] == "reset by alice"
    # with the breaker closed, the failures it held back are handled, inside the budget again
    rest = set(failing) - marked

    def rest_handled() -> bool:
        evicted = {e["node"] for e in second.events("kube.evict")}
        return bool(evicted & rest) and len(fleet.cordoned()) <= 3

    wait_for("held-back failures handled after the reset", rest_handled, timeout_s=30)


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG, "pool_modes": {"w": "observe"}}])
def test_an_observe_pool_reports_and_acts_once_switched_to_full(fleet: Fleet) -> None:
    """Issue 40 item 1: an observe pool audits what it would do and writes nothing.

    `slonkd mode` to full (the operator's kubeconfig, as pause): the failure is marked at the
    next pass; a misspelt pool is refused in one line.
    """
    status = json.loads(fleet.slonkd("status", "-o", "json").stdout)
    assert status["modes"]["w"]["mode"] == "observe"
    fleet.fail(["w-2"])

    def observed() -> bool:
        audit = fleet.audit.read_text() if fleet.audit.exists() else ""
        records = [json.loads(line) for line in audit.splitlines()]
        return any(
            r["action"] == "cordon" and r["node"] == "w-2" and r["outcome"] == "observed"
            for r in records
        )

    wait_for("the cordon audited as observed", observed, timeout_s=20)
    assert fleet.events("coordinator.would_act")
    assert not fleet.cordons()
    bad = fleet.slonkd("mode", "wx", "full", "--namespace", fleet.namespace)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "unknown pool 'wx'" in bad.stderr
    done = fleet.slonkd("mode", "w", "full", "--namespace", fleet.namespace, "--by", "ann")
    assert done.returncode == 0, done.stderr
    wait_for("marked once full", lambda: bool(fleet.cordons()), timeout_s=45)
    assert [slurm for slurm, _ in fleet.cordons()] == ["w-2"]
    status = json.loads(fleet.slonkd("status", "-o", "json").stdout)
    assert status["modes"]["w"] == {
        "mode": "full",
        "source": "slonkd mode, by ann",
        "would": 0,
    }


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG}])
def test_pause_stops_automated_actions_until_unpause(fleet: Fleet) -> None:
    """`slonkd pause` is seen at the next pass: a failure is marked only after unpause."""
    paused = fleet.slonkd("pause", "--namespace", fleet.namespace, "--reason", "fw upgrade")
    assert paused.returncode == 0, paused.stderr
    wait_for(
        "status shows the pause",
        lambda: json.loads(fleet.slonkd("status", "-o", "json").stdout)["state"]["paused"],
        timeout_s=10,
    )
    fleet.fail(["w-2"])
    time.sleep(4)
    assert not fleet.cordoned()
    assert not fleet.cordons()  # not even for a moment
    explained = json.loads(fleet.slonkd("explain", "w-2").stdout)
    assert any("paused" in n for n in explained["decision"]["notes"])
    assert fleet.slonkd("unpause", "--namespace", fleet.namespace).returncode == 0
    wait_for("marked after unpause", lambda: bool(fleet.cordons()), timeout_s=45)
    assert [slurm for slurm, _ in fleet.cordons()] == ["w-2"]


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG, "dry_run": True}])
def test_dry_run_logs_plans_and_writes_nothing(fleet: Fleet) -> None:
    """With dry_run the plans go to the audit log and SLURM and Kubernetes stay as they are.

    The same plan decided again on later passes is not audited again: each would-be action
    of a node in an unchanged state is one record, however many passes ran.
    """
    fleet.fail(["w-6"])
    for n in fleet.kube_nodes[:2]:
        fleet.kube.kubectl("cordon", n)
    affected = [p for n in fleet.kube_nodes[:2] for p in fleet.pods_on(n)]

    def planned() -> bool:
        audit = fleet.audit.read_text() if fleet.audit.exists() else ""
        records = [json.loads(line) for line in audit.splitlines()]
        return any(r["action"] == "cordon" and r["node"] == "w-6" for r in records) and all(
            any(r["action"] == "drain" and r["node"] == p for r in records) for p in affected
        )

    wait_for("plans audited", planned, timeout_s=20)
    records = [json.loads(line) for line in fleet.audit.read_text().splitlines()]
    # a dry run is observe for every pool: held back ("observed"), lifecycle ones "dry-run"
    assert all(r["dry_run"] and r["outcome"] in ("observed", "dry-run") for r in records)
    assert fleet.cordoned() == set(fleet.kube_nodes[:2])  # the admin's, nothing of slonkd's
    assert all(fleet.reasons()[p] == "none" for p in affected)
    assert fleet.reasons()["w-6"] == "Kill task failed"

    def passes() -> int:
        return len(fleet.events("coordinator.pass"))

    seen = passes()
    wait_for("three more passes", lambda: passes() >= seen + 3, timeout_s=30)
    records = [json.loads(line) for line in fleet.audit.read_text().splitlines()]
    plans = [
        (r["node"], r["action"], r["cause"], r.get("key"), r.get("kube_node"), r["before"])
        for r in records
    ]
    repeated = {plan for plan in plans if plans.count(plan) > 1}
    assert not repeated, f"{len(plans)} records, audited again: {sorted(map(str, repeated))[:5]}"


def _audited(fleet: Fleet, action: str) -> list[str]:
    """Nodes of the audit records of ``action`` that changed something, in order."""
    if not fleet.audit.exists():
        return []
    records = [json.loads(line) for line in fleet.audit.read_text().splitlines()]
    return [r["node"] for r in records if r["action"] == action and r["outcome"] == "changed"]


def test_two_coordinators_one_acts_and_a_sigkill_mid_bulk_converges_once(
    fleet: Fleet,
) -> None:
    """A standby never acts; the leader SIGKILLed in a bulk drain: the standby finishes it.

    No node is drained twice (the audit log of both has one drain a node at most).
    """
    second = fleet.standby("coordinator-1")
    time.sleep(4)
    assert not second.events(COORDINATOR_LEADING)
    cordoned = fleet.kube_nodes[:5]
    affected = sorted(p for n in cordoned for p in fleet.pods_on(n))
    set_unschedulable(fleet.kube, cordoned)
    fleet.first.kill()  # the leader dies while (or before) it drains them
    wait_for(
        "all drained by one of them",
        lambda: all(fleet.reasons()[n].startswith("slonkd:k8s-cordoned") for n in affected),
        timeout_s=45,
    )
    assert second.events(COORDINATOR_LEADING)
    time.sleep(3)
    drains = _audited(fleet, "drain")
    assert sorted(set(drains)) == sorted(set(drains) & set(affected))
    assert len(drains) == len(set(drains)), drains  # nobody drained twice
    set_unschedulable(fleet.kube, cordoned, on=False)
    wait_for(
        "resumed by the new leader",
        lambda: all(fleet.reasons()[n] == "none" for n in affected),
        timeout_s=30,
    )


def test_a_sigstopped_leader_writes_nothing_when_it_wakes(fleet: Fleet) -> None:
    """SIGSTOP the leader past its lease; the standby leads; SIGCONT: the old one writes nothing."""
    second = fleet.standby("coordinator-1")
    time.sleep(2)
    fleet.first.signal(signal.SIGSTOP)
    stopped_at = len(fleet.log.read_text().splitlines())
    try:
        second.wait(COORDINATOR_SYNCED, timeout_s=40)
        target = fleet.kube_nodes[6]
        affected = fleet.pods_on(target)
        set_unschedulable(fleet.kube, [target])
        wait_for(
            "drained by the new leader",
            lambda: all(fleet.reasons()[n].startswith("slonkd:k8s-cordoned") for n in affected),
            timeout_s=20,
        )
    finally:
        fleet.first.signal(signal.SIGCONT)
    time.sleep(5)  # the old leader wakes, finds its lease gone and stops
    set_unschedulable(fleet.kube, [target], on=False)
    wait_for("resumed", lambda: all(fleet.reasons()[n] == "none" for n in affected), timeout_s=20)
    time.sleep(2)
    after = [json.loads(line) for line in fleet.log.read_text().splitlines()[stopped_at:] if line]
    writes = [
        e
        for e in after
        if str(e.get("event", "")).startswith(("slurm.nodes_", "kube.cordon", "kube.evict"))
        or e.get("event") == "audit.action"
    ]
    assert not writes, writes


def _leading(coordinator: Daemon) -> list[int]:
    """The fencing tokens of the terms a coordinator led, in order."""
    return [e["fencing_token"] for e in coordinator.events(COORDINATOR_LEADING)]


def test_a_deleted_lease_under_a_running_pair_keeps_state_writes_going(
    fleet: Fleet,
) -> None:
    """Delete the Lease under a leader and its standby: the next term still writes the state.

    A failover first raises the token (and the state's) to 1; the recreated Lease's term must
    be above it, or every state write (remediation, breaker) is refused as an old leader's.
    """
    second = fleet.standby("coordinator-1")
    time.sleep(2)
    fleet.first.kill()
    wait_for("the standby leads", lambda: bool(_leading(second)), timeout_s=40)
    first_token = _leading(second)[0]
    assert first_token >= 1
    fleet.fail(["w-3"])
    wait_for(
        "w-3 handled under the new term",
        lambda: "w-3" in json.loads(fleet.state().get("handled", "{}")),
        timeout_s=30,
    )
    assert fleet.state()["fencingToken"] == str(first_token)
    third = fleet.standby("coordinator-2")  # a running pair again
    time.sleep(2)
    fleet.kube.api.request(
        "DELETE",
        f"/apis/coordination.k8s.io/v1/namespaces/{fleet.namespace}/leases/slonkd-coordinator",
    )
    wait_for(
        "a term after the deletion",
        lambda: len(_leading(second)) + len(_leading(third)) >= 2,
        timeout_s=40,
    )
    # The new term claims the state with its token before it acts, so from here on the old
    # leader (which sees the deleted Lease only at its next renewal) can neither record nor
    # make an eviction. It once evicted the victim here and its record was refused.
    wait_for(
        "the new term's token in the state",
        lambda: int(fleet.state()["fencingToken"]) > first_token,
        timeout_s=10,
    )
    victim = next(
        f"w-{i}"
        for i in range(PODS)
        if f"w-{i}" != "w-3" and all(f"w-{i}" not in fleet.pods_on(n) for n in fleet.cordoned())
    )
    fleet.fail([victim])
    wait_for(
        f"{victim} handled after the Lease was recreated",
        lambda: victim in json.loads(fleet.state().get("handled", "{}")),
        timeout_s=30,
    )
    assert int(fleet.state()["fencingToken"]) > first_token
    lease = fleet.kube.api.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/{fleet.namespace}/leases/slonkd-coordinator",
    )
    assert lease["spec"]["leaseTransitions"] == int(fleet.state()["fencingToken"])


def test_a_corrupt_state_pauses_the_coordinator_until_state_reset(fleet: Fleet) -> None:
    """A hand-edited state ConfigMap: status served, nothing done, one log and Event; a reset.

    `slonkd pause`/`budget reset` refuse it with a hint; `slonkd state reset` wants its
    confirmation flag, then replaces it (keeping the fencing token) and the coordinator acts.
    """
    path = f"/api/v1/namespaces/{fleet.namespace}/configmaps"
    fleet.kube.api.request("DELETE", f"{path}/slonkd-state", ok=(200, 404))
    corrupt = {"schema": "2", "remediation": '{"n1": {}}', "fencingToken": "0"}
    fleet.kube.api.request(
        "POST",
        path,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "slonkd-state"},
            "data": corrupt,
        },
    )

    def corrupt_logged() -> list[dict[str, Any]]:
        return fleet.events("coordinator.state_corrupt")

    wait_for("the corruption is logged", lambda: bool(corrupt_logged()), timeout_s=20)
    fleet.fail(["w-2"])
    time.sleep(4)  # several passes (resync 1 s)
    assert fleet.first.exited() is None, fleet.first.exited()
    assert not fleet.cordoned()
    assert not fleet.cordons()  # not even for a moment
    assert len(corrupt_logged()) == 1  # once per distinct error, not every pass
    shown = fleet.slonkd("status", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)["state"]
    assert state["paused"] is True
    assert "state reset --yes-discard-state" in state["pausedReason"]
    events = fleet.kube.api.request("GET", f"/api/v1/namespaces/{fleet.namespace}/events")
    assert [e for e in events["items"] if e.get("reason") == "StateCorrupt"]
    for refused in (("budget", "reset"), ("pause",)):
        out = fleet.slonkd(*refused, "--namespace", fleet.namespace)
        assert out.returncode == 1, out
        assert "state reset --yes-discard-state" in out.stderr
    unconfirmed = fleet.slonkd("state", "reset", "--namespace", fleet.namespace)
    assert unconfirmed.returncode == 2
    assert fleet.state() == corrupt
    reset = fleet.slonkd("state", "reset", "--namespace", fleet.namespace, "--yes-discard-state")
    assert reset.returncode == 0, reset.stderr
    assert json.loads(reset.stdout.splitlines()[0])["discarded"] == corrupt
    assert fleet.state()["fencingToken"] == "0"
    wait_for("w-2 marked after the reset", lambda: bool(fleet.cordons()), timeout_s=30)
    assert [slurm for slurm, _ in fleet.cordons()] == ["w-2"]
    assert fleet.events("coordinator.state_readable")


def test_apiserver_and_slurmctld_restarts_mid_run_converge(fleet: Fleet) -> None:
    """The apiserver and then slurmctld restart under a running coordinator: it converges."""
    fleet.kube.kill_apiserver()
    first, second = fleet.kube_nodes[7], fleet.kube_nodes[8]
    try:
        time.sleep(3)
    finally:
        fleet.kube.start_apiserver()
    set_unschedulable(fleet.kube, [first])
    drained_first = fleet.pods_on(first)
    try:
        wait_for(
            "drained after the apiserver came back",
            lambda: all(
                fleet.reasons()[n].startswith("slonkd:k8s-cordoned") for n in drained_first
            ),
            timeout_s=60,
        )
    except HarnessError:
        fleet.first.signal(signal.SIGUSR1)
        time.sleep(1)
        raise AssertionError(fleet.log.read_text()[-12000:]) from None
    fleet.slurm.stop_slurmctld()
    try:
        set_unschedulable(fleet.kube, [second])
        time.sleep(3)
    finally:
        fleet.slurm.start_slurmctld()
    drained_second = fleet.pods_on(second)
    wait_for(
        "drained after slurmctld came back",
        lambda: all(fleet.reasons()[n].startswith("slonkd:k8s-cordoned") for n in drained_second),
        timeout_s=60,
    )
    assert fleet.first.running  # it rode both out
    set_unschedulable(fleet.kube, [first, second], on=False)
    wait_for(
        "resumed",
        lambda: all(fleet.reasons()[n] == "none" for n in drained_first + drained_second),
        timeout_s=30,
    )


@pytest.mark.parametrize("coordinator_config", [{**BASE_CONFIG, "remediation_cooldown_s": 1}])
def test_a_second_failure_on_the_same_k8s_node_requests_a_reboot(fleet: Fleet) -> None:
    """The ladder is the hardware's: a restart first, then a reboot request on the same node.

    The reboot request is the ``slonk.dev/reboot-requested`` taint and annotation (for the
    site's reboot tooling), an Event, and the attempt recorded in the state ConfigMap. Its
    SLURM half is audited; SLURM's own reason holds this node, so it is not rebooted by slonkd.
    """
    kube_node = next(n for n in fleet.kube_nodes if len(fleet.pods_on(n)) == 2)
    first, second = fleet.pods_on(kube_node)
    fleet.fail([first])
    wait_for(
        "first evicted",
        lambda: any(e.get("event") == "kube.evict" and e["node"] == first for e in fleet.events()),
        timeout_s=20,
    )
    time.sleep(1.5)  # past the cool-down
    fleet.fail([second], reason="Prolog error")

    def reboot_requested() -> bool:
        node = fleet.knode(kube_node)
        taints = {t["key"] for t in node["spec"].get("taints", [])}
        annotations = node["metadata"].get("annotations") or {}
        return "slonk.dev/reboot-requested" in taints and (
            "slonk.dev/reboot-requested" in annotations
        )

    wait_for("reboot requested", reboot_requested, timeout_s=20)
    node = fleet.knode(kube_node)
    assert "attempt 2" in node["metadata"]["annotations"]["slonk.dev/reboot-requested"]
    evictions = fleet.events("kube.evict")
    assert [e["node"] for e in evictions] == [first]  # the second one was not restarted
    remediation = json.loads(fleet.state()["remediation"])
    assert remediation[kube_node]["attempts"] == 2
    # SLURM's half is audited: SLURM's own reason holds the node, so no scontrol reboot
    audit = [json.loads(line) for line in fleet.audit.read_text().splitlines()]
    reboots = [a for a in audit if a["action"] == "slurm-reboot"]
    assert [(a["node"], a["outcome"]) for a in reboots] == [(second, "skipped: slurm-reason")]
    events = [  # a Node's Events live in "default" (or the recorder's namespace)
        e
        for ns in ("default", fleet.namespace)
        for e in fleet.kube.api.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    ]
    assert any(
        e.get("reason") == "SlurmRebootRequested" and e["involvedObject"]["name"] == kube_node
        for e in events
    )


def test_a_killed_slurmd_under_a_ready_pod_is_a_failure(fleet: Fleet) -> None:
    """slurmd dies while its pod stays Running and Ready: SLURM says "Not responding".

    The K8s node is cordoned, tainted, marked SlurmHealthy=False and the pod evicted once.
    """
    victim = "w-11"
    kube_node = next(n for n in fleet.kube_nodes if victim in fleet.pods_on(n))
    fleet.slurm.control({"op": "kill_slurmd", "node": victim})

    def marked() -> bool:
        return marked_unhealthy(fleet.knode(kube_node))

    wait_for("marked after SLURM noticed", marked, timeout_s=60)
    assert fleet.reasons()[victim] == "Not responding"  # SLURM's own reason, left as it is
    wait_for(
        "evicted once",
        lambda: [e["node"] for e in fleet.events() if e.get("event") == "kube.evict"] == [victim],
        timeout_s=20,
    )


def test_node_deletion_held_by_a_finalizer_never_kills_a_job(fleet: Fleet) -> None:
    """A K8s node deleted under a finalizer: its SLURM nodes drain, a job runs on untouched.

    The job cannot be requeued (``--no-requeue``): slonkd neither requeues it nor sets its node
    DOWN while it runs (issue 15 item 2). The idle node beside it is set DOWN once drained;
    the busy one once its job has ended.
    """
    kube_node = next(n for n in fleet.kube_nodes if len(fleet.pods_on(n)) == 2)
    busy, idle = fleet.pods_on(kube_node)
    job = fleet.slurm.run(
        "sbatch", "--parsable", "--no-requeue", "-w", busy, "-o", "/dev/null",
        "--wrap", "sleep 600",
    ).stdout.strip()  # fmt: skip

    def job_state() -> str:
        return fleet.slurm.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()

    def down(node: str) -> bool:
        return "State=DOWN" in fleet.slurm.run("scontrol", "show", "node", node).stdout

    wait_for("job running", lambda: job_state() == "RUNNING", timeout_s=30)
    path = f"/api/v1/nodes/{kube_node}"
    fleet.kube.api.request(
        "PATCH",
        path,
        {"metadata": {"finalizers": ["slonk.dev/e2e-hold"]}},
        content_type="application/merge-patch+json",
    )
    try:
        fleet.kube.api.request("DELETE", path)

        def drained() -> bool:
            reasons = fleet.reasons()
            return all(reasons[n].startswith("slonkd:k8s-deleted") for n in (busy, idle))

        wait_for("both drained for the deletion", drained, timeout_s=20)
        wait_for("idle one down", lambda: down(idle), timeout_s=20)
        time.sleep(3)  # several passes
        assert job_state() == "RUNNING"
        assert not down(busy)
        assert not fleet.events("slurm.jobs_requeued")
        fleet.slurm.run("scancel", job)
        wait_for("busy one down", lambda: down(busy), timeout_s=30)
    finally:
        fleet.kube.api.request(
            "PATCH",
            path,
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
            ok=(200, 404),
        )


@pytest.mark.parametrize(
    "coordinator_config", [{**BASE_CONFIG, "max_out": 2, "mass_percent": 100, "remediate": False}]
)
def test_a_cordon_counts_every_pod_of_its_k8s_node_against_the_budget(fleet: Fleet) -> None:
    """Both pods of two K8s nodes fail: one K8s node is cordoned (2 out), not both (4 out).

    Every K8s node holds two pods (topology spread). Cordoning one takes both SLURM nodes out,
    so the budget (2) has room for one K8s node; the other stays in and the breaker opens.
    Before, one request per cordon admitted both K8s nodes: four nodes out against two.
    """
    first, second = fleet.kube_nodes[3], fleet.kube_nodes[4]
    failing = fleet.pods_on(first) + fleet.pods_on(second)
    assert len(failing) == 4
    fleet.fail(failing)
    wait_for("breaker open", lambda: fleet.state().get("breakerOpen") == "true", timeout_s=20)
    time.sleep(3)  # several passes
    assert "exhausted" in fleet.state()["breakerReason"], fleet.state()["breakerReason"]
    assert fleet.cordoned() == {first}  # first fit by K8s node name: c3 before c4


@pytest.mark.parametrize(
    "coordinator_config", [{**BASE_CONFIG, "max_out": 2, "mass_percent": 20, "remediate": False}]
)
def test_a_reset_takes_standing_failures_within_the_budget(fleet: Fleet) -> None:
    """6 of 20 fail at once (mass event, nothing taken); after `budget reset` two are taken.

    The failures still standing at the reset are no new mass event (issue 15 item 12): the
    budget (2) takes two, the others wait, and the breaker stays shut.
    """
    failing = [f"w-{i}" for i in (0, 3, 5, 8, 11, 14)]
    fleet.fail(failing)
    wait_for("breaker open", lambda: fleet.state().get("breakerOpen") == "true", timeout_s=20)
    assert "mass event" in fleet.state()["breakerReason"]
    assert not fleet.cordoned()
    reset = fleet.slonkd("budget", "reset", "--namespace", fleet.namespace, "--by", "alice")
    assert reset.returncode == 0, reset.stderr
    wait_for("some taken", lambda: len(fleet.cordoned()) >= 1, timeout_s=20)
    time.sleep(4)  # several passes
    assert fleet.state()["breakerOpen"] == "false", fleet.state()["breakerReason"]
    assert 1 <= len(fleet.cordoned()) <= 2  # two pods share a K8s node: one or two nodes
    assert fleet.events("budget.reset_seen")


def _passes(fleet: Fleet) -> dict[str, Any]:
    with urllib.request.urlopen(f"{fleet.api_url()}/v1/status", timeout=10) as resp:  # noqa: S310
        return dict(json.loads(resp.read())["passes"])


def test_at_rest_the_change_polls_no_change_serves_passes_and_a_change_still_shows(
    fleet: Fleet,
) -> None:
    """libslurm's "no change" keeps the poll's table current: passes (one a second) read none.

    Without it the table aged past ``poll_s`` between SLURM's changes (its pings, every
    third of SlurmdTimeout) and most passes read the whole table again. An operator's drain
    is still in the next pass's view, not a table from before it.
    """
    wait_for("passes", lambda: _passes(fleet)["count"] >= 3, timeout_s=30)
    before = _passes(fleet)
    assert before["slurm_poll_backend"] == "libslurm", before
    time.sleep(10)
    after = _passes(fleet)
    passes = after["count"] - before["count"]
    reused = after["slurm_reads_reused"] - before["slurm_reads_reused"]
    assert passes >= 6, (before, after)
    assert reused >= 0.7 * passes, (before, after)
    fleet.slurm.run("scontrol", "update", "nodename=w-3", "state=drain", "reason=disk swap by al")

    def drained() -> bool:
        shown = json.loads(fleet.slonkd("status", "-o", "json").stdout)
        rows = {r["node"]: r for r in shown["nodes"]}
        return "DRAIN" in rows["w-3"]["slurm_state"]

    wait_for("the operator's drain in the status", drained, timeout_s=10)


CTL_NAME = "slonkd-e2e-slurmctld"
"""slurmctld's name for the next test's coordinator: in its private /etc/hosts, or not."""


@pytest.mark.skipif(os.geteuid() != 0, reason="a private /etc/hosts needs a mount namespace")
def test_slurmctlds_name_not_resolving_ends_no_coordinator_and_the_change_poll_follows(
    fleet: Fleet, tmp_path: Path
) -> None:
    """libslurm ends the process that asks when slurmctld's name does not resolve (exit 40).

    That is every coordinator start before slurmctld's pod has an address, and every restart
    of that pod behind a headless Service. With the library loaded into the coordinator, a
    start in that window kept the scontrol poll for good (stop 35's CI: the chart's leader
    showed ``scontrol``) and a later window ended the coordinator. Here the coordinator runs
    in a mount namespace whose /etc/hosts the test writes and whose resolver reads only that
    file (no query to the machine's nameserver): slurmctld's name missing at start, then
    there, gone, and back. The coordinator lives throughout, and its change poll answers
    once the name resolves, each time.
    """
    hosts = tmp_path / "hosts"
    base = Path("/etc/hosts").read_text()

    def resolvable(yes: bool) -> None:  # same file, same inode: the bind mount shows it
        hosts.write_text(base + (f"127.0.0.1 {CTL_NAME}\n" if yes else ""))

    resolvable(False)
    conf = fleet.slurm.conf.with_name("slurm-by-name.conf")
    conf.write_text(
        re.sub(r"^SlurmctldHost=(\S+)\(127\.0\.0\.1\)", rf"SlurmctldHost=\1({CTL_NAME})",
               fleet.slurm.conf.read_text(), flags=re.M)
    )  # fmt: skip
    assert CTL_NAME in conf.read_text()
    fleet.first.stop()
    named = fleet.coordinators.start(
        {**fleet.env, "SLURM_CONF": str(conf)},
        identity="coordinator-named",
        until=COORDINATOR_API_LISTENING,
        prefix=offline_prefix(tmp_path, hosts),  # names from that file only: no DNS query
    )

    def passes() -> dict[str, Any]:
        port = named.events(COORDINATOR_API_LISTENING)[-1]["port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/status", timeout=10) as resp:
            return dict(json.loads(resp.read())["passes"])

    named.wait(SLURM_LIBSLURM_CHILD_EXITED, timeout_s=30)  # its first question ended it
    assert named.running, named.exited()
    resolvable(True)
    wait_for(
        "the change poll answering once the name resolves",
        lambda: passes()["slurm_change_polls"] > 5,
        timeout_s=60,
    )
    shown = passes()
    assert shown["slurm_poll_backend"] == "libslurm", shown
    died = len(named.events(SLURM_LIBSLURM_CHILD_EXITED))
    resolvable(False)
    named.wait(SLURM_LIBSLURM_CHILD_EXITED, count=died + 1, timeout_s=30)
    time.sleep(3)
    assert named.running, named.exited()
    exited = named.events(SLURM_LIBSLURM_CHILD_EXITED)[-1]
    assert exited["rc"] != 0, exited
    asked = passes()["slurm_change_polls"]
    resolvable(True)
    wait_for(
        "the change poll answering again",
        lambda: passes()["slurm_change_polls"] > asked + 5,
        timeout_s=60,
    )
    assert named.running, named.exited()
