"""Worker rollouts that never kill jobs: which outdated worker pods to replace, and when.

The chart's worker StatefulSets use ``updateStrategy: OnDelete``: the StatefulSet controller
creates a deleted pod again from the update revision but never deletes one itself. The
coordinator does, one node (or a few) at a time inside the disruption budget:

1. a worker pod whose ``controller-revision-hash`` label differs from its StatefulSet's
   ``status.updateRevision`` is *outdated*;
2. its SLURM node is drained with cause ``rollout`` (the reason says so, so a person reading
   ``sinfo -R`` knows why), then the coordinator waits for its jobs up to a limit and
   requeues what is left;
3. the pod is evicted (Eviction API: the pool's PodDisruptionBudget holds too); its preStop
   hook does the rest (drain, wait, down);
4. once the new pod, on the update revision, is Running and Ready, the ``rollout`` cause is
   released (the agent releases its own ``pod-terminating``; the node resumes when no cause
   is left), and the next pod goes.

The state of a rollout is read from the world, not kept in memory: a node whose SLURM
reason set holds ``rollout`` is in progress, so a new leader after a failover carries on
where the old one stopped (each worker's phase: :mod:`slonkd.core.rollout_phase`). While
slonkd is paused (by an operator, or by a corrupt state) the rollout writes nothing in any
phase, and carries on where it stands once unpaused. This module plans a pass from the
phases (:func:`plan_rollout`) and reports the progress;
:mod:`slonkd.runtime.coordinating.rolling` carries the plan out. Pure functions only:
nothing here reads or writes anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slonkd.core.budget import BudgetPolicy, Request, admit, out_of_service
from slonkd.core.config_tree import build
from slonkd.core.reasons import ReasonOwner, parse_reason
from slonkd.core.rollout_phase import (
    ACTIVE,
    Phase,
    StatefulSetRevision,
    WorkerView,
    operator_hold,
    phase_of,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutSettings:
    """How a rollout goes: how many at once, how long jobs may take, how often to look."""

    max_parallel: int = 1
    """Most worker pods being replaced at once (also bounded by the disruption budget)."""
    job_wait_s: float = 600.0
    """How long a drained node's jobs may run before they are requeued."""
    poll_s: float = 2.0
    """A pass at least this often while something is in progress."""
    settle_s: float = 120.0
    """After the release, how long to wait for the node to be back in service (the agent
    releases its own cause) before the next worker goes regardless."""
    requeue_in_prestop: bool = False
    """Jobs still running after ``job_wait_s``, all requeueable: evict the pod with them and
    let its preStop hook signal them for a checkpoint, wait its window and requeue them (the
    chart sets it with ``workers.prestop.checkpoint.signal``). Off: the rollout requeues
    them itself, unsignalled. Either way a job that cannot be requeued blocks the node, and
    none of its other jobs is requeued until it has ended."""

    def __post_init__(self) -> None:
        if not isinstance(self.requeue_in_prestop, bool):
            raise ValueError("rollout.requeue_in_prestop must be true or false")
        if not isinstance(self.max_parallel, int) or self.max_parallel < 1:
            raise ValueError("rollout.max_parallel must be an integer >= 1")
        if self.job_wait_s < 0:
            raise ValueError("rollout.job_wait_s must be >= 0")
        if self.poll_s <= 0:
            raise ValueError("rollout.poll_s must be > 0")
        if self.settle_s < 0:
            raise ValueError("rollout.settle_s must be >= 0")

    @classmethod
    def from_mapping(cls, raw: Any) -> RolloutSettings:
        """Settings from the JSON object of the config file; ValueError naming the key."""
        return build(cls, raw, path="rollout")


def _natural(name: str) -> tuple[str, int]:
    match = re.fullmatch(r"(.*?)(\d+)", name)
    return (match[1], int(match[2])) if match else (name, -1)


