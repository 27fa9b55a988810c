"""The leader's admission of one pass (``Gate.admit``): which nodes a pass's plans take out.

Mostly issue 37 item 4, the sandbox's scenario as one pass's pure planning (``decide``,
``merge_shared_nodes``, ``suspect_common_causes``, then the
:class:`~slonkd.runtime.coordinating.admitting.Gate`): four workers of pool ``worker``
(limit 1), two failed with SLURM's ``Kill task failed``, the breaker opened, a person reset
it, slonkd evicted both, their new pods landed where the scheduler put them (worker-2 beside
worker-1 on one K8s node: the failed ones' K8s nodes are still cordoned), and the operator
resumed both SLURM nodes. The pass that sees them back drains them ``revalidating`` (the
ladder's record says their return starts the proof): no new failure, and worker-1, which
wants nothing, is no candidate.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from slonkd.adapters.kube.ports import EventWrites
from slonkd.core.budget import Admission, BudgetPolicy
from slonkd.core.decide import decide
from slonkd.core.fleet_decide import merge_shared_nodes, suspect_common_causes
from slonkd.core.health import Remediation, fail, ok
from slonkd.core.kube_objects import KubeNodeName, Node, Pod, PodName, PodPhase
from slonkd.core.plan import Kind, NodeView, Plan, Policy, Remediations
from slonkd.core.revalidation import Pending
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode, failure_fingerprint
from slonkd.runtime.coordinating.admitting import Gate
from slonkd.runtime.coordinating.audit_log import AuditLog
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.coordinating.remembering import Memory

NOW = 50_000.0
EVICTED_AT = NOW - 300
FAILED = datetime.fromtimestamp(EVICTED_AT - 60, UTC)
POOL = {"slonk.dev/pool": "worker"}


def _slurm(name: str, state: str = "IDLE", reason: str = "") -> SlurmNode:
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName(name),
        state=NodeState.from_tokens(base, flags),
        reason=reason,
        reason_time=FAILED if reason else None,
    )


def _kube(name: str) -> Node:
    return Node(
        name=KubeNodeName(name), uid=f"uid-{name}", resource_version="1", unschedulable=False
    )


def _view(
    name: str, on: str, slurm: SlurmNode, *, returning: bool = False, ready_for: float = 3600
) -> NodeView:
    """Worker ``name`` settled on K8s node ``on``; ``returning``: evicted by the ladder."""
    pod = Pod(
        name=PodName(name),
        namespace="slonk",
        uid=f"{name}-{'b' if returning else 'a'}",
        resource_version="1",
        node_name=KubeNodeName(on),
        phase=PodPhase.RUNNING,
        ready=True,
        labels=POOL,
    )
    failed = _slurm(name, "IDLE+FAIL", "Kill task failed")
    return NodeView(
        node=NodeName(name),
        now=NOW,
        slurm=slurm,
        pod=pod,
        kube_node=_kube(on),
        pod_ready_since=NOW - ready_for,
        health={"gpu": ok("gpu"), "slurmd": ok("slurmd")},
        handled_failure=failure_fingerprint(failed) if returning else "",
        revalidation=Pending(since=EVICTED_AT) if returning else None,  # the ladder's record
        remediation=Remediations(),  # the history is the old K8s node's, not the new one's
    )


def _gate() -> Gate:
    memory = Memory(
        store=cast(Any, None),  # admission reads the breaker from ``state`` only
        events=cast(EventWrites, None),
        namespace="slonk",
        name="slonkd-state",
    )
    return Gate(
        BudgetPolicy(),  # 4 workers: limit 1, a mass event past 1
        block_label="",
        memory=memory,
        auditor=Auditor(cast(AuditLog, None), dry_run=False),
    )


def _pass(gate: Gate, views: list[NodeView]) -> tuple[list[Plan], Admission]:
    """One pass's planning and admission, in the coordinator's order."""
    plans = merge_shared_nodes(views, [decide(v, Policy()) for v in views])
    plans, suspected = suspect_common_causes(views, plans, min_nodes=3, fraction=0.3)
    assert not suspected
    admission = gate.admit(views, plans)
    gate.keep_standing(admission)
    return plans, admission


def _resumed() -> list[NodeView]:
    """After the operator's resume: worker-0 alone on kn-4, worker-2 beside worker-1."""
    return [
        _view("worker-0", "kn-4", _slurm("worker-0"), returning=True, ready_for=200),
        _view("worker-1", "kn-1", _slurm("worker-1")),
        _view("worker-2", "kn-1", _slurm("worker-2"), returning=True, ready_for=200),
        _view("worker-3", "kn-3", _slurm("worker-3")),
    ]


def test_revalidation_after_an_operators_resume_is_admitted_within_the_budget() -> None:
    """Both returned nodes want ``revalidating``: one fits the limit, the other waits.

    Neither is a new failure, so no mass event and no breaker; worker-1, which wants
    nothing, is no candidate at all (on the old code its K8s node joined worker-2's drain
    as one unit: "mass event in pool worker: 3 of 4 nodes at once").
    """
    gate = _gate()
    plans, admission = _pass(gate, _resumed())
    drains = {
        p.node: [(a.kind, str(a.cause), a.budgeted) for a in p.actions] for p in plans if p.actions
    }
    assert drains == {
        "worker-0": [(Kind.DRAIN, "revalidating", True)],
        "worker-2": [(Kind.DRAIN, "revalidating", True)],
    }
    assert admission.open_breaker == ""
    assert admission.admitted == {"worker-0"}
    assert set(admission.refused) == {"worker-2"}
    assert admission.refused["worker-2"].startswith("deferred"), admission.refused
    assert "worker-1" not in admission.admitted | set(admission.refused)


