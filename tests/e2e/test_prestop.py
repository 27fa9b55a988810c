"""slonkd prestop as the preStop hook of a real (kwok) pod bound to a real slurmd.

The kubelet stand-in runs the pod's preStop command, then stops its slurmd, then finishes
the deletion. With ``slonkd prestop`` the job is requeued before the slurmd dies and the
node is DOWN with slonkd's reason; with a preStop that does nothing, neither is true (the
same assertions fail: the test can fail).
"""

from __future__ import annotations

import json
import time

import pytest

from slonkd.runtime.agent.requeue_report import report_url
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.kube.kubelet import KubeletStandIn
from slonkd_sandbox.procs import HarnessError, free_ports, wait_for
from slonkd_sandbox.slurm.cluster import SlurmLayout
from slonkd_sandbox.workloads import worker_statefulset
from tests.e2e.checkpointing import (
    REQUEUE_SECONDS,
    assert_requeue_time_exported,
    checkpointing_job,
    reporting_agent,
)
from tests.e2e.conftest import GRACE_S, PRESTOP
from tests.rig import Rig

pytestmark = [pytest.mark.kube, pytest.mark.slurm]


def _delete_and_wait_until_slurmd_stopped(
    kube: KubeCluster, namespace: str, standin: KubeletStandIn
) -> None:
    """Delete pod w-0 with the grace period; return once the stand-in stopped its slurmd."""
    uid = kube.api.request("GET", f"/api/v1/namespaces/{namespace}/pods/w-0")["metadata"]["uid"]
    kube.api.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/w-0", {"gracePeriodSeconds": GRACE_S}
    )
    wait_for(
        "slurmd stopped", lambda: standin.recorded("slurmd.stopped", uid), timeout_s=GRACE_S + 20
    )


@pytest.mark.parametrize("prestop_enabled", [True, False], ids=["slonkd-prestop", "no-prestop"])
def test_deleted_pod_requeues_its_job_and_downs_its_node(
    rig: Rig,
    prestop_enabled: bool,
) -> None:
    """Delete a worker pod with a requeueable job running on its node.

    With slonkd prestop: when the slurmd is stopped the job is already requeued (Restarts 1,
    never FAILED, CANCELLED or NODE_FAIL) and the node is DOWN with slonkd's reason, not
    "Not responding". Without it, the job is still believed RUNNING on a dead node.
    """
    slurm = rig.slurm_factory(SlurmLayout(nodes=("w-0",), autostart=False))
    label = {"slonk.dev/test": rig.namespace}
    rig.kube.add_fake_nodes([rig.unique("pre")], labels=label)
    with rig.standin(slurm, "k") as standin:
        sts = worker_statefulset(
            "w",
            replicas=1,
            node_selector=label,
            grace_s=GRACE_S,
            prestop=PRESTOP if prestop_enabled else ["/bin/true"],
        )
        rig.create_statefulset(sts)
        slurm.wait_idle(["w-0"], timeout_s=60)
        job = slurm.run(
            "sbatch",
            "--parsable",
            "--requeue",
            "-w",
            "w-0",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ).stdout.strip()
        wait_for("job running", lambda: slurm.job_state(job)[0] == "RUNNING", timeout_s=30)

        _delete_and_wait_until_slurmd_stopped(rig.kube, rig.namespace, standin)
        state, restarts = slurm.job_state(job)
        node = slurm.run("scontrol", "-o", "show", "node", "w-0").stdout
        requeued = state in {"PENDING", "REQUEUED", "REQUEUE_HOLD"} and restarts >= 1
        down_by_slonkd = "State=DOWN" in node and "Reason=slonkd:pod-terminating" in node
        assert state not in {"FAILED", "CANCELLED", "NODE_FAIL"} or not prestop_enabled
        if prestop_enabled:
            assert requeued, (state, restarts)
            assert down_by_slonkd, node
            assert "Not responding" not in node
        else:
            assert not requeued, (state, restarts)
            assert not down_by_slonkd, node
            assert state == "RUNNING"


