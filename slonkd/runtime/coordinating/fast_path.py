"""The fast path: K8s marks for the SLURM failures a poll just saw, before the next pass.

The poll (:mod:`slonkd.runtime.slurm_watch`) read the nodes whose reason or state changed
exactly (state, reason, who and when) and handed them to :mod:`.observing`. For a reason that
is SLURM's own (a failure), the last full read with those nodes replaced is all ``decide``
needs to mark their K8s nodes: cordon, taint, the ``SlurmHealthy`` condition and the Event
(:data:`.executing.MARKS`). Only those marking actions are taken, inside the disruption
budget, asked as a pass asks it (:mod:`.admitting`); the full pass that follows
(:mod:`.reconciling`, as soon as the read limiter allows) does everything else. The lease is
checked right before each write; a failure is logged and left to that pass, except a newer
fencing token (:class:`~slonkd.adapters.kube.lease.Superseded`): raised, the term ends as it
does when a pass meets one (:mod:`.leading`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from slonkd.adapters.kube.lease import Superseded
from slonkd.core.errors import SlonkdError
from slonkd.core.plan import NodeView, Plan, Writer
from slonkd.core.reasons import Cause, ReasonOwner, reason_owner
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.coordinating.admitting import Gate
from slonkd.runtime.coordinating.executing import MARKS, Executor
from slonkd.runtime.coordinating.observing import Observer
from slonkd.runtime.coordinating.remembering import Memory

log = structlog.get_logger("slonkd.coordinator")

Planner = Callable[[list[NodeView]], tuple[list[Plan], frozenset[Cause]]]
"""A pass's planning: the plans of the views (shared K8s nodes merged) and suspected causes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FastPath:
    """Marks the K8s nodes of SLURM failures a poll saw, between two passes."""

    observer: Observer
    memory: Memory
    gate: Gate
    executor: Executor
    plans: Planner
    check_valid: Callable[[], int]
    """The fencing token, or an error when the lease is not held right now."""

    async def mark(self, last_read: list[SlurmNode] | None) -> None:
        """Mark K8s nodes for the failures the poll saw since, patched into ``last_read``.

        ``last_read`` is the last full SLURM read (None: no pass read SLURM yet, nothing
        to patch).
        """
        fresh = self.observer.take_fresh()
        if not fresh or last_read is None:
            return
        failing = {n.name: n for n in fresh if reason_owner(n.live_reason) is ReasonOwner.SLURM}
        if not failing:
            return
        patched = [failing.get(n.name, n) for n in last_read]
        try:
            await self._apply_marks(patched, set(failing))
        except Superseded:
            raise  # a newer token (FencedError among them): the elector ends this term
        except SlonkdError as exc:
            log.warning("coordinator.fast_marks_failed", error=str(exc)[:300])

    async def _apply_marks(self, slurm_nodes: list[SlurmNode], failing: set[str]) -> None:
        views = self.observer.views(slurm_nodes, time.time(), self.memory.state)
        plans, _ = self.plans(views)
        admission = self.gate.admit(views, plans)
        token = self.check_valid()
        marked = []
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
        if marked:
            log.info("coordinator.fast_marks", nodes=sorted(set(marked)), fencing_token=token)
