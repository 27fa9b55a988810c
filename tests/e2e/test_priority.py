"""Serving preempts SLURM training through the chart's PriorityClasses, without losing a job.

The chart's PriorityClasses (rendered by helm, applied to the harness) rank serving above the
training workers. One kwok node has room for one pod: the worker pod ``w-0`` (training, bound
to a real slurmd by the kubelet stand-in, its agent running, ``slonkd prestop`` as preStop)
runs a requeueable job. A serving pod that does not fit makes the real kube-scheduler preempt
``w-0``: the stand-in runs its preStop, so the SLURM node is drained and downed by slonkd and
the job requeued (Restarts rises; never FAILED, CANCELLED or NODE_FAIL) before its slurmd
stops. The StatefulSet's new ``w-0`` waits (training never preempts); once the serving pod is
gone it is scheduled again and its agent returns the node to service. With a checkpoint
signal, the same preemption signals a job that traps it, which resumes from its checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slonkd.runtime.agent.requeue_report import report_url
from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.procs import HarnessError, free_ports, wait_for
from slonkd_sandbox.slurm.cluster import SlurmLayout
from slonkd_sandbox.toolchain import ensure_tools
from slonkd_sandbox.workloads import worker_statefulset
from tests.e2e.checkpointing import (
    assert_requeue_time_exported,
    checkpointing_job,
    reporting_agent,
)
from tests.e2e.conftest import GRACE_S, PRESTOP, AgentProcess, read_json_log
from tests.rig import Rig

pytestmark = [pytest.mark.kube, pytest.mark.slurm]

RELEASE = "rel"
LOST = {"FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "OUT_OF_MEMORY"}


@pytest.fixture
def priority_classes(
    kube: KubeCluster, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, dict[str, Any]]]:
    """The chart's PriorityClasses for this namespace, created in the cluster, by tier."""
    helm = Helm(binary=ensure_tools().helm, home=tmp_path_factory.mktemp("helm"))
    out = helm.run(
        "template",
        RELEASE,
        str(Path(__file__).resolve().parents[2] / "deploy" / "helm" / "slonk"),
        f"--namespace={namespace}",
        "--show-only=templates/priorityclasses.yaml",
    ).stdout
    classes = {
        doc["metadata"]["name"].rsplit("-", 1)[1]: doc
        for doc in yaml.safe_load_all(out)
        if doc and doc.get("kind") == "PriorityClass"
    }
    for doc in classes.values():
        kube.api.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", doc)
    yield classes
    for doc in classes.values():
        kube.api.request(
            "DELETE",
            f"/apis/scheduling.k8s.io/v1/priorityclasses/{doc['metadata']['name']}",
            ok=(200, 202, 404),
        )


