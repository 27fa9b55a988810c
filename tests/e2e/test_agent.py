"""slonkd agent end to end: pod lifecycle mirrored into SLURM, operators' states left alone."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from slonkd.adapters.slurm.parsing_show_node import parse_show_node
from slonkd.core.log_events import AGENT_POD_REPLACED, AGENT_SYNCED, SLURM_BACKEND_CHOSEN
from slonkd.core.reasons import decode_causes
from slonkd_sandbox.procs import wait_for
from slonkd_sandbox.slurm.chroot import ChrootSlurmCluster
from slonkd_sandbox.workloads import GATED_PRESTOP
from tests.cli import slonkd
from tests.e2e.conftest import AgentProcess, Workers
from tests.pyslurm_builds import built_or_skip

pytestmark = [pytest.mark.kube, pytest.mark.slurm]


def _resumed_by(workers: Workers, uid: str, agent: AgentProcess) -> None:
    """w-0's next pod (not ``uid``) came, and ``agent`` resumed its node and logged it."""
    workers.wait_recreated("w-0", uid)
    wait_for(
        "w-0 resumed and logged",
        lambda: workers.slurm.node_states().get("w-0") == "idle" and agent.did("release"),
        timeout_s=30,
    )


@pytest.mark.prestop(GATED_PRESTOP)
def test_pod_deleted_drains_then_new_pod_resumes(workers: Workers) -> None:
    """Deleting a pod drains its node with slonkd's reason; its next pod, once Ready, resumes it.

    The preStop waits for a gate here, so the drain seen is the agent's own.
    """
    uid = workers.delete_pod("w-0")
    agent = workers.agents["w-0"]
    wait_for(  # the action line follows the write (ms later): waited for, as the reason
        "agent drained w-0 and logged it",
        lambda: "Reason=slonkd:pod-terminating" in workers.show("w-0") and agent.did("drain"),
        timeout_s=10,
    )
    drains = [a for a in agent.actions() if a["action"] == "drain"]
    assert drains
    assert drains[0]["changed"] is True
    assert drains[0]["cause"] == "pod-terminating"
    (workers.standin.root.parent / "open").write_text("")
    _resumed_by(workers, uid, agent)
    assert "Reason=" not in workers.show("w-0")
    releases = [a for a in agent.actions() if a["action"] == "release"]
    assert releases
    assert releases[-1]["changed"] is True
    assert workers.slurm.node_states().get("w-1") == "idle"  # the other node was never touched
    assert workers.agents["w-1"].actions() == []


@pytest.mark.prestop(GATED_PRESTOP)
@pytest.mark.parametrize("worker_slurm", ["22.05", "24.11"], indirect=True)
def test_pod_deleted_after_an_operator_drain_and_resume_drains(workers: Workers) -> None:
    """An operator drains w-0 with a reason and resumes it; then its pod is deleted: drained.

    SLURM 24.11 keeps the operator's text on the resumed node; that leftover holds nothing,
    so the agent must still drain the node for the pod's termination (issue 15 item 1).
    The agents run the cluster's own clients: the version they see is checked.
    """
    env = {**workers.agents["w-0"].env}
    version = subprocess.run(
        ["scontrol", "--version"], env=env, capture_output=True, text=True, timeout=30, check=True
    ).stdout.split()[-1]
    expected = "22.05" if not workers.client_env else "24.11"
    assert version.startswith(expected + "."), version
    workers.slurm.run(
        "scontrol", "update", "nodename=w-0", "state=drain", "reason=bad DIMM, ticket 7"
    )
    wait_for(
        "agent saw the operator's drain",
        lambda: any(e.get("event") == "agent.left_alone" for e in workers.agents["w-0"].events()),
        timeout_s=20,
    )
    workers.slurm.run("scontrol", "update", "nodename=w-0", "state=resume")
    wait_for("w-0 idle", lambda: workers.slurm.node_states().get("w-0") == "idle", timeout_s=20)
    if expected == "24.11":
        assert "Reason=bad DIMM, ticket 7" in workers.show("w-0")  # the leftover under test
    workers.delete_pod("w-0")
    wait_for(
        "agent drained w-0 and logged it",
        lambda: (
            "Reason=slonkd:pod-terminating" in workers.show("w-0")
            and workers.agents["w-0"].did("drain")
        ),
        timeout_s=15,
    )
    assert "DRAIN" in workers.show("w-0")
    drains = [a for a in workers.agents["w-0"].actions() if a["action"] == "drain"]
    assert drains, workers.agents["w-0"].actions()
    assert drains[-1]["cause"] == "pod-terminating"
    (workers.standin.root.parent / "open").write_text("")


