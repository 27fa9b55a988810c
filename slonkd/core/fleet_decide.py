"""Decisions across nodes, after :func:`~slonkd.core.decide.decide` planned each alone.

Two rules need the whole fleet's plans at once, applied in this order by
:class:`FleetPlanner`, the one planning of the coordinator's passes and its fast path:

- pods that share one Kubernetes node must agree on that node's marks
  (:func:`merge_shared_nodes`): it is marked if any of its SLURM nodes failed, and
  slonkd's marks are undone only when none did and the SLURM node the cordon records has a
  settled pod again;
- a health check that fails on many nodes at once is suspected, not believed
  (:func:`suspect_common_causes`): nothing more is taken out for it.

Neighbours: :mod:`slonkd.core.decide` (the per-node rules and the plan types), the
coordinator's pass (:mod:`slonkd.runtime.coordinating.reconciling`) and its fast path
(:mod:`slonkd.runtime.coordinating.fast_path`), which both plan with one
:class:`FleetPlanner` (built by :mod:`slonkd.runtime.coordinating.composing`) before
admission (:mod:`slonkd.runtime.coordinating.admitting`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from slonkd.core.decide import decide, held_causes
from slonkd.core.health import Verdict
from slonkd.core.kube_actions import holds_marks
from slonkd.core.plan import Action, Kind, NodeView, Plan, Policy
from slonkd.core.reasons import Cause, cause_detail

_FAILURE_MARKS = frozenset(
    {Kind.CORDON, Kind.TAINT, Kind.EVENT, Kind.EVICT, Kind.REQUEST_REBOOT, Kind.MARK_MANUAL}
)
_UNDO_MARKS = frozenset({Kind.UNCORDON, Kind.UNTAINT})
_PER_KUBE_NODE = _FAILURE_MARKS | _UNDO_MARKS | {Kind.SET_CONDITION}


def _undoes_marks(action: Action) -> bool:
    return action.kind in _UNDO_MARKS or (
        action.kind is Kind.SET_CONDITION and action.key == "True"
    )


def merge_shared_nodes(views: list[NodeView], plans: list[Plan]) -> list[Plan]:
    """Make the K8s-node actions of pods that share a K8s node agree.

    A K8s node is marked unhealthy if any of its pods' SLURM nodes failed; slonkd's marks are
    undone only when none did, none of its pods is in its lifecycle (an evicted pod's
    failure is unseen while it terminates), and the SLURM node slonkd's cordon records
    (:attr:`~slonkd.core.kube_objects.Node.marked_for`) has a settled pod again, here or
    elsewhere (its evicted pod, Pending, would otherwise come back to this machine as soon as
    a healthy sibling's pass lifted the marks). Per-node actions (cordon, taint, condition)
    are kept once.
    """
    failing: set[str] = set()
    for view, plan in zip(views, plans, strict=True):
        if view.kube_node is not None and (plan.failure is not None or holds_marks(view)):
            failing.add(view.kube_node.name)  # marked, or kept marked for a pod in lifecycle
    settled = {
        v.node
        for v in views
        if v.kube_node is not None and v.pod is not None and v.pod.ready and not v.pod.terminating
    }
    for view in views:
        knode = view.kube_node
        if knode is not None and knode.marked_for is not None and knode.marked_for not in settled:
            # the marks are for a SLURM node whose pod has not settled anywhere since its
            # eviction (Pending, starting): a healthy sibling here says nothing of that failure,
            # and undoing the marks would let its replacement land back on this machine
            failing.add(knode.name)
    merged = []
    emitted: set[tuple[str, Kind, str]] = set()
    for view, plan in zip(views, plans, strict=True):
        kube = view.kube_node.name if view.kube_node is not None else ""
        kept = []
        for action in plan.actions:
            if action.kind in _PER_KUBE_NODE and kube:
                if kube in failing and _undoes_marks(action):
                    continue
                once = (kube, action.kind, action.key)
                if action.kind is not Kind.EVICT and once in emitted:
                    continue
                emitted.add(once)
            kept.append(action)
        same = len(kept) == len(plan.actions)  # a new Plan only where an action went
        merged.append(plan if same else replace(plan, actions=tuple(kept)))
    return merged


def suspect_common_causes(
    views: list[NodeView], plans: list[Plan], *, min_nodes: int, fraction: float
) -> tuple[list[Plan], frozenset[Cause]]:
    """When many nodes fail the same health check at once, suspect the check, not the nodes.

    A health cause reported as ``fail`` by at least ``max(min_nodes, fraction * nodes)``
    nodes right now (taken out already or not) is dropped from every plan: nothing more is
    drained, cordoned or evicted for it. Releases are never dropped. The caller reports the
    suspected causes; what was taken out before the count was reached stays out (inside the
    disruption budget) for a person to look at.
    """
    counts: dict[Cause, int] = {}
    for view in views:
        failing = {
            Cause(name="health", detail=cause_detail(r.cause or r.check)[:64])
            for r in view.health.values()
            if r.verdict is Verdict.FAIL
        }
        held = held_causes(view.slurm) if view.slurm is not None else None
        failing |= {c for c in held or () if c.name == "health"}  # already taken out for it
        for cause in failing:
            counts[cause] = counts.get(cause, 0) + 1
    limit = max(min_nodes, int(fraction * len(views) + 0.999))
    suspected = frozenset(c for c, n in counts.items() if n >= limit)
    if not suspected:
        return plans, suspected
    kept = [
        replace(
            p,
            actions=tuple(
                a
                for a in p.actions
                if a.cause not in suspected or _undoes_marks(a) or a.kind is Kind.RELEASE
            ),
        )
        for p in plans
    ]
    return kept, suspected


@dataclass(slots=True, kw_only=True)
class FleetPlanner:
    """The plans of a whole fleet's views: ``decide`` per node, then the two fleet rules.

    One instance per term serves the pass and the fast path alike, so both plan the same
    way; ``policy`` is the term's (revalidation off without a bus).
    """

    policy: Policy
    suspect_min_nodes: int
    suspect_fraction: float

    def __call__(self, views: list[NodeView]) -> tuple[list[Plan], frozenset[Cause]]:
        """The views' plans (shared K8s nodes merged, suspected checks dropped) and suspects."""
        plans = merge_shared_nodes(views, [decide(v, self.policy) for v in views])
        return suspect_common_causes(
            views, plans, min_nodes=self.suspect_min_nodes, fraction=self.suspect_fraction
        )
