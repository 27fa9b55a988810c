"""Leftover reasons on real SLURM 22.05 and 24.11 (issue 15 item 1).

SLURM 24.11 keeps a node's reason text after ``resume``/``undrain``; 22.05 clears it. What
decide() reads back from the real daemons after an operator's drain + resume must let a pod
deletion drain the node, and a leftover SLURM failure text must not count as a failure.
"""

from __future__ import annotations

import time

import pytest

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.decide import decide
from slonkd.core.kube_objects import KubeNodeName, Node, Pod, PodName, PodPhase
from slonkd.core.plan import Kind, NodeView, Policy, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName
from slonkd.testing.slurm import SlurmCluster

pytestmark = pytest.mark.slurm


def _pod(*, terminating: bool) -> Pod:
    return Pod(
        name=PodName("n1"),
        namespace="slonk",
        uid="u1",
        resource_version="1",
        node_name=KubeNodeName("kn-1"),
        phase=PodPhase.RUNNING,
        ready=True,
        deletion_timestamp="2026-12-01T00:00:00Z" if terminating else None,
    )


def _kube() -> Node:
    return Node(name=KubeNodeName("kn-1"), uid="k1", resource_version="1", unschedulable=False)


async def test_pod_deletion_after_operator_drain_and_resume_drains(
    backend: ScontrolBackend, cluster: SlurmCluster
) -> None:
    """Operator drains n1 and resumes it; its pod is deleted: slonkd drains n1 again."""
    cluster.run("scontrol", "update", "nodename=n1", "state=drain", "reason=maintenance by alice")
    cluster.run("scontrol", "update", "nodename=n1", "state=resume")
    (node,) = await backend.read_nodes(["n1"])
    assert not node.held
    assert node.live_reason == ""
    view = NodeView(
        node=NodeName("n1"),
        now=time.time(),
        slurm=node,
        pod=_pod(terminating=True),
        kube_node=_kube(),
        pod_ready_since=time.time() - 3600,
    )
    plan = decide(view, Policy())
    drains = [a for a in plan.for_writer(Writer.AGENT) if a.kind is Kind.DRAIN]
    assert [str(a.cause) for a in drains] == ["pod-terminating"]
    result = await backend.drain(["n1"], drains[0].cause, "pod deleted")
    assert "n1" in result.changed
    (after,) = await backend.read_nodes(["n1"])
    assert after.held
    assert after.live_reason.startswith("slonkd:pod-terminating")


async def test_leftover_failure_text_after_resume_is_no_failure(
    backend: ScontrolBackend, cluster: SlurmCluster
) -> None:
    """SLURM's failure reason, then an operator's resume: the node is healthy, no marks."""
    cluster.run("scontrol", "update", "nodename=n2", "state=fail", "reason=Kill task failed")
    cluster.run("scontrol", "update", "nodename=n2", "state=resume")
    (node,) = await backend.read_nodes(["n2"])
    view = NodeView(
        node=NodeName("n2"),
        now=time.time() + 3600,
        slurm=node,
        pod=_pod(terminating=False),
        kube_node=_kube(),
        pod_ready_since=time.time() - 7200,
    )
    plan = decide(view, Policy())
    assert plan.failure is None, (node.reason, plan.notes)
    assert plan.actions == ()
    assert Cause.parse("pod-terminating")  # the grammar the drain above relied on