def _pod(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    """Pod ``name`` of ``namespace``, or None once it is gone."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    items = kube.api.request("GET", path, params={"fieldSelector": f"metadata.name={name}"})
    return items["items"][0] if items["items"] else None


def _whole_node_worker(
    kube: KubeCluster,
    namespace: str,
    label: dict[str, str],
    priority_class: str,
    prestop: list[str],
) -> None:
    """Create StatefulSet ``w``: one training worker asking for the whole 2-CPU node."""
    sts = worker_statefulset(
        "w",
        replicas=1,
        node_selector=label,
        grace_s=GRACE_S,
        prestop=prestop,
        priority_class=priority_class,
    )
    sts["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2"}  # the whole node: serving can only get it by preemption
    }
    kube.api.request("POST", f"/apis/apps/v1/namespaces/{namespace}/statefulsets", sts)


def _serving_pod(name: str, priority_class: str, node_selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "serving"}},
        "spec": {
            "priorityClassName": priority_class,
            "containers": [
                {"name": "serve", "image": "serving:dev", "resources": {"requests": {"cpu": "2"}}}
            ],
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "nodeSelector": {"type": "kwok", **node_selector},
            "terminationGracePeriodSeconds": 0,
        },
    }


def _preempt_w0(rig: Rig, serving: dict[str, Any], label: dict[str, str]) -> str:
    """Create the serving pod (class ``serving``) that preempts w-0; returns w-0's uid."""
    first = _pod(rig.kube, rig.namespace, "w-0")
    assert first is not None
    pods = f"/api/v1/namespaces/{rig.namespace}/pods"
    rig.kube.api.request("POST", pods, _serving_pod("serve", serving["metadata"]["name"], label))
    return str(first["metadata"]["uid"])


def test_serving_preempts_a_worker_whose_job_is_requeued_and_whose_node_returns(
    rig: Rig,
    priority_classes: dict[str, dict[str, Any]],
) -> None:
    """Preempted by the scheduler: drain, requeue, down; back to service after serving leaves."""
    serving, training = priority_classes["serving"], priority_classes["training"]
    assert serving["value"] > training["value"]
    assert serving["preemptionPolicy"] == "PreemptLowerPriority"
    assert training["preemptionPolicy"] == "Never"

    slurm = rig.slurm_factory(SlurmLayout(nodes=("w-0",), autostart=False))
    label = {"slonk.dev/test": rig.namespace}
    (kube_node,) = rig.kube.add_fake_nodes(
        [rig.unique("prio")], labels=label, capacity={"cpu": "2", "memory": "8Gi", "pods": "110"}
    )
    pods = f"/api/v1/namespaces/{rig.namespace}/pods"

    def pod(name: str) -> dict[str, Any] | None:
        return _pod(rig.kube, rig.namespace, name)

    with rig.standin(slurm, "k") as si:
        _whole_node_worker(rig.kube, rig.namespace, label, training["metadata"]["name"], PRESTOP)
        slurm.wait_idle(["w-0"], timeout_s=60)
        agent = AgentProcess(
            env={
                **os.environ,
                "POD_NAME": "w-0",
                "POD_NAMESPACE": rig.namespace,
                "NODE_NAME": kube_node,
                "KUBECONFIG": str(rig.kube.kubeconfig),
                "SLURM_CONF": str(slurm.conf),
                "SLONKD_RESYNC_S": "2",
                "SLONKD_READY_FILE": str(rig.tmp_path / "ready-w-0"),
            },
            log=rig.tmp_path / "agent-w-0.log",
        )
        agent.start()
        try:
            job = slurm.run(
                "sbatch", "--parsable", "--requeue", "-w", "w-0", "-o", "/dev/null",
                "--wrap", "sleep 600",
            ).stdout.strip()  # fmt: skip
            wait_for("job running", lambda: slurm.job_state(job)[0] == "RUNNING", timeout_s=30)
            uid = _preempt_w0(rig, serving, label)
            wait_for(
                "w-0 preempted",
                lambda: si.recorded("pod.terminating", uid),
                timeout_s=60,
            )
            victim = pod("w-0")
            if victim is not None and victim["metadata"]["uid"] == uid:
                conditions = {c["type"] for c in victim["status"].get("conditions", [])}
                assert "DisruptionTarget" in conditions  # the scheduler's preemption mark
            wait_for(
                "slurmd stopped",
                lambda: si.recorded("slurmd.stopped", uid),
                timeout_s=GRACE_S + 20,
            )
            events_path = f"/api/v1/namespaces/{rig.namespace}/events"
            events = rig.kube.api.request("GET", events_path)["items"]
            assert any(
                e.get("reason") == "Preempted" and e["involvedObject"].get("uid") == uid
                for e in events
            ), [(e.get("reason"), e["involvedObject"].get("name")) for e in events]
            state, restarts = slurm.job_state(job)
            assert state not in LOST
            assert restarts >= 1, (state, restarts)
            shown = slurm.run("scontrol", "-o", "show", "node", "w-0").stdout
            assert "Reason=slonkd:pod-terminating" in shown, shown
            assert "Not responding" not in shown
            drains = [a for a in agent.actions() if a["action"] == "drain"]
            assert drains  # the agent drained as the deletion started
            wait_for(
                "serving pod running",
                lambda: (pod("serve") or {}).get("status", {}).get("phase") == "Running",
                timeout_s=30,
            )
            replacement = pod("w-0")
            assert replacement is not None
            assert replacement["metadata"]["uid"] != uid
            assert not replacement["spec"].get("nodeName")  # training waits, never preempts

            rig.kube.api.request("DELETE", f"{pods}/serve", {"gracePeriodSeconds": 0})

            def back() -> bool:
                p = pod("w-0")
                return bool(
                    p
                    and p["status"].get("phase") == "Running"
                    and any(
                        e["event"] == "slurmd.started" and e.get("uid") == p["metadata"]["uid"]
                        for e in si.events()
                    )
                )

            wait_for("w-0 scheduled again", back, timeout_s=60)
            wait_for(
                "w-0 back in service and the release logged",
                lambda: (
                    slurm.node_states().get("w-0") in {"idle", "mixed", "allocated"}
                    and agent.did("release")
                ),
                timeout_s=40,
            )
            assert "Reason=" not in slurm.run("scontrol", "-o", "show", "node", "w-0").stdout
            assert [a["action"] for a in agent.actions()][-1] == "release"
            state, restarts = slurm.job_state(job)
            assert state not in LOST
            assert restarts >= 1
        finally:
            agent.stop()


def test_a_preempted_checkpointing_job_is_signalled_requeued_and_resumes_from_its_checkpoint(
    rig: Rig,
    priority_classes: dict[str, dict[str, Any]],
) -> None:
    """Preemption through the same preStop: checkpoint signal, requeue, resume from it.

    The worker's preStop has ``--checkpoint-signal B:USR1 --checkpoint-window 4`` and reports
    to its agent: when the scheduler preempts ``w-0`` for a serving pod, the job's batch shell
    (it traps USR1) writes its checkpoint, is requeued within the window + 2 s, and when the
    worker is back it starts again FROM the checkpoint. The agent exports the figure under
    ``cause="preemption"`` (the pod's DisruptionTarget said PreemptionByScheduler).
    """
    serving, training = priority_classes["serving"], priority_classes["training"]
    # a requeued job may start again after cred_expire (SLURM's default 120 s): 10 s here
    slurm = rig.slurm_factory(SlurmLayout(nodes=("w-0",), autostart=False, cred_expire_s=10))
    label = {"slonk.dev/test": rig.namespace}
    (kube_node,) = rig.kube.add_fake_nodes(
        [rig.unique("prck")], labels=label, capacity={"cpu": "2", "memory": "8Gi", "pods": "110"}
    )
    pods = f"/api/v1/namespaces/{rig.namespace}/pods"
    work, script = checkpointing_job(rig.tmp_path)
    (agent_port,) = free_ports(1)
    prestop = [
        *PRESTOP,
        "--checkpoint-signal", "B:USR1", "--checkpoint-window", "4",
        "--report-url", report_url(agent_port),
    ]  # fmt: skip

    def pod(name: str) -> dict[str, Any] | None:
        return _pod(rig.kube, rig.namespace, name)

    def lines() -> list[str]:
        return (work / "log").read_text().splitlines()

    with rig.standin(slurm, "k") as si:
        _whole_node_worker(rig.kube, rig.namespace, label, training["metadata"]["name"], prestop)
        slurm.wait_idle(["w-0"], timeout_s=60)
        agent = reporting_agent(rig.kube, slurm, rig.namespace, kube_node, agent_port, rig.tmp_path)
        agent.start()
        try:
            job = slurm.run(
                "sbatch", "--parsable", "--requeue", "-w", "w-0", "-o", "/dev/null", str(script)
            ).stdout.strip()
            wait_for("job running", lambda: slurm.job_state(job)[0] == "RUNNING", timeout_s=30)
            wait_for("the loop started", lambda: (work / "log").exists(), timeout_s=15)
            time.sleep(1)
            uid = _preempt_w0(rig, serving, label)
            wait_for(
                "slurmd stopped",
                lambda: si.recorded("slurmd.stopped", uid),
                timeout_s=60 + GRACE_S,
            )
            state, restarts = slurm.job_state(job)
            assert state not in LOST
            assert restarts >= 1, (state, restarts)
            checkpoints = [ln for ln in lines() if ln.startswith("checkpoint")]
            assert len(checkpoints) == 1, lines()
            saved = int(checkpoints[0].split()[1])
            assert saved > 0
            hook = [
                e
                for path in (rig.tmp_path / "k").rglob("prestop-w-0-*.log")
                for e in read_json_log(path)
            ]
            requeued = next(e for e in hook if e.get("event") == "slurm.jobs_requeued")
            assert_requeue_time_exported(agent, requeued, "preemption")

            rig.kube.api.request("DELETE", f"{pods}/serve", {"gracePeriodSeconds": 0})

            def starts() -> list[str]:
                return [ln for ln in lines() if ln.startswith("start")]

            try:
                wait_for("the training job ran again", lambda: len(starts()) >= 2, timeout_s=120)
            except HarnessError as gone:  # say where it stopped: job, node, pod, agent
                node = slurm.run("scontrol", "-o", "show", "node", "w-0").stdout
                raise AssertionError(
                    f"{gone}\njob {slurm.job_state(job)}\n{node}\npod {pod('w-0')}\n"
                    f"stand-in {si.events()[-10:]}\nagent {agent.events()[-30:]}"
                ) from gone
            assert starts()[0].startswith("start 0 "), starts()
            assert starts()[1] == f"start {saved} restart 1", starts()  # from the checkpoint
            assert slurm.job_state(job)[0] not in LOST
            slurm.run("scancel", job)
        finally:
            agent.stop()
