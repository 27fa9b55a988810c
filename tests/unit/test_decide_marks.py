"""slonkd's marks on a K8s node outlive the eviction that remediates its failure."""

from __future__ import annotations

from dataclasses import replace

from slonkd.core.decide import decide
from slonkd.core.fleet_decide import merge_shared_nodes
from slonkd.core.kube_actions import FAILURE_TAINT
from slonkd.core.kube_objects import (
    CORDONED_BY_ANNOTATION,
    KubeNodeName,
    PodPhase,
    Taint,
    TaintEffect,
    cordon_mark,
)
from slonkd.core.plan import Kind, Plan
from slonkd.core.slurm_node import NodeName
from tests.unit.coordinator_fakes import NOW, POLICY, knode, pod, slurm, view

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


# The cordon annotation as slonkd writes it for w-0's SLURM failure: its cause and the SLURM
# node the marks are for (an old value, a cause alone, records no node).
MARKED_FOR_W0 = replace(
    MARKED, annotations={**MARKED.annotations, CORDONED_BY_ANNOTATION: "slurm-failure node=w-0"}
)


def _undoes(plans: list[Plan]) -> list[tuple[str, str]]:
    """(kind, key) of every action that undoes slonkd's marks."""
    return [
        (a.kind.value, a.key)
        for p in plans
        for a in p.actions
        if (a.kind in (Kind.UNCORDON, Kind.UNTAINT))
        or (a.kind is Kind.SET_CONDITION and a.key == "True")
    ]


def test_a_healthy_sibling_keeps_the_marks_of_an_evicted_workers_failure() -> None:
    """Two workers on one K8s node: w-0's SLURM failure marked it and its pod was evicted.

    After the eviction w-0's replacement pod is Pending, bound to no K8s node, so its view
    sees no K8s node; the sibling w-1 is settled and healthy on the marked node. The marks
    are for w-0's failure, which still applies to that K8s node: they must stay.
    """
    pending = replace(pod(ready=False, phase=PodPhase.PENDING), node_name=None)
    evicted = view(
        slurm=slurm("IDLE+DRAIN", "Kill task failed"),
        pod=pending,
        kube_node=None,  # observing: no node_name, no K8s node
        pod_ready_since=None,
        pod_unready_since=NOW - 5,
    )
    sibling = view(node=NodeName("w-1"), kube_node=MARKED_FOR_W0)
    views = [evicted, sibling]
    merged = merge_shared_nodes(views, [decide(v, POLICY) for v in views])
    assert _undoes(merged) == []


def test_the_failed_workers_settled_healthy_pod_undoes_the_marks() -> None:
    """The operator resumed w-0 and its pod is back on the marked K8s node, settled, healthy.

    The failure no longer applies there: slonkd's cordon, taint and condition go (once),
    with or without a healthy sibling on the same K8s node.
    """
    back = view(kube_node=MARKED_FOR_W0)
    sibling = view(node=NodeName("w-1"), kube_node=MARKED_FOR_W0)
    for views in ([back], [back, sibling], [sibling, back]):
        merged = merge_shared_nodes(views, [decide(v, POLICY) for v in views])
        assert sorted(_undoes(merged)) == [
            ("set-condition", "True"),
            ("uncordon", ""),
            ("untaint", FAILURE_TAINT),
        ], views


def test_the_cordon_mark_names_its_slurm_node_and_old_marks_name_none() -> None:
    """``cordon_mark`` round-trips through ``Node.marked_for``; a cause alone names no node."""
    for value, expected in (
        (cordon_mark("health:gpu-xid-79", "w-3"), "w-3"),
        ("slurm-failure", None),
        ("slonkd", None),
        ("slurm-failure node=", None),
    ):
        node = replace(MARKED, annotations={CORDONED_BY_ANNOTATION: value})
        assert node.marked_for == expected, value
    assert knode().marked_for is None


def test_once_the_evicted_worker_runs_elsewhere_the_node_follows_its_own_pods() -> None:
    """w-0's replacement settled on another K8s node: the marks follow the pods still here.

    The remediation ladder's shape: while the sibling w-1 on the marked node fails, the marks
    stay; once its check passes (after the reboot), they are undone, although the cordon
    records w-0.
    """
    other = replace(knode(), name=KubeNodeName("kn-1"))
    moved = view(kube_node=other)  # w-0 settled and healthy on kn-1
    failing = view(
        node=NodeName("w-1"),
        kube_node=MARKED_FOR_W0,
        slurm=slurm("IDLE+DRAIN", "Kill task failed"),
    )
    views = [moved, failing]
    merged = merge_shared_nodes(views, [decide(v, POLICY) for v in views])
    assert _undoes(merged) == []
    healthy = view(node=NodeName("w-1"), kube_node=MARKED_FOR_W0)
    views = [moved, healthy]
    merged = merge_shared_nodes(views, [decide(v, POLICY) for v in views])
    assert sorted(_undoes(merged)) == [
        ("set-condition", "True"),
        ("uncordon", ""),
        ("untaint", FAILURE_TAINT),
    ]


def test_a_remediated_failure_keeps_the_marks_until_its_eviction_shows() -> None:
    """The eviction is recorded as handled: until the pod shows terminating, marks stay.

    CI (stop 32, the real sandbox): the eviction's record (the failure handled) is read
    fresh from the state ConfigMap, the pod's deletion comes through the informer's watch.
    A pass between the two saw the remediated failure no longer counted, w-0's pod still
    Ready on the K8s node marked for it, and lifted the cordon 1.2 s after it was made,
    the healthy sibling with it, while SLURM's failure stood.
    """
    from slonkd.core.slurm_node import failure_fingerprint

    failed = slurm("IDLE+FAIL", "Kill task failed")
    evicted = view(
        slurm=failed, kube_node=MARKED_FOR_W0, handled_failure=failure_fingerprint(failed)
    )
    sibling = view(node=NodeName("w-1"), kube_node=MARKED_FOR_W0)
    for views in ([evicted], [evicted, sibling], [sibling, evicted]):
        merged = merge_shared_nodes(views, [decide(v, POLICY) for v in views])
        assert _undoes(merged) == [], views
        assert not [a for p in merged for a in p.actions if a.kind is Kind.EVICT]
    resumed = view(kube_node=MARKED_FOR_W0, handled_failure=failure_fingerprint(failed))
    merged = merge_shared_nodes([resumed], [decide(resumed, POLICY)])
    assert sorted(_undoes(merged)) == [
        ("set-condition", "True"),
        ("uncordon", ""),
        ("untaint", FAILURE_TAINT),
    ]  # SLURM's failure ended (an operator resumed it): the marks go
