"""decide() when the K8s node object is being deleted (issue 15 item 2).

A deletion held by a finalizer gives the node's jobs time. slonkd drains the SLURM node
(``k8s-deleted``) and waits: it never requeues or downs a node with jobs on it (a job that
cannot be requeued would be killed). Once the drained node has no job left it is set DOWN,
which kills nothing. The worker pod's own termination (preStop) requeues what is left when
the node really goes.
"""

from __future__ import annotations

from slonkd.core.decide import decide
from slonkd.core.plan import Kind, Writer
from tests.unit.coordinator_fakes import POLICY, kinds, knode, slurm, view


def test_deletion_drains_first_and_neither_requeues_nor_downs() -> None:
    """A running node whose K8s node is being deleted: drain only."""
    plan = decide(view(slurm=slurm("ALLOCATED"), kube_node=knode(deleting=True)), POLICY)
    assert kinds(plan, Writer.COORDINATOR) == [("drain", "k8s-deleted")]


def test_deletion_waits_while_jobs_run_on_the_drained_node() -> None:
    """Drained for the deletion, jobs still running (DRAINING): no requeue, no down."""
    plan = decide(
        view(slurm=slurm("ALLOCATED+DRAIN", "slonkd:k8s-deleted"), kube_node=knode(deleting=True)),
        POLICY,
    )
    assert not [a for a in plan.actions if a.kind in (Kind.DOWN, Kind.REQUEUE)]
    assert any("waiting" in n for n in plan.notes)


def test_deletion_downs_the_node_once_no_job_is_left() -> None:
    """Drained for the deletion and idle (DRAINED): DOWN, which kills nothing."""
    plan = decide(
        view(slurm=slurm("IDLE+DRAIN", "slonkd:k8s-deleted"), kube_node=knode(deleting=True)),
        POLICY,
    )
    assert kinds(plan, Writer.COORDINATOR) == [("down", "k8s-deleted")]
    done = decide(
        view(slurm=slurm("DOWN+DRAIN", "slonkd:k8s-deleted"), kube_node=knode(deleting=True)),
        POLICY,
    )
    assert kinds(done, Writer.COORDINATOR) == []
