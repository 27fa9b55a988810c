"""The executors: every coordinator action kind, dispatched through one table per writer.

SLURM actions go out grouped by kind and cause in hostlist calls (requeues per node); K8s
actions per K8s node. Each kind's write is one entry of :attr:`Executor.slurm_writes` or
:attr:`Executor.kube_writes` (the remediation steps are :mod:`.remediating`'s); the audit
record (:mod:`.auditing`), the metric and the log line of every write are made in one place
(a K8s write's here, a SLURM write's in :mod:`.recording`, which the rollout's writes share),
and so is the dry run, which plans and audits but writes nothing. :meth:`Executor.isolated`
keeps one failing action from aborting the rest of a pass (:mod:`.reconciling`) without ever
hiding a lost lease. A SLURM write whose outcome is unknown (it may have landed: the adapter
never sends it again, see :mod:`slonkd.adapters.slurm.cas_apply`) is recorded as such, not as
a failure, and left to the next pass's fresh read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from slonkd.adapters.kube.lease import Superseded
from slonkd.adapters.kube.ports import EventWrites, NodeWrites
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.errors import OutcomeUnknownError, SlonkdError
from slonkd.core.kube_actions import MANUAL_TAINT, REBOOT_TAINT
from slonkd.core.kube_changes import ChangeResult, ObjectRef
from slonkd.core.kube_objects import Node, TaintEffect, cordon_mark
from slonkd.core.plan import Action, Kind, NodeView
from slonkd.core.reasons import Cause
from slonkd.runtime.coordinating.auditing import Auditor, failure_outcome
from slonkd.runtime.coordinating.recording import record_requeue, record_update
from slonkd.runtime.coordinating.remediating import Remediator
from slonkd.runtime.coordinating.values import kube_text, label_value
from slonkd.runtime.kit.metrics import Metrics

log = structlog.get_logger("slonkd.coordinator")

SLURM_KINDS = frozenset({Kind.DRAIN, Kind.DOWN, Kind.RELEASE, Kind.REQUEUE})
"""The coordinator's SLURM actions (grouped by kind and cause); every other kind is K8s."""
MARKS = frozenset({Kind.CORDON, Kind.TAINT, Kind.SET_CONDITION, Kind.EVENT})
"""What the fast path may do: mark a K8s node (undone when healthy), never evict or drain."""
BY = "by slonkd coordinator"
T = TypeVar("T")

SlurmWrite = Callable[[list[str], Cause], Awaitable[UpdateResult]]
"""A hostlist update of SLURM nodes for one cause."""
KubeWrite = Callable[[NodeView, Node, Action, int], Awaitable[ChangeResult | None]]
"""One action on a view's K8s node (view, node, action, fencing token); None: not possible."""


def joined(actions: Sequence[Action]) -> list[tuple[Action, ...]]:
    """A node's K8s actions in order, a cordon and the taint right after it joined.

    Those two go as one write (``NodeWrites.cordon_and_taint``): the node lifecycle
    controller writes the node right after a cordon, so a second write would meet a conflict.
    """
    out: list[tuple[Action, ...]] = []
    for action in actions:
        last = out[-1] if out else ()
        if action.kind is Kind.TAINT and len(last) == 1 and last[0].kind is Kind.CORDON:
            out[-1] = (last[0], action)
        else:
            out.append((action,))
    return out