def _why_not(view: WorkerView) -> str:
    """Why an outdated worker cannot be started now ("" when it can)."""
    pod, slurm = view.pod, view.slurm
    if pod is not None and pod.terminating:
        return "pod is terminating already (its next pod is made from the update revision)"
    if slurm is None:
        return "SLURM node not seen"
    if not slurm.state.fully_recognised:
        return f"SLURM state {slurm.state} not recognised"
    owner = parse_reason(slurm.live_reason).owner
    if owner in (ReasonOwner.FOREIGN, ReasonOwner.SLURM) or (
        owner is ReasonOwner.NONE and slurm.held
    ):
        return f"SLURM node held by someone else ({slurm.reason[:60] or slurm.state}): left alone"
    return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutPlan:
    """What one pass does, and where every worker stands."""

    start: tuple[str, ...] = ()
    """Outdated workers to drain for the rollout now."""
    release: tuple[str, ...] = ()
    """Workers whose new pod is Ready: release the rollout's cause."""
    draining: tuple[str, ...] = ()
    """Drained for the rollout, pod still outdated: wait for jobs, requeue, evict the pod."""
    phases: Mapping[str, Phase] = field(default_factory=dict)
    waiting: Mapping[str, str] = field(default_factory=dict)
    """Outdated workers not started this pass, and why."""
    held: Mapping[str, str] = field(default_factory=dict)
    """Workers on a held K8s node (any phase): nothing is done to them, and why."""
    paused: str = ""
    """Why nothing is done to any worker now (slonkd paused), "" when the rollout may act."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Pools:
    """The pools' budget as the coordinator counts it: sizes and the nodes out, per pool."""

    sizes: Mapping[str, int]
    out: Mapping[str, frozenset[str]]


def _pools(views: Sequence[WorkerView], reserved: Mapping[str, frozenset[str]]) -> _Pools:
    """Per pool: its workers, and those out of service for any reason (the budget's rule).

    ``reserved``: per pool, the nodes another task was admitted to take out that this read
    may not show yet (:mod:`slonkd.core.reservations`); they are out too.
    """
    sizes: dict[str, int] = {}
    out: dict[str, set[str]] = {pool: set(nodes) for pool, nodes in reserved.items()}
    for v in views:
        if v.pod is None and v.statefulset is None:
            continue  # no pod, and no StatefulSet wants one back: no worker of any pool
        # a worker whose pod is gone a while (evicted, replaced) is still its pool's, and
        # often out: skipped, it left the pool room for one more
        sizes[v.pool] = sizes.get(v.pool, 0) + 1
        if out_of_service(v.slurm, v.kube_node):
            out.setdefault(v.pool, set()).add(v.node)
    return _Pools(sizes=sizes, out={pool: frozenset(nodes) for pool, nodes in out.items()})


def _admit(view: WorkerView, pools: _Pools, policy: BudgetPolicy) -> tuple[bool, _Pools]:
    """Whether the budget admits draining ``view``'s node now, and the pools after it.

    The coordinator's admission (:func:`slonkd.core.budget.admit`), one request at a time in
    the rollout's order. Its breaker verdict is not the rollout's: a refused rollout waits,
    it never opens the breaker (an open breaker reaches the rollout as ``hold``).
    """
    admission = admit(
        [Request(node=view.node, pool=view.pool)],
        out_now=pools.out,
        pool_sizes=pools.sizes,
        policy=policy,
        breaker_open=False,
    )
    if view.node not in admission.admitted:
        return False, pools
    out = dict(pools.out)
    out[view.pool] = out.get(view.pool, frozenset()) | {view.node}
    return True, replace(pools, out=out)


