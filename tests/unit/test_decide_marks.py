"""slonkd's marks on a K8s node outlive the eviction that remediates its failure."""

from __future__ import annotations

from slonkd.core.decide import FAILURE_TAINT, Kind, decide
from slonkd.core.fleet_decide import merge_shared_nodes
from slonkd.core.kube_objects import Taint, TaintEffect
from slonkd.core.slurm_node import NodeName
from tests.unit.test_decide import POLICY, knode, pod, slurm, view

MARKED = knode(
    cordoned=True,
    by_slonkd=True,
    taints=(Taint(key=FAILURE_TAINT, effect=TaintEffect.NO_SCHEDULE),),
    healthy=False,
)
UNDO = {Kind.UNCORDON, Kind.UNTAINT, Kind.SET_CONDITION}


def test_marks_stay_while_the_evicted_pod_terminates() -> None:
    """SLURM's failure is not judged on a terminating pod; the marks must not go meanwhile."""
    v = view(slurm=slurm("FAIL", "Kill task failed"), pod=pod(terminating=True), kube_node=MARKED)
    plan = decide(v, POLICY)
    assert not [a for a in plan.actions if a.kind in UNDO]
    assert any("not settled" in n for n in plan.notes)


def test_marks_go_once_a_settled_pod_shows_no_failure() -> None:
    """A Ready pod with a healthy SLURM node on the marked K8s node: slonkd undoes its marks."""
    plan = decide(view(kube_node=MARKED), POLICY)
    assert {a.kind for a in plan.actions} >= {Kind.UNCORDON, Kind.UNTAINT, Kind.SET_CONDITION}


def test_a_healthy_neighbour_does_not_undo_the_marks_while_the_evicted_pod_terminates() -> None:
    """Two pods on one marked K8s node: the evicted one terminates, the other is healthy."""
    evicted = view(
        slurm=slurm("FAIL", "Kill task failed"), pod=pod(terminating=True), kube_node=MARKED
    )
    neighbour = view(node=NodeName("w-1"), kube_node=MARKED)
    views = [evicted, neighbour]
    merged = merge_shared_nodes(views, [decide(v, POLICY) for v in views])
    assert not [a for p in merged for a in p.actions if a.kind in UNDO]
    settled = [neighbour]  # the evicted pod is gone (its replacement runs elsewhere)
    merged = merge_shared_nodes(settled, [decide(v, POLICY) for v in settled])
    assert {a.kind for a in merged[0].actions} >= {Kind.UNCORDON, Kind.UNTAINT}