def test_the_second_returned_node_follows_once_the_first_is_back() -> None:
    """Pass by pass: worker-2 waits while worker-0 proves its health, then takes its turn."""
    gate = _gate()
    views = _resumed()
    _pass(gate, views)
    proving = replace(views[0], slurm=_slurm("worker-0", "IDLE+DRAIN", "slonkd:revalidating"))
    _, admission = _pass(gate, [proving, *views[1:]])
    assert admission.open_breaker == ""
    assert admission.refused["worker-2"].startswith("deferred"), admission.refused
    back = replace(views[0], revalidation=None)  # passed: released, the record dropped
    _, admission = _pass(gate, [back, *views[1:]])
    assert admission.open_breaker == ""
    assert admission.admitted == {"worker-2"}


def test_a_new_failure_beside_returning_nodes_still_counts() -> None:
    """Returning nodes are no mass event; a failure new in the same pass is weighed as ever.

    worker-3 fails a health check while both returned nodes want ``revalidating``: it is the
    only new candidate (one is no mass event in a pool of 4), and the room (1) goes to the
    first returned node; the failure is refused as the budget's exhaustion, which opens the
    breaker as it always did.
    """
    gate = _gate()
    views = _resumed()
    sick = replace(views[3], health={"gpu": fail("gpu", "gpu-xid-79", Remediation.REBOOT)})
    _, admission = _pass(gate, [*views[:3], sick])
    assert "worker-3" in admission.refused
    assert "mass event" not in admission.open_breaker
    assert "exhausted" in admission.open_breaker


def test_two_failing_pods_of_one_k8s_node_are_two_candidates() -> None:
    """The cordon is carried by one pod's plan; the other pod's failure still counts.

    Marks only (no eviction): after ``merge_shared_nodes`` worker-1's plan has no budgeted
    action left, yet it failed too: two of four at once are a mass event, as they always were.
    """
    broken = _slurm("w", "IDLE+FAIL", "Kill task failed")
    late = datetime.fromtimestamp(NOW - 10, UTC)  # after the pods became Ready
    views = [
        _view(n, on, replace(broken, name=NodeName(n), reason_time=late))
        for n, on in (("worker-0", "kn-0"), ("worker-1", "kn-0"))
    ] + [
        _view("worker-2", "kn-2", _slurm("worker-2")),
        _view("worker-3", "kn-3", _slurm("worker-3")),
    ]
    plans = merge_shared_nodes(views, [decide(v, Policy(remediate=False)) for v in views])
    assert not any(a.budgeted for a in plans[1].actions)
    admission = _gate().admit(views, plans)
    assert "mass event in pool worker: 2 of 4" in admission.open_breaker


MOUNT_FAILS = {"mount": fail("mount", "mount-missing", Remediation.MANUAL)}


def test_a_node_whose_pod_is_being_replaced_still_counts_in_its_pool() -> None:
    """worker-3 is out (slonkd's health drain) while its pod is deleted and not yet back.

    Its pool is its pod's label: with no pod the old gate counted it in pool ``default``, so
    pool ``worker`` had room for worker-2's new failure and two of four were out against a
    limit of 1 (the soak's I4). A node keeps the pool of the pod it last had.
    """
    gate = _gate()
    held = _slurm("worker-3", "IDLE+DRAIN", "slonkd:health:mount-missing by slonkd agent")
    views = [
        _view("worker-0", "kn-0", _slurm("worker-0")),
        _view("worker-1", "kn-1", _slurm("worker-1")),
        _view("worker-2", "kn-2", _slurm("worker-2")),
        replace(_view("worker-3", "kn-3", held), health=MOUNT_FAILS),
    ]
    _, admission = _pass(gate, views)  # worker-3's pod seen: pool worker
    assert [(p.pool, p.out) for p in admission.pools] == [("worker", 1)]
    gone = replace(views[3], pod=None, kube_node=None, pod_ready_since=None)
    sick = replace(views[2], health=MOUNT_FAILS)
    _, admission = _pass(gate, [views[0], views[1], sick, gone])
    assert "worker-2" in admission.refused, admission
    assert "worker-2" not in admission.admitted
    assert [(p.pool, p.size, p.out) for p in admission.pools] == [("worker", 4, 1)]


def test_a_new_terms_first_pass_finds_a_pod_less_nodes_pool_by_its_statefulset() -> None:
    """No pod seen yet for worker-3 in this term: its StatefulSet siblings name the pool.

    A worker's SLURM node is its pod's name, ``<statefulset>-<ordinal>``; its siblings' pool
    is its pool (a new leader's first pass must not count it in ``default`` either).
    """
    held = _slurm("worker-3", "IDLE+DRAIN", "slonkd:health:mount-missing by slonkd agent")
    views = [
        _view("worker-0", "kn-0", _slurm("worker-0")),
        _view("worker-1", "kn-1", _slurm("worker-1")),
        _view("worker-2", "kn-2", _slurm("worker-2"), ready_for=3600),
        replace(
            _view("worker-3", "kn-3", held),
            pod=None,
            kube_node=None,
            pod_ready_since=None,
            health=MOUNT_FAILS,
        ),
    ]
    views[2] = replace(views[2], health=MOUNT_FAILS)
    _, admission = _pass(_gate(), views)
    assert "worker-2" in admission.refused, admission
    assert [(p.pool, p.size, p.out) for p in admission.pools] == [("worker", 4, 1)]