def plan_rollout(
    views: Sequence[WorkerView],
    settings: RolloutSettings,
    *,
    policy: BudgetPolicy,
    hold: str = "",
    paused: str = "",
    reserved: Mapping[str, frozenset[str]] | None = None,
) -> RolloutPlan:
    """The next steps of the rollout over ``views``.

    ``policy`` is the coordinator's disruption budget, admitted by the coordinator's code
    (:func:`slonkd.core.budget.admit`): the nodes of a pool out of service now for any
    reason (:func:`slonkd.core.budget.out_of_service`: drained by anyone, the rollout
    included, cordoned, or tainted by slonkd) use its room, and so do the nodes the pass or
    the fast path reserved that these views may not show yet (``reserved``, per pool: the
    coordinator's gate, :mod:`slonkd.core.reservations`). A worker whose node is not out
    yet costs one unit of its pool's budget when its drain starts; a refused one waits (the
    rollout never opens the breaker). At most
    ``settings.max_parallel`` workers are in the rollout at once.
    ``hold`` (the breaker open) stops new starts; work in progress goes on.
    ``paused`` (slonkd paused by an operator, or its state corrupt or not read yet) stops
    everything: no start, no wait-and-evict, no release; the phases are still read, and the
    rollout carries on from them once unpaused.
    An operator's hold on a worker's K8s node (:func:`operator_hold`) stops everything for
    that worker: it is not started, not evicted, not released, and it takes no slot of
    ``max_parallel`` (the operator has it; the rest of the rollout goes on).
    Outdated pods that are not Ready go first (they serve nothing), then the others by name.
    """
    phases = {v.node: phase_of(v) for v in views}
    held = {v.node: why for v in views if (why := operator_hold(v))}
    pools = _pools(views, reserved or {})
    active = sum(1 for n, p in phases.items() if p in ACTIVE and n not in held)
    room = settings.max_parallel - active
    candidates = sorted(
        (v for v in views if phases[v.node] is Phase.OUTDATED),
        key=lambda v: (bool(v.pod and v.pod.ready), _natural(v.node)),
    )
    start: list[str] = []
    waiting: dict[str, str] = {}
    for view in candidates:
        why = held.get(view.node) or paused or hold or _why_not(view)
        if why:
            waiting[view.node] = why
            continue
        if room <= 0:
            waiting[view.node] = f"at most {settings.max_parallel} at a time"
            continue
        admitted, pools = _admit(view, pools, policy)
        if admitted:
            start.append(view.node)
            room -= 1
        else:
            out = len(pools.out.get(view.pool, ()))  # counting this pass's starts
            limit = policy.limit(pools.sizes.get(view.pool, 0))
            waiting[view.node] = f"disruption budget of pool {view.pool}: {out} of {limit} out"
    if paused:
        return RolloutPlan(phases=phases, waiting=waiting, held=held, paused=paused)
    return RolloutPlan(
        start=tuple(start),
        release=tuple(sorted(n for n, p in phases.items() if p is Phase.DONE and n not in held)),
        draining=tuple(
            sorted(n for n, p in phases.items() if p is Phase.DRAINING and n not in held)
        ),
        phases=phases,
        waiting=waiting,
        held=held,
    )


def progress(
    views: Sequence[WorkerView], plan: RolloutPlan, statefulsets: Sequence[StatefulSetRevision]
) -> dict[str, Any]:
    """JSON-able progress for ``slonkd status``: counts, per StatefulSet, and what waits."""
    counts = {p.value: 0 for p in Phase}
    for phase in plan.phases.values():
        counts[phase.value] += 1
    per_sts: dict[str, dict[str, Any]] = {}
    for sts in sorted(statefulsets, key=lambda s: s.name):
        mine = [v for v in views if v.statefulset is not None and v.statefulset.name == sts.name]
        per_sts[sts.name] = {
            "update_revision": sts.update_revision,
            "on_delete": sts.on_delete,
            "replicas": sts.replicas,
            "updated": sum(1 for v in mine if plan.phases.get(v.node) is Phase.UPDATED),
            "outdated": sum(1 for v in mine if plan.phases.get(v.node) is Phase.OUTDATED),
        }
    in_progress = {n: p.value for n, p in sorted(plan.phases.items()) if p in ACTIVE}
    return {
        "updated": counts[Phase.UPDATED.value],
        "outdated": counts[Phase.OUTDATED.value],
        "in_progress": in_progress,
        "waiting": dict(sorted(plan.waiting.items())),
        "held": dict(sorted(plan.held.items())),
        "paused": plan.paused,
        "statefulsets": per_sts,
        "complete": counts[Phase.OUTDATED.value] == 0 and not in_progress,
    }


__all__ = [
    "RolloutPlan",
    "RolloutSettings",
    "plan_rollout",
    "progress",
]
