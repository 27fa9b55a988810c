"""The disruption budget and the breaker: which automated actions a pass may take.

Every node an automated cause wants out is a request to :func:`slonkd.core.budget.admit`
(per pool, or per pool and topology block); past the budget it is refused, and a mass event
or a suspected check opens the breaker, persisted in the state (:mod:`.remembering`) until a
human resets it. Failures still standing at a reset are admitted within the budget, never as
a new mass event; so are the actions a pool's mode held back once it lets them go
(:mod:`.pool_modes`), and nodes returning from a failure to prove their health
(``revalidating``, :mod:`slonkd.core.revalidation`). Used by the pass (:mod:`.reconciling`)
and the fast path (:mod:`.fast_path`).

One gate for every task of the term: the pass, the fast path and the rollout (:mod:`.rolling`)
each weigh the budget on a read of their own, so a node one of them is admitted for is
reserved in the gate's ledger (:mod:`slonkd.core.reservations`) before its write, and each
admission counts as out the reservations its read may not show yet (issue 37 item 3: the
rollout drained w-0 while a pass on an older read cordoned w-5, two out of a pool with room
for one). :meth:`Gate.take` admits and reserves in one step (no await between them);
:meth:`Gate.written` or :meth:`Gate.release` ends the task's part.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

import structlog

from slonkd.core.budget import (
    Admission,
    BudgetPolicy,
    Request,
    WorkerGroups,
    admit,
    out_of_service,
)
from slonkd.core.plan import Kind, NodeView, Plan, Writer
from slonkd.core.reservations import Ledger, Reservation, shows
from slonkd.core.revalidation import REVALIDATING
from slonkd.core.slurm_node import NodeFlag
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.coordinating.remembering import Memory

log = structlog.get_logger("slonkd.coordinator")

KUBE_LIFTS = frozenset({Kind.UNCORDON, Kind.UNTAINT})
"""Actions on a K8s node that put back every pod on it (one pod's plan carries them)."""
KUBE_NODE_OUT = frozenset({Kind.CORDON, Kind.TAINT, Kind.REQUEST_REBOOT, Kind.MARK_MANUAL})
"""Budgeted actions that take a whole K8s node out: every SLURM node of its pods goes with it.
A drain or an eviction takes out one SLURM node, never its siblings on the same K8s node."""


def is_out(view: NodeView) -> bool:
    """Taken out by someone (:func:`slonkd.core.budget.out_of_service`, the rollout's rule too)."""
    return out_of_service(view.slurm, view.kube_node)


def stays_out(view: NodeView, lifted: frozenset[Kind]) -> bool:
    """Out, and still out once the pass's own actions that put nodes back (``lifted``) are done.

    A node the pass releases, uncordons or untaints is weighed as back in service: counted as
    already out it would make a budgeted action on it look free, and that action would take
    it out again in the same pass, past the budget. Each lifting action is taken to lift the
    whole of its side (a release that leaves another cause standing counts the node in
    service too): the budget then weighs more, never less, than what is out.
    """
    slurm = view.slurm
    if slurm is not None and Kind.RELEASE in lifted:
        slurm = replace(
            slurm, state=replace(slurm.state, flags=slurm.state.flags - {NodeFlag.DRAIN})
        )
    kube = view.kube_node
    if kube is not None and Kind.UNCORDON in lifted:
        kube = replace(kube, unschedulable=False)
    if kube is not None and Kind.UNTAINT in lifted:
        kube = replace(kube, taints=())
    return out_of_service(slurm, kube)


class Gate:
    """The budget's answers for one leader's term, and the breaker it opens."""

    def __init__(
        self, policy: BudgetPolicy, *, block_label: str, memory: Memory, auditor: Auditor
    ) -> None:
        self.policy = policy
        self.block_label = block_label
        self.memory = memory
        self.auditor = auditor
        self._refused: dict[str, str] = {}
        self._standing: frozenset[str] = frozenset()
        """Candidates held back by the breaker when a human reset it (see ``admit``)."""
        self._groups = WorkerGroups(block_label)
        """Each node's group, kept while its pod is gone (see :meth:`groups`)."""
        self.ledger = Ledger()
        """Nodes a task of this term was admitted to take out, until the reads show them."""

    def reset_seen(self) -> None:
        """A human closed the breaker: what it held back stands, to be taken within budget."""
        self._standing = frozenset(self._refused)
        log.info(
            "budget.reset_seen",
            standing=sorted(self._standing)[:50],
            detail="standing candidates are admitted within the budget, never a mass event",
        )

    def add_standing(self, nodes: frozenset[str]) -> None:
        """A pool's mode now lets ``nodes``' held-back actions go: admitted within the budget."""
        if nodes:
            self._standing |= nodes
            log.info("budget.mode_standing", standing=sorted(nodes)[:50])

    def admit(
        self, views: Sequence[NodeView], plans: Sequence[Plan], *, read_at: float | None = None
    ) -> Admission:
        """The budget's answer for every node an automated cause wants out now.

        ``read_at``: when the read behind ``views`` began (monotonic; None: now). The nodes
        other tasks reserved that this read may not show (:meth:`held`) count as out.

        A budgeted action on a K8s node (:data:`KUBE_NODE_OUT`: cordon, taint, reboot, manual
        repair) takes every SLURM node of its pods out: they are one request unit, admitted
        together (after ``merge_shared_nodes`` only one of them carries the action). A sibling
        that wants nothing itself costs room but is no candidate of a mass event; a drain or
        an eviction makes no unit. A node whose only budgeted action is the ``revalidating``
        drain of its return (SLURM or an operator put it back after the ladder acted) is
        returning, no new failure: admitted within the budget, never a mass event.
        """
        return self._admit(views, plans, self._held_for(views, read_at), self.groups(views))

    def take(
        self,
        views: Sequence[NodeView],
        plans: Sequence[Plan],
        *,
        task: str,
        read_at: float,
        takes: Collection[str] | None = None,
        groups: Sequence[str] | None = None,
    ) -> tuple[Admission, int]:
        """Admit as :meth:`admit` does and reserve what ``task`` takes out; the ticket.

        Reserved: the admitted nodes this read shows in service and no reservation holds
        (a node out already costs nothing), of ``takes`` only when given (the nodes the
        task acts on; the fast path marks only the K8s nodes of its failures). ``groups``:
        :meth:`groups` of ``views`` when the caller has them already (the pool modes' split).
        """
        held = self._held_for(views, read_at)
        if groups is None:  # once a pass: the budget's, the modes' and the ledger's pools
            groups = self.groups(views)
        admission = self._admit(views, plans, held, groups)
        reserved = {n for nodes in held.values() for n in nodes}
        fresh = [
            view
            for view in views
            if view.node in admission.admitted
            and (takes is None or view.node in takes)
            and view.node not in reserved
            and not is_out(view)
        ]
        group_of = dict(zip((str(v.node) for v in views), groups, strict=True))
        ticket = self.reserve(
            task,
            {str(v.node): group_of[str(v.node)] for v in fresh},
            pods={str(v.node): v.pod.uid for v in fresh if v.pod is not None},
        )
        return admission, ticket

    def held(
        self, read_at: float, shown: Callable[[Reservation], bool]
    ) -> Mapping[str, frozenset[str]]:
        """Per pool, the reserved nodes a read begun at ``read_at`` may not show (see ledger)."""
        return self.ledger.held(read_at=read_at, now=time.monotonic(), shown=shown)

    def reserve(
        self, task: str, nodes: Mapping[str, str], *, pods: Mapping[str, str] | None = None
    ) -> int:
        """Reserve ``nodes`` (node -> pool; ``pods``: node -> its pod's uid) for ``task``.

        Admitted on :meth:`held`; call it with no await since the admission, so that no other
        task weighs the budget in between. The ticket ends with :meth:`written` or
        :meth:`release`.
        """
        return self.ledger.reserve(task, nodes, pods=pods)

    def written(self, ticket: int, nodes: Collection[str] | None = None) -> None:
        """The task's writes returned: ``nodes`` (None: all) held until the reads show them."""
        self.ledger.written(ticket, now=time.monotonic(), nodes=nodes)

    def release(self, ticket: int) -> None:
        """The task wrote nothing (a dry run, a pause): its reservations end."""
        self.ledger.release(ticket)

    def _held_for(
        self, views: Sequence[NodeView], read_at: float | None
    ) -> Mapping[str, frozenset[str]]:
        if not self.ledger:
            return {}
        by_node: dict[str, NodeView] = {v.node: v for v in views}

        def shown(r: Reservation) -> bool:
            view = by_node.get(r.node)
            return view is not None and shows(
                r, out=is_out(view), pod=view.pod.uid if view.pod is not None else None
            )

        return self.held(time.monotonic() if read_at is None else read_at, shown)

    def _admit(
        self,
        views: Sequence[NodeView],
        plans: Sequence[Plan],
        held: Mapping[str, frozenset[str]],
        groups: Sequence[str],
    ) -> Admission:
        sizes: dict[str, int] = defaultdict(int)
        out: dict[str, set[str]] = defaultdict(set)
        for pool, nodes in held.items():  # reserved by a task, maybe not in this read yet
            out[pool] |= nodes
        restarting: dict[str, set[str]] = defaultdict(set)
        wanting: set[str] = set()  # K8s nodes a budgeted action takes out
        lifting: dict[str, set[Kind]] = defaultdict(set)  # K8s node -> what the pass lifts there
        budgeted: set[str] = set()  # SLURM nodes whose plan has a budgeted coordinator action
        wants: set[str] = set()  # SLURM nodes that want out themselves (not only a unit's)
        returning: set[str] = set()  # ... only to revalidate on their return from a failure
        for view, plan in zip(views, plans, strict=True):
            if view.kube_node is not None and plan.actions:  # most plans of a pass are empty
                lifting[view.kube_node.name] |= {a.kind for a in plan.actions} & KUBE_LIFTS
        for view, plan, pool in zip(views, plans, groups, strict=True):
            sizes[pool] += 1
            ours = plan.for_writer(Writer.COORDINATOR) if plan.actions else ()
            lifted = {a.kind for a in ours} & {Kind.RELEASE}
            if view.kube_node is not None:
                lifted |= lifting.get(view.kube_node.name, set())
            if stays_out(view, frozenset(lifted)):
                out[pool].add(view.node)
                if view.pod is None or view.pod.terminating or view.pod_ready_since is None:
                    restarting[pool].add(view.node)
            if plan.failure is not None:
                wants.add(view.node)  # its marks may be carried by a sibling's plan
            if takes := [a for a in ours if a.budgeted]:
                budgeted.add(view.node)
                wants.add(view.node)
                if all(a.kind is Kind.DRAIN and a.cause == REVALIDATING for a in takes):
                    returning.add(view.node)
                if view.kube_node is not None and any(a.kind in KUBE_NODE_OUT for a in takes):
                    wanting.add(view.kube_node.name)
        requests = []
        for view, pool in zip(views, groups, strict=True):
            kube = view.kube_node.name if view.kube_node is not None else ""
            unit = f"k8s-node/{kube}" if kube in wanting else ""
            if unit or view.node in budgeted:
                requests.append(
                    Request(
                        node=view.node,
                        pool=pool,
                        unit=unit,
                        wants=view.node in wants,
                        returning=view.node in returning,
                    )
                )
        return admit(
            requests,
            out_now={k: frozenset(v) for k, v in out.items()},
            pool_sizes=sizes,
            restarting={k: frozenset(v) for k, v in restarting.items()},
            policy=self.policy,
            breaker_open=self.memory.state.breaker_open,
            standing=self._standing,
        )

    def keep_standing(self, admission: Admission) -> None:
        """Forget standing candidates that no longer want out."""
        self._standing &= admission.admitted | frozenset(admission.refused)

    def groups(self, views: Sequence[NodeView]) -> list[str]:
        """Each view's budget group; a node whose pod is gone keeps its pool (``WorkerGroups``)."""
        return self._groups.resolve(
            (
                str(v.node),
                v.pod.labels if v.pod is not None else None,
                v.kube_node.labels if v.kube_node is not None else None,
            )
            for v in views
        )

    def log_refusals(self, admission: Admission) -> None:
        """One log line per node and reason when the budget keeps it in (not every pass)."""
        for node, why in sorted(admission.refused.items()):
            if self._refused.get(node) != why:
                log.warning("budget.refused", node=node, reason=why, owner="coordinator")
        self._refused = dict(admission.refused)

    async def open_breaker(self, why: str, token: int) -> None:
        """Open the breaker: persisted, logged, an Event; only a human closes it."""
        dry_run = self.auditor.dry_run
        if dry_run and not self.auditor.seen.is_new("*", ("open-breaker",), why):
            return  # a dry run never persists it: said once per reason, not every pass
        log.error("budget.breaker_opened", reason=why, owner="coordinator")
        self.auditor.log.record(
            action="open-breaker",
            node="*",
            cause=why,
            fencing_token=token,
            outcome="dry-run" if dry_run else "opened",
            dry_run=dry_run,
        )
        if dry_run:
            return
        await self.memory.update(
            token,
            lambda st: replace(
                st, breaker_open=True, breaker_reason=why, breaker_opened_at=time.time()
            ),
        )
        await self.memory.warn(
            "BreakerOpen", f"slonkd: automated actions stopped until `slonkd budget reset`: {why}"
        )