def test_prestop_down_is_lifted_when_the_new_pod_is_ready(workers: Workers) -> None:
    """The full handshake: prestop downs the node, the slurmd stops, the new pod's agent resumes."""
    uid = workers.delete_pod("w-1")
    wait_for("prestop downed w-1", lambda: workers.journal_has("prestop.exited", uid), timeout_s=30)
    assert "State=DOWN" in workers.show("w-1")
    workers.wait_recreated("w-1", uid)
    wait_for(
        "w-1 resumed and logged",
        lambda: (
            workers.slurm.node_states().get("w-1") == "idle"
            and workers.agents["w-1"].did("release")
        ),
        timeout_s=30,
    )
    assert [a["action"] for a in workers.agents["w-1"].actions()][-1] == "release"


@pytest.mark.prestop(GATED_PRESTOP)
def test_operator_drain_during_restart_survives(workers: Workers) -> None:
    """An operator drain set while the pod restarts is still there afterwards, text and user.

    The pod is held Terminating (gated preStop) until the operator's drain has returned, so
    the drain lands in the restart and never inside the agent's compare-and-set window: with
    the real preStop the stand-in had the successor Ready 29 ms after the deletion, and the
    agent's release (read 12.443, written 12.467) overwrote a drain made in between, the
    race SLURM leaves open (docs/architecture.md) and the soak counts on its own.
    """
    uid = workers.delete_pod("w-0")
    wait_for(
        "the agent drained the terminating pod's node",
        lambda: "Reason=slonkd:pod-terminating" in workers.show("w-0"),
        timeout_s=10,
    )
    agent = workers.agents["w-0"]
    wait_for("its write returned", lambda: len(agent.actions()) >= 1, timeout_s=10)
    workers.slurm.run(
        "scontrol", "update", "nodename=w-0", "state=drain", "reason=bad DIMM, ticket 7"
    )
    before = len(agent.actions())
    (workers.standin.root.parent / "open").write_text("")
    workers.wait_recreated("w-0", uid)
    wait_for(
        "the agent left the operator's drain alone",
        lambda: any(e.get("event") == "agent.left_alone" for e in agent.events()),
        timeout_s=20,
    )
    time.sleep(5)  # two and a half resyncs (SLONKD_RESYNC_S=2) with the new pod Ready
    assert agent.actions()[before:] == []
    shown = workers.show("w-0")
    assert "Reason=bad DIMM, ticket 7 [root@" in shown
    assert "DRAIN" in shown


def test_node_on_hold_is_left_alone(workers: Workers) -> None:
    """With slonk.dev/hold on the K8s node the agent does nothing: the prestop's DOWN stays."""
    workers.kube.kubectl("label", "node", workers.kube_node, "slonk.dev/hold=true")
    uid = workers.delete_pod("w-1")
    workers.wait_recreated("w-1", uid)
    wait_for(
        "hold noted",
        lambda: any("on hold" in str(e.get("note", "")) for e in workers.agents["w-1"].events()),
        timeout_s=20,
    )
    assert workers.agents["w-1"].actions() == []
    assert "Reason=slonkd:pod-terminating" in workers.show(
        "w-1"
    )  # prestop's, never lifted by the agent


@pytest.mark.prestop(GATED_PRESTOP)
def test_agent_killed_and_restarted_converges_without_duplicates(workers: Workers) -> None:
    """SIGKILL the agent after it drained; the new agent finds the drain and adds nothing."""
    uid = workers.delete_pod("w-0")
    wait_for(
        "drained", lambda: "Reason=slonkd:pod-terminating" in workers.show("w-0"), timeout_s=10
    )
    agent = workers.agents["w-0"]
    agent.stop(signal.SIGKILL)
    before = len(agent.actions())
    agent.start()
    wait_for(
        "a reconcile ran",
        lambda: any(e.get("event") == AGENT_SYNCED for e in agent.events()[-20:]),
        timeout_s=10,
    )
    assert len(agent.actions()) == before  # nothing new to do: the drain is already there
    (workers.standin.root.parent / "open").write_text("")
    workers.wait_recreated("w-0", uid)
    wait_for(
        "w-0 resumed and logged",
        lambda: workers.slurm.node_states().get("w-0") == "idle" and agent.did("release", before),
        timeout_s=30,
    )
    assert [a["action"] for a in agent.actions()[before:]] == ["release"]