def test_a_checkpointing_job_is_signalled_requeued_and_resumes_from_its_checkpoint(
    rig: Rig,
) -> None:
    """Delete the pod of a node running a checkpointing job and a plain one.

    The preStop hook (``--checkpoint-signal B:USR1 --checkpoint-window 4``) signals the batch
    shell that traps USR1 four seconds before the requeue: it writes its checkpoint, is
    requeued, and when the node is back it starts again FROM the checkpoint (its log proves it
    continued, not restarted from zero). The plain job, whose shell has no handler, gets no
    signal (it would have died of it) and is still requeued in time: neither ends FAILED,
    CANCELLED or NODE_FAIL. The hook reports the signal-to-requeue time to the pod's agent
    over loopback, and the agent's /metrics has it in
    ``slonkd_checkpoint_signal_to_requeue_seconds{cause="deletion"}`` (a plain DELETE).
    """
    # a requeued job may start again after cred_expire (SLURM's default 120 s): 10 s here
    slurm = rig.slurm_factory(SlurmLayout(nodes=("w-0",), autostart=False, cred_expire_s=10))
    label = {"slonk.dev/test": rig.namespace}
    rig.kube.add_fake_nodes([rig.unique("ckpt")], labels=label)
    work, script = checkpointing_job(rig.tmp_path)
    (agent_port,) = free_ports(1)
    prestop = [
        *PRESTOP,
        "--checkpoint-signal",
        "B:USR1",
        "--checkpoint-window",
        "4",
        "--report-url",
        report_url(agent_port),
    ]
    with rig.standin(slurm, "k") as standin:
        sts = worker_statefulset(
            "w", replicas=1, node_selector=label, grace_s=GRACE_S, prestop=prestop
        )
        rig.create_statefulset(sts)
        slurm.wait_idle(["w-0"], timeout_s=60)
        pod = rig.kube.api.request("GET", f"/api/v1/namespaces/{rig.namespace}/pods/w-0")
        agent = reporting_agent(
            rig.kube, slurm, rig.namespace, pod["spec"]["nodeName"], agent_port, rig.tmp_path
        )
        agent.start()
        submit = ["sbatch", "--parsable", "--requeue", "-w", "w-0", "-o", "/dev/null"]
        training = slurm.run(*submit, str(script)).stdout.strip()
        plain = slurm.run(*submit, "--wrap", "sleep 300").stdout.strip()
        wait_for(
            "both jobs running",
            lambda: {slurm.job_state(training)[0], slurm.job_state(plain)[0]} == {"RUNNING"},
            timeout_s=30,
        )
        wait_for("the loop started", lambda: (work / "log").exists(), timeout_s=15)
        time.sleep(1)
        _delete_and_wait_until_slurmd_stopped(rig.kube, rig.namespace, standin)
        for job in (training, plain):
            state, restarts = slurm.job_state(job)
            assert state in {"PENDING", "REQUEUED", "REQUEUE_HOLD"}, (job, state)
            assert restarts >= 1, (job, restarts)
        checkpoints = [
            ln for ln in (work / "log").read_text().splitlines() if ln.startswith("checkpoint")
        ]
        assert len(checkpoints) == 1, (work / "log").read_text()
        saved = int(checkpoints[0].split()[1])
        assert saved > 0
        hook_log = "".join(p.read_text() for p in (rig.tmp_path / "k").rglob("prestop-w-0-*.log"))
        signals = [
            json.loads(ln) for ln in hook_log.splitlines() if "prestop.checkpoint_signal" in ln
        ]
        assert {(s["job"], s["outcome"]) for s in signals} == {
            (int(training), "sent"),
            (int(plain), "not-caught"),
        }, hook_log
        requeued = next(
            json.loads(ln) for ln in hook_log.splitlines() if "slurm.jobs_requeued" in ln
        )
        exported = assert_requeue_time_exported(agent, requeued, "deletion")
        assert exported[("slonkd_checkpoint_window_seconds", None)] == pytest.approx(4, abs=0.6)
        count = f"{REQUEUE_SECONDS}_count"
        others = [v for (n, c), v in exported.items() if n == count and c != "deletion"]
        assert others, exported
        assert not any(others), exported

        # the new pod's slurmd is up; resume the node as its agent would, the job runs again
        wait_for("the new pod's slurmd runs", lambda: slurm.slurmd_running("w-0"), timeout_s=60)
        wait_for(
            "the new slurmd registered",
            lambda: (
                "NOT_RESPONDING" not in slurm.run("scontrol", "-o", "show", "node", "w-0").stdout
            ),
            timeout_s=60,
        )
        # its agent may have resumed it already (the new pod is Ready): then this is refused
        slurm.run("scontrol", "update", "nodename=w-0", "state=resume", check=False)

        def starts() -> list[str]:
            return [ln for ln in (work / "log").read_text().splitlines() if ln.startswith("start")]

        # SLURM starts it again once its BeginTime (cred_expire, 10 s) has passed, at the next
        # scheduling pass: the main scheduler runs every sched_interval (60 s by default) and an
        # idle node's events may all come before the BeginTime. Once, under a full run's load,
        # it took over 60 s: the bound is 10 s + 60 s + slack, and a miss says what SLURM says.
        try:
            wait_for("the training job ran again", lambda: len(starts()) >= 2, timeout_s=120)
        except HarnessError as exc:
            shown = slurm.run("scontrol", "-o", "show", "job", training, check=False).stdout
            node = slurm.run("scontrol", "-o", "show", "node", "w-0", check=False).stdout
            raise AssertionError(f"{exc}\njob: {shown[:800]}\nnode: {node[:600]}") from exc
        assert starts()[0].startswith("start 0 "), starts()
        assert starts()[1] == f"start {saved} restart 1", starts()  # continued, not from zero
        for job in (training, plain):
            assert slurm.job_state(job)[0] not in {"FAILED", "CANCELLED", "NODE_FAIL"}
        agent.stop()


