"""Leftover reasons on real SLURM 22.05 and 24.11 (issue 15 item 1).

SLURM 24.11 keeps a node's reason text after ``resume``/``undrain``; 22.05 clears it. What
decide() reads back from the real daemons after an operator's drain + resume must let a pod
deletion drain the node, and a leftover SLURM failure text must not count as a failure.
"""

from __future__ import annotations

import time

import pytest

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.decide import decide
from slonkd.core.kube_objects import KubeNodeName, Node
from slonkd.core.plan import Kind, NodeView, Policy, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd_sandbox.slurm.cluster import SlurmCluster
from tests.unit.coordinator_fakes import pod

pytestmark = pytest.mark.slurm


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Each backend of the port in turn (tests/contract/conftest.py)."""
    return any_backend


def _view(slurm: SlurmNode, *, now: float, terminating: bool, ready_for_s: float) -> NodeView:
    """``slurm``'s view at ``now``: pod n1 on kn-1 (no conditions), Ready ``ready_for_s`` long."""
    return NodeView(
        node=NodeName(slurm.name),
        now=now,
        slurm=slurm,
        pod=pod(name="n1", on="kn-1", terminating=terminating),
        kube_node=Node(
            name=KubeNodeName("kn-1"), uid="k1", resource_version="1", unschedulable=False
        ),
        pod_ready_since=now - ready_for_s,
    )


async def _resumed(
    backend: SlurmBackend, cluster: SlurmCluster, node: str, state: str, reason: str
) -> SlurmNode:
    """``node`` as read back after an operator set ``state`` with ``reason``, then resumed it."""
    cluster.run("scontrol", "update", f"nodename={node}", f"state={state}", f"reason={reason}")
    cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    (read,) = await backend.read_nodes([node])
    return read


async def test_pod_deletion_after_operator_drain_and_resume_drains(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """Operator drains n1 and resumes it; its pod is deleted: slonkd drains n1 again."""
    node = await _resumed(backend, cluster, "n1", "drain", "maintenance by alice")
    assert not node.held
    assert node.live_reason == ""
    view = _view(node, now=time.time(), terminating=True, ready_for_s=3600)
    plan = decide(view, Policy())
    drains = [a for a in plan.for_writer(Writer.AGENT) if a.kind is Kind.DRAIN]
    assert [str(a.cause) for a in drains] == ["pod-terminating"]
    result = await backend.drain(["n1"], drains[0].cause, "pod deleted")
    assert "n1" in result.changed
    (after,) = await backend.read_nodes(["n1"])
    assert after.held
    assert after.live_reason.startswith("slonkd:pod-terminating")


async def test_leftover_failure_text_after_resume_is_no_failure(
    backend: SlurmBackend, cluster: SlurmCluster
) -> None:
    """SLURM's failure reason, then an operator's resume: the node is healthy, no marks."""
    node = await _resumed(backend, cluster, "n2", "fail", "Kill task failed")
    view = _view(node, now=time.time() + 3600, terminating=False, ready_for_s=3 * 3600)
    plan = decide(view, Policy())
    assert plan.failure is None, (node.reason, plan.notes)
    assert plan.actions == ()
    assert Cause.parse("pod-terminating")  # the grammar the drain above relied on