async def finished(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work``; cancelled meanwhile (the term ended), still await its end, then stop.

    A write on its way may land whatever its sender does next, so it is never abandoned
    between the request and its audit record: its answer is awaited (each call has its
    timeout), audited and logged, and only then is the cancellation raised. Nothing after it
    is written.
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            log.info("coordinator.write_finished_after_term")
            await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            log.warning("coordinator.write_failed_after_term", error=str(task.exception())[:300])
        raise


@dataclass(slots=True, kw_only=True)
class Executor:
    """Writes the actions a pass admitted, audited, counted and logged."""

    slurm: SlurmBackend
    nodes: NodeWrites
    events: EventWrites
    remediator: Remediator
    auditor: Auditor
    metrics: Metrics
    is_valid: Callable[[], bool]
    """Whether the lease is still held (a failure under a lost lease is raised, not isolated)."""
    slurm_writes: dict[Kind, SlurmWrite] = field(init=False)
    """Kind.REQUEUE is not here: it is per node, with its own record (:meth:`_requeue`)."""
    kube_writes: dict[Kind, KubeWrite] = field(init=False)

    def __post_init__(self) -> None:
        self.slurm_writes = {
            Kind.DRAIN: lambda names, cause: self.slurm.drain(names, cause, BY),
            Kind.DOWN: lambda names, cause: self.slurm.down(names, cause, BY),
            Kind.RELEASE: lambda names, cause: self.slurm.resume(names, cause),
        }
        remediator = self.remediator
        self.kube_writes = {
            Kind.CORDON: self._cordon,
            Kind.UNCORDON: self._uncordon,
            Kind.TAINT: self._taint,
            Kind.UNTAINT: self._untaint,
            Kind.SET_CONDITION: self._set_condition,
            Kind.EVENT: self._event,
            Kind.EVICT: remediator.evict,
            Kind.REQUEST_REBOOT: remediator.escalate,
            Kind.MARK_MANUAL: remediator.escalate,
        }

    async def isolated(
        self,
        work: Coroutine[Any, Any, None],
        *,
        action: Kind,
        cause: Cause,
        nodes: Sequence[str],
        token: int,
        also: Sequence[Kind] = (),
    ) -> int:
        """Run one action of a pass; its failure is logged and audited, the pass goes on.

        Returns 1 when it failed. A lost lease is never swallowed: the error is raised again
        when the lease is no longer valid, or when a newer leader's token was met
        (``Superseded``), so a deposed leader writes nothing more. The next
        pass (an event, a poll change or the resync) tries the failed action again. A write
        whose outcome is unknown is logged as ``coordinator.action_outcome_unknown``: the next
        pass reads what it did (if anything) and plans afresh; nothing sends it again as it was.
        """
        try:
            await finished(work)
        except Superseded:
            raise  # a newer leader wrote: this term ends, whatever the Lease says
        except SlonkdError as exc:
            if not self.is_valid():
                raise
            outcome, why = failure_outcome(exc)
            for kind in (action, *also):  # ``also``: written in the same call, failed with it
                self.metrics.applied(kind.value, cause.name, changed=False, skipped=[why])
                for node in nodes:
                    self.auditor.record(kind.value, node, cause, token, outcome, None)
            unknown = isinstance(exc, OutcomeUnknownError)
            log.warning(
                "coordinator.action_outcome_unknown" if unknown else "coordinator.action_failed",
                action="+".join(k.value for k in (action, *also)),
                cause=str(cause),
                nodes=list(nodes)[:20],
                error=str(exc)[:300],
                **(
                    {"note": "it may have landed; the next pass judges it afresh"}
                    if unknown
                    else {}
                ),
            )
            return 1
        return 0

    # -- SLURM -----------------------------------------------------------------------------

    async def apply_slurm(
        self, kind: Kind, cause: Cause, names: list[str], token: int, before: dict[str, str]
    ) -> None:
        """One SLURM action for ``names`` (``before``: their states, for the audit)."""
        if self.auditor.dry_run:  # audited (and logged at info) when new for the node
            planned = (kind.value, str(cause))
            new = [n for n in names if self.auditor.seen.is_new(n, planned, before.get(n))]
            for name in new:
                self.auditor.record(kind.value, name, cause, token, "dry-run", before.get(name))
            (log.info if new else log.debug)(
                "coordinator.dry_run", action=kind.value, cause=str(cause), nodes=names
            )
            return
        if kind is Kind.REQUEUE:
            await self._requeue(names, cause, token, before)
            return
        result = await self.slurm_writes[kind](names, cause)
        record_update(self.auditor, self.metrics, kind, cause, result, token, before)

    async def _requeue(
        self, names: list[str], cause: Cause, token: int, before: dict[str, str]
    ) -> None:
        """Requeue the jobs of each node (per node: a job list is per node)."""
        for name in names:
            requeued = await self.slurm.requeue_jobs(name)
            record_requeue(self.auditor, name, cause, requeued, token, before.get(name))

    # -- Kubernetes ------------------------------------------------------------------------

    async def apply_kube(self, view: NodeView, action: Action, token: int) -> None:
        """One action on the view's K8s node (none: nothing to do)."""
        kube = view.kube_node
        if kube is None:
            return
        kind, cause = action.kind.value, str(action.cause)
        before = kube_text(kube)
        if self.auditor.dry_run:  # audited (and logged at info) when new for the node
            planned = (kind, cause, action.key, kube.name)
            new = self.auditor.seen.is_new(view.node, planned, before)
            if new:
                self.auditor.record(
                    kind, view.node, action.cause, token, "dry-run", before,
                    kube_node=kube.name, key=action.key,
                )  # fmt: skip
            (log.info if new else log.debug)(
                "coordinator.dry_run", action=kind, node=view.node, kube_node=kube.name,
                cause=cause,
            )  # fmt: skip
            return
        write = self.kube_writes.get(action.kind)
        result = await write(view, kube, action, token) if write is not None else None
        if result is None:
            self.auditor.record(
                kind, view.node, action.cause, token, "not implemented", before,
                kube_node=kube.name,
            )  # fmt: skip
            log.info("coordinator.action_not_implemented", node=view.node, action=kind, cause=cause)
            return
        self._report_kube(view, kube, action, result, token, before)

    async def apply_kube_all(
        self, view: NodeView, actions: Sequence[Action], token: int, check: Callable[[], int]
    ) -> tuple[int, int]:
        """A view's K8s actions in order, each isolated; (done, failed).

        A cordon and the taint that follows it go as one write (:func:`joined`). ``check``
        (the lease, raising when it is not held) runs before each write.
        """
        done = failed = 0
        for group in joined(actions):
            check()
            first = group[0]
            work = (
                self.apply_kube(view, first, token)
                if len(group) == 1
                else self._cordon_and_taint(view, first, group[1], token)
            )
            if await self.isolated(
                work, action=first.kind, cause=first.cause, nodes=[view.node], token=token,
                also=[a.kind for a in group[1:]],
            ):  # fmt: skip
                failed += 1
            else:
                done += 1
        return done, failed

    async def _cordon_and_taint(
        self, view: NodeView, cordon: Action, taint: Action, token: int
    ) -> None:
        kube = view.kube_node
        if kube is None or self.auditor.dry_run:
            await self.apply_kube(view, cordon, token)
            await self.apply_kube(view, taint, token)
            return
        before = kube_text(kube)
        results = await self.nodes.cordon_and_taint(
            kube.name,
            cause=cordon_mark(str(cordon.cause), view.node),
            key=taint.key,
            effect=TaintEffect.NO_SCHEDULE,
            value=label_value(str(taint.cause)),
        )
        for action, result in zip((cordon, taint), results, strict=True):
            self._report_kube(view, kube, action, result, token, before)

    def _report_kube(
        self,
        view: NodeView,
        kube: Node,
        action: Action,
        result: ChangeResult,
        token: int,
        before: str,
    ) -> None:
        """The metric, the audit record and the log line of one K8s write."""
        kind, cause = action.kind.value, str(action.cause)
        outcome = result.outcome.value
        self.metrics.applied(kind, action.cause.name, changed=outcome == "changed")
        self.auditor.record(
            kind, view.node, action.cause, token, outcome, before,
            kube_node=kube.name, key=action.key,
        )  # fmt: skip
        log.info(
            f"kube.{kind.replace('-', '_')}",
            node=view.node,
            kube_node=kube.name,
            cause=cause,
            owner="coordinator",
            outcome=outcome,
        )

    async def _cordon(self, view: NodeView, kube: Node, action: Action, token: int) -> ChangeResult:
        return await self.nodes.cordon(kube.name, cause=cordon_mark(str(action.cause), view.node))

    async def _uncordon(
        self, view: NodeView, kube: Node, action: Action, token: int
    ) -> ChangeResult:
        return await self.nodes.uncordon(kube.name)

    async def _taint(self, view: NodeView, kube: Node, action: Action, token: int) -> ChangeResult:
        value = label_value(str(action.cause))
        return await self.nodes.set_taint(kube.name, action.key, TaintEffect.NO_SCHEDULE, value)

    async def _untaint(
        self, view: NodeView, kube: Node, action: Action, token: int
    ) -> ChangeResult:
        result = await self.nodes.remove_taint(kube.name, action.key)
        if action.key in (REBOOT_TAINT, MANUAL_TAINT):
            await self.nodes.set_annotations(kube.name, {action.key: None})
        return result

    async def _set_condition(
        self, view: NodeView, kube: Node, action: Action, token: int
    ) -> ChangeResult:
        healthy = action.key == "True"
        return await self.nodes.set_slurm_healthy(
            kube.name,
            healthy=healthy,
            reason="SlurmHealthy" if healthy else "SlurmFailure",
            message=str(action.cause),
        )

    async def _event(self, view: NodeView, kube: Node, action: Action, token: int) -> ChangeResult:
        cause = str(action.cause)
        return await self.events.record(
            ObjectRef(kind="Node", name=kube.name, uid=kube.uid),
            type_="Warning",
            reason=action.key,
            message=f"slonkd: {cause}" + (f": {action.detail}" if action.detail else ""),
        )