def test_a_stopped_job_is_left_alive_and_its_node_not_set_down(rig: Rig) -> None:
    """Delete the pod of a node whose job was stopped (SIGSTOP through SLURM).

    22.05's ``squeue --json`` prints such a job's state as ``STOPPED``: read as "not on the
    node", the hook took the node for empty and set it DOWN, which ends the job (issue 37 item
    6). Now the job is on the node and not requeued: the hook drains the node, leaves the job
    alone, says so, and does not set the node DOWN; the job is neither ended nor requeued.
    """
    slurm = rig.slurm_factory(SlurmLayout(nodes=("w-0",), autostart=False))
    label = {"slonk.dev/test": rig.namespace}
    rig.kube.add_fake_nodes([rig.unique("stop")], labels=label)
    with rig.standin(slurm, "k") as standin:
        sts = worker_statefulset("w", replicas=1, node_selector=label, grace_s=GRACE_S,
                                 prestop=PRESTOP)  # fmt: skip
        rig.create_statefulset(sts)
        slurm.wait_idle(["w-0"], timeout_s=60)
        began = rig.tmp_path / "began"
        job = slurm.run(
            "sbatch", "--parsable", "--requeue", "-w", "w-0", "-o", "/dev/null",
            "--wrap", f"touch {began}; exec sleep 300",
        ).stdout.strip()  # fmt: skip
        # RUNNING in slurmctld is not yet running on the node: a signal sent before slurmd
        # launched the batch step is lost (SIGNALING, then RUNNING, never STOPPED; CI stop 48)
        wait_for("the batch step began", began.exists, timeout_s=30)

        def squeue_state() -> list[str]:  # 22.05's --json ignores -j: every job is listed
            shown = json.loads(slurm.run("squeue", "--json", "-j", job).stdout)["jobs"]
            states = [s["job_state"] for s in shown if str(s["job_id"]) == job]
            return [s for state in states for s in ([state] if isinstance(state, str) else state)]

        def stopped() -> bool:
            if "STOPPED" in squeue_state():
                return True
            slurm.run("scancel", "--signal=STOP", "--full", job)  # again: a stopped job stays so
            return "STOPPED" in squeue_state()

        try:
            wait_for("squeue says STOPPED", stopped, timeout_s=30, interval_s=2)
        except HarnessError as exc:
            shown = slurm.run("scontrol", "-o", "show", "job", job, check=False).stdout
            raise AssertionError(f"{exc}: {squeue_state()}\njob: {shown[:800]}") from exc
        _delete_and_wait_until_slurmd_stopped(rig.kube, rig.namespace, standin)
        state, restarts = slurm.job_state(job)
        node = slurm.run("scontrol", "-o", "show", "node", "w-0").stdout
        assert state not in {"FAILED", "CANCELLED", "NODE_FAIL", "PENDING", "REQUEUED"}, state
        assert restarts == 0, restarts
        assert "Reason=slonkd:pod-terminating" in node, node  # drained by the hook
        assert "DOWN" not in node.split("State=")[1].split()[0], node
        hook_log = "".join(p.read_text() for p in (rig.tmp_path / "k").rglob("prestop-w-0-*.log"))
        stuck = [json.loads(ln) for ln in hook_log.splitlines() if "jobs_not_requeueable" in ln]
        assert [s["jobs"] for s in stuck] == [[int(job)]], hook_log