@pytest.mark.prestop(GATED_PRESTOP)
def test_an_agent_bound_to_its_pod_never_acts_for_the_pods_successor(workers: Workers) -> None:
    """With ``POD_UID`` (the chart's downward API) the agent leaves its pod's successor alone.

    Found by the soak (issue 18, t = 2,476 s): an agent still running when its pod's successor
    was already Ready (the sandbox's stand-in; on a real kubelet a force-deleted pod) released
    "its" drain for the successor, 57 ms after the drain had overwritten an operator's. Here
    the old agent sees the successor Ready and must keep the drain; the successor's own agent
    releases it. Unbound (no ``POD_UID``), the same agent releases: the test above.
    """
    first = workers.agents.pop("w-0")
    first.stop()
    uid = str((workers.pod("w-0") or {})["metadata"]["uid"])

    def agent_for(pod_uid: str, tag: str) -> AgentProcess:
        env = {
            **first.env,
            "POD_UID": pod_uid,
            "SLONKD_READY_FILE": f"{first.env['SLONKD_READY_FILE']}-{tag}",
        }
        env.pop("SLONKD_METRICS_PORT", None)
        agent = AgentProcess(env=env, log=first.log.with_name(f"agent-w-0-{tag}.log"))
        agent.start()
        workers.agents[f"w-0-{tag}"] = agent
        return agent

    old = agent_for(uid, "old")
    workers.delete_pod("w-0")
    wait_for(
        "agent drained w-0",
        lambda: "Reason=slonkd:pod-terminating" in workers.show("w-0"),
        timeout_s=10,
    )
    (workers.standin.root.parent / "open").write_text("")
    workers.wait_recreated("w-0", uid)

    def successor_ready() -> bool:
        conditions = (workers.pod("w-0") or {}).get("status", {}).get("conditions", [])
        return {"type": "Ready", "status": "True"} in [
            {"type": c.get("type"), "status": c.get("status")} for c in conditions
        ]

    wait_for("the successor Ready", successor_ready, timeout_s=20)
    successor = workers.pod("w-0") or {}
    time.sleep(5)  # two resyncs (SLONKD_RESYNC_S=2): an unbound agent releases within ms
    assert [a["action"] for a in old.actions()] == ["drain"]
    assert old.events(AGENT_POD_REPLACED)
    assert "Reason=slonkd:pod-terminating" in workers.show("w-0")
    new = agent_for(str(successor["metadata"]["uid"]), "new")
    wait_for(
        "w-0 resumed and logged",
        lambda: workers.slurm.node_states().get("w-0") == "idle" and new.did("release"),
        timeout_s=30,
    )
    assert [a["action"] for a in new.actions()] == ["release"]
    assert [a["action"] for a in old.actions()] == ["drain"]


def test_bad_settings_exit_2_with_one_line() -> None:
    """Missing downward-API settings: exit code 2 and a one-line reason on stderr."""
    proc = slonkd("agent", env={"PATH": "/usr/bin:/bin"}, timeout_s=30)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "POD_NAME" in proc.stderr


@pytest.mark.prestop(GATED_PRESTOP)
@pytest.mark.parametrize("worker_slurm", ["22.05", "24.11"], indirect=True)
def test_an_agent_on_the_pyslurm_backend_drains_then_resumes(
    workers: Workers, request: pytest.FixtureRequest
) -> None:
    """w-0's agent on ``slurm_backend: pyslurm``: the same drain and release (issue 39).

    Its SLURM calls go through its pyslurm child (the release's build). On 24.11 the agent
    runs as that release's image would have it: on the root's loader with its library, its
    child too (as bench/coordinator.py runs 24.11's change poll).
    """
    release = str(request.node.callspec.params["worker_slurm"])
    site = built_or_skip(release)
    workers.agents["w-0"].stop()
    env = {
        **workers.agents["w-0"].env,
        "SLONKD_SLURM_BACKEND": "pyslurm",
        "SLONKD_PYSLURM_PATH": str(site),
    }
    prefix: tuple[str, ...] = ()
    module = "slonkd.cli.main"
    if isinstance(workers.slurm, ChrootSlurmCluster):
        wrapped, env = workers.slurm.libslurm_argv([], env)
        prefix, module = tuple(wrapped), "slonkd_sandbox.slurm.libslurm_launch"
    log = workers.agents["w-0"].log.with_name("agent-w-0-pyslurm.log")
    agent = AgentProcess(env=env, log=log, prefix=prefix, module=module)
    agent.start()
    workers.agents["w-0"] = agent  # stopped by the fixture
    (chosen,) = agent.events(SLURM_BACKEND_CHOSEN)
    assert chosen["backend"] == "pyslurm", chosen
    assert chosen["slurm_version"].startswith(release)
    uid = workers.delete_pod("w-0")
    wait_for(
        "the pyslurm agent drained w-0 and logged it",
        lambda: "Reason=slonkd:pod-terminating" in workers.show("w-0") and agent.did("drain"),
        timeout_s=10,
    )
    (workers.standin.root.parent / "open").write_text("")
    _resumed_by(workers, uid, agent)
    assert [a["action"] for a in agent.actions()] == ["drain", "release"]
    (node,) = parse_show_node(workers.show("w-0"))
    assert decode_causes(node.extra) == frozenset()  # "{}": pyslurm cannot send an empty text
    assert not agent.events("slurm.pyslurm_child_exited")
