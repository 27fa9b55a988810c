"""The fast path: a marks-only pass for the SLURM failures a poll just saw, before the next pass.

The poll (:mod:`slonkd.runtime.coordinating.slurm_watch`) read the nodes whose reason or state
changed exactly (state, reason, who and when) and put them on the term's queue as a typed
:class:`~.slurm_watch.SlurmChange`, then woke the term's loop (:mod:`.term`), which runs
:meth:`FastPath.mark` once per wake, before the debounce and the whole pass. For a reason that
is SLURM's own (a failure), the last pass's read (:attr:`.pass_read.PassRead.last`) with those
nodes replaced is all the pass's planner (:class:`~slonkd.core.fleet_decide.FleetPlanner`)
needs to mark their K8s nodes: cordon, taint, the ``SlurmHealthy`` condition and the Event
(:data:`.executing.MARKS`), those the pool's mode takes (:mod:`.pool_modes`). Only those
marking actions are taken, inside the disruption
budget, asked of the one gate as a pass asks it (:mod:`.admitting`) on that read: the nodes of
the K8s nodes it marks are reserved there until the reads show them, and what the rollout or
a pass reserved since that read counts as out (issue 37 item 3); the full pass that follows
(:mod:`.reconciling`, as soon as the read limiter allows) does everything else. The lease is
checked right before each write; a failure is logged and left to that pass, except a newer
fencing token (:class:`~slonkd.adapters.kube.lease.Superseded`): raised, the term ends as it
does when a pass meets one (:mod:`.term`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from slonkd.adapters.kube.lease import Superseded
from slonkd.core.errors import SlonkdError
from slonkd.core.fleet_decide import FleetPlanner
from slonkd.core.plan import NodeView, Plan, Writer
from slonkd.core.reasons import ReasonOwner, reason_owner
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.coordinating.admitting import Gate
from slonkd.runtime.coordinating.executing import MARKS, Executor
from slonkd.runtime.coordinating.observing import Observer
from slonkd.runtime.coordinating.pass_read import PassRead
from slonkd.runtime.coordinating.pool_modes import PoolModes
from slonkd.runtime.coordinating.remembering import Memory
from slonkd.runtime.coordinating.slurm_watch import SlurmChange

log = structlog.get_logger("slonkd.coordinator")


@dataclass(frozen=True, slots=True, kw_only=True)
class FastPath:
    """Marks the K8s nodes of SLURM failures a poll saw: once on each wake, before the pass."""

    changes: asyncio.Queue[SlurmChange]
    """What the poll saw change (it puts, only the fast path takes)."""
    read: PassRead
    """The passes' reads: the last one's table is what the changes are patched into."""
    observer: Observer
    memory: Memory
    planner: FleetPlanner
    gate: Gate
    executor: Executor
    check_valid: Callable[[], int]
    """The fencing token, or an error when the lease is not held right now."""
    modes: PoolModes | None = None
    """Each pool's mode: a mark its mode holds back is not taken (the pass reports it)."""

    async def mark(self) -> None:
        """Mark K8s nodes for the failures the poll saw since the last pass's read.

        The changes are taken whatever happens (a change the last read has, or one before
        any pass read SLURM, is the next pass's); the budget counts what was reserved since
        that read began as out.
        """
        last = self.read.last
        changes = [self.changes.get_nowait() for _ in range(self.changes.qsize())]
        if last is None:
            return
        # what came before the last pass's read began, that read has; what came later stays
        # news: the poll's read may have begun after the pass's (reads overlap)
        fresh = [n for c in changes if c.seen_at >= last.read_began for n in c.nodes]
        failing = {n.name: n for n in fresh if reason_owner(n.live_reason) is ReasonOwner.SLURM}
        if not failing:
            return
        patched = [failing.get(n.name, n) for n in last.nodes]
        try:
            await self._apply_marks(patched, set(failing), last.read_began)
        except Superseded:
            raise  # a newer token (FencedError among them): the elector ends this term
        except SlonkdError as exc:
            log.warning("coordinator.fast_marks_failed", error=str(exc)[:300])

    async def _apply_marks(
        self, slurm_nodes: list[SlurmNode], failing: set[str], read_at: float
    ) -> None:
        views = self.observer.views(slurm_nodes, time.time(), self.memory.state)
        plans, _ = self.planner(views)
        groups = self.gate.groups(views)
        if self.modes is not None:
            plans, _ = self.modes.filter(plans, groups, self.memory.state)
        token = self.check_valid()
        admission, ticket = self.gate.take(
            views, plans, task="fast-path", read_at=read_at,
            takes=_taken(views, plans, failing), groups=groups,
        )  # fmt: skip
        marked = []
        try:
            for view, plan in zip(views, plans, strict=True):
                if view.node not in failing:
                    continue
                actions = [
                    a
                    for a in plan.for_writer(Writer.COORDINATOR)
                    if a.kind in MARKS and not (a.budgeted and view.node in admission.refused)
                ]
                done, _ = await self.executor.apply_kube_all(view, actions, token, self.check_valid)
                if done:
                    marked.append(view.node)
        finally:  # held until the reads show the marks (a dry run: nothing)
            (self.gate.release if self.executor.auditor.dry_run else self.gate.written)(ticket)
        if marked:
            log.info("coordinator.fast_marks", nodes=sorted(set(marked)))


def _taken(views: Sequence[NodeView], plans: Sequence[Plan], failing: set[str]) -> set[str]:
    """The nodes the fast path takes out if admitted: those of each K8s node it cordons or taints.

    A budgeted mark of a failing node's plan takes out every SLURM node of that K8s node
    (:data:`.admitting.KUBE_NODE_OUT`); the other budgeted actions of the plans are the
    pass's.
    """
    kube = {
        view.kube_node.name
        for view, plan in zip(views, plans, strict=True)
        if view.node in failing
        and view.kube_node is not None
        and any(a.budgeted and a.kind in MARKS for a in plan.for_writer(Writer.COORDINATOR))
    }
    return {v.node for v in views if v.kube_node is not None and v.kube_node.name in kube}
