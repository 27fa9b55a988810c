"""The leader's worker rollouts: replace outdated worker pods without killing a job.

Run by the coordinator as one task while it leads. Each pass (on a change of a worker pod or
StatefulSet, and every ``poll_s`` while something is in progress) it reads the SLURM nodes
once and views each worker (:mod:`.rollout_read`), asks
:func:`slonkd.core.rollout.plan_rollout` what to do and does it:

- drain the chosen outdated workers' SLURM nodes with cause ``rollout``;
- for each node drained for the rollout whose pod is still outdated
  (:mod:`slonkd.runtime.coordinating.replacing`): wait for its jobs up to
  ``job_wait_s``, then requeue them all or none (with ``requeue_in_prestop``, leave them
  running to the pod's preStop hook, which signals them for a checkpoint before it requeues
  them); a job that cannot be requeued blocks the node's rollout (its pod is not evicted, no
  other job there is requeued, the job is never killed) until it ends; then evict the
  pod through the Eviction API with its uid as precondition, so the pool's
  PodDisruptionBudget holds too (a refusal is retried next pass); its preStop hook drains,
  waits and downs the node, and the StatefulSet makes the new pod from the update revision;
- once the node's new pod runs the update revision and is Ready, release ``rollout`` (the
  node resumes when no other cause holds it) and go on with the next.

A worker whose K8s node carries the operator's ``slonk.dev/hold`` is left alone in every
phase (not drained, not evicted, not released) and reported under ``held``; the rest of the
rollout goes on, and the held worker carries on once the hold is lifted. While slonkd is
paused (``paused``: an operator's pause, a corrupt state ConfigMap, or a state this term has
not read yet, :mod:`.composing`) the whole rollout is: nothing is drained, requeued,
evicted or released, in any phase, and it carries on where it stands once unpaused (the
coordinator looks again at once, :meth:`RolloutController.poke`). An open breaker
(``hold``) stops only new drains.

The budget is admitted through the coordinator's gate (:mod:`.admitting`), as the pass and
the fast path admit it: what they reserved and the rollout's read may not show yet counts as
out, and the workers the rollout starts are reserved there before their drain, until the
reads show them (issue 37 item 3).

The lease and the pause are checked right before each write.
:meth:`RolloutController.status` gives the progress as a JSON-able dict for ``slonkd status``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import structlog

from slonkd.adapters.kube.informer import CacheEvent, Informer
from slonkd.adapters.kube.lease import LeaderElector
from slonkd.adapters.kube.pods import PodWriter
from slonkd.adapters.kube.statefulsets import statefulset_informer
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.errors import SlonkdError
from slonkd.core.kube_objects import Node, Pod
from slonkd.core.log_events import ROLLOUT_WATCHING
from slonkd.core.plan import Kind
from slonkd.core.reasons import ReasonOwner, reason_owner
from slonkd.core.rollout import RolloutPlan, RolloutSettings, plan_rollout, progress
from slonkd.core.rollout_phase import (
    ACTIVE,
    ROLLOUT_CAUSE,
    StatefulSetRevision,
    WorkerView,
)
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.coordinating.admitting import Gate
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.coordinating.node_table import NodeTable
from slonkd.runtime.coordinating.recording import record_update
from slonkd.runtime.coordinating.replacing import Replacer
from slonkd.runtime.coordinating.rollout_read import RolloutRead, counts_out, shows_reserved
from slonkd.runtime.coordinating.slurm_watch import ReadLimiter
from slonkd.runtime.coordinating.values import slurm_text
from slonkd.runtime.kit.level_loop import Cause, run_level_triggered
from slonkd.runtime.kit.metrics import Metrics

log = structlog.get_logger("slonkd.rollout")
_NOT_OURS = (ReasonOwner.FOREIGN, ReasonOwner.SLURM)


class RolloutController:
    """Replaces outdated worker pods of OnDelete StatefulSets, one drained node at a time."""

    def __init__(
        self,
        settings: RolloutSettings,
        *,
        namespace: str,
        transport: KubeTransport,
        pods: Informer[Pod],
        slurm: SlurmBackend,
        elector: LeaderElector,
        gate: Gate,
        reads: ReadLimiter | None = None,
        hold: Callable[[], str] = lambda: "",
        paused: Callable[[], str] = lambda: "",
        kube_nodes: Informer[Node] | None = None,
        auditor: Auditor,
        metrics: Metrics,
        table: NodeTable | None = None,
        table_age_s: float = 0.0,
    ) -> None:
        self.s = settings
        self.pods = pods
        self.slurm = slurm
        self.elector = elector
        self.gate = gate
        """The coordinator's admission gate: its ledger holds the nodes each task takes out."""
        self.budget = gate.policy
        """The coordinator's per-pool disruption budget (the rollout takes from it)."""
        self.block_label = gate.block_label
        """The coordinator's ``budget_block_label``: the budget holds per pool and block."""
        self.hold = hold
        """Why no new node may be taken now (breaker open); "" when it may."""
        self.paused = paused
        """Why nothing of the rollout may be written now (slonkd paused); "" when it may."""
        self.auditor = auditor
        """The coordinator's audit log: every write (or, in a dry run, plan) of the rollout."""
        self.dry_run = auditor.dry_run
        """Plan and report, write nothing (the coordinator's dry run)."""
        self.metrics = metrics
        """The coordinator's metrics: the rollout's changes count as its other changes do."""
        self.statefulsets = statefulset_informer(transport, namespace)
        self.read = RolloutRead(  # SLURM's table and the workers' views, see .rollout_read
            namespace=namespace, slurm=slurm, pods=pods, statefulsets=self.statefulsets,
            kube_nodes=kube_nodes, block_label=self.block_label, reads=reads,
            table=table, table_age_s=table_age_s,
        )  # fmt: skip
        self.replacer = Replacer(  # wait for jobs, requeue, evict: see rollout_replacing
            settings=settings, slurm=slurm, pods=PodWriter(transport), auditor=auditor,
            metrics=metrics, check_valid=elector.check_valid, read_turn=self.read.turn,
            paused=paused,
        )  # fmt: skip
        self._dirty = asyncio.Event()
        self._settling: dict[str, float] = {}
        """Node -> when the rollout released it (monotonic), until it is back in service."""
        self._status: dict[str, Any] = {"leading": False}
        self._announced = False
        self._held: dict[str, str] = {}
        self.pods.add_handler(lambda _e: self._dirty.set())
        self.statefulsets.add_handler(lambda _e: self._dirty.set())
        if kube_nodes is not None:
            kube_nodes.add_handler(self._on_node_change)

    # -- what callers ask ------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Rollout progress (JSON-able): updated, outdated, in progress, waiting, per pool."""
        return dict(self._status)

    def poke(self) -> None:
        """Look again now (the coordinator saw a pause, an unpause or a breaker reset)."""
        self._dirty.set()

    def _on_node_change(self, event: CacheEvent[Node]) -> None:
        """A hold put on or lifted: look again now (other node changes are not the rollout's)."""
        if event.old is None or event.old.held != event.obj.held:
            self._dirty.set()

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch the StatefulSets and roll outdated workers until cancelled (lost lease)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.statefulsets.run())
            await self.statefulsets.synced.wait()
            await self.pods.synced.wait()
            log.info(ROLLOUT_WATCHING, statefulsets=len(self.statefulsets))
            await run_level_triggered(self._dirty, self._pass)

    async def _pass(self, _cause: Cause) -> float:
        """One pass; the next within ``poll_s`` while a rollout is busy (or failed), else 30 s."""
        busy = False
        try:
            busy = await self.reconcile()
        except SlonkdError as exc:
            busy = True
            log.warning("rollout.pass_failed", error=str(exc)[:300])
        return self.s.poll_s if busy else max(self.s.poll_s, 30.0)

    # -- one pass --------------------------------------------------------------------------

    def _anything_to_do(self) -> bool:
        """Whether the caches show an outdated pod or a rollout in progress (no SLURM read)."""
        if self.replacer.drained_at or self._settling or not self.read.slurm_read:
            return True
        return self.read.outdated()

    async def reconcile(self) -> bool:
        """One pass; True while something is in progress (poll again soon)."""
        if not self._anything_to_do():
            self._publish(self._summary([], RolloutPlan()))
            return False
        slurm_nodes: dict[str, SlurmNode] = {n.name: n for n in await self.read.table()}
        self.read.slurm_read = True
        self._settled(slurm_nodes)
        views = self.read.views(slurm_nodes, self._settling)
        by_node = {v.node: v for v in views}
        reserved = self.gate.held(
            self.read.read_at, lambda r: shows_reserved(r, by_node.get(r.node))
        )
        plan = plan_rollout(
            views, self.s, policy=self.budget, hold=self.hold(), paused=self.paused(),
            reserved=reserved,
        )  # fmt: skip
        held = {n for nodes in reserved.values() for n in nodes}
        fresh = [] if self.dry_run else [by_node[n] for n in plan.start if n not in held]
        fresh = [v for v in fresh if not counts_out(v)]
        ticket = self.gate.reserve(  # at once: no other task weighs the budget in between
            "rollout",
            {v.node: v.pool for v in fresh},
            pods={v.node: v.pod.uid for v in fresh if v.pod is not None},
        )
        self._report_held(plan.held)
        before = {name: slurm_text(node) for name, node in slurm_nodes.items()}
        if self.dry_run:
            self._audit_plan(plan, before)
            if plan.start or plan.release or plan.draining:
                log.info(
                    "rollout.dry_run",
                    would_drain=list(plan.start),
                    would_release=list(plan.release),
                    would_wait_and_evict=list(plan.draining),
                )
            self._publish(self._summary(views, plan))
            return False
        drained: Collection[str] | None = ()
        try:
            if plan.release:
                token = self.elector.check_valid()
                result = await self.slurm.resume(list(plan.release), ROLLOUT_CAUSE)
                record_update(
                    self.auditor, self.metrics, Kind.RELEASE, ROLLOUT_CAUSE, result, token, before,
                    detail="its new pod is Ready on the update revision (or no pod comes back)",
                )  # fmt: skip
                for name in plan.release:
                    self.replacer.forget(name)
                    if by_node[name].pod is not None:  # a pod gone for good has nothing to settle
                        self._settling[name] = time.monotonic()
            if plan.start and not self.paused():  # a pause read while the release was written
                token = self.elector.check_valid()
                revisions = sorted(
                    {s.update_revision for n in plan.start if (s := by_node[n].statefulset)}
                )
                drained = None  # unknown until slurmctld answers
                result = await self.slurm.drain(
                    list(plan.start),
                    ROLLOUT_CAUSE,
                    f"replacing pod with revision {','.join(revisions)}",
                )
                drained = result.changed
                record_update(
                    self.auditor, self.metrics, Kind.DRAIN, ROLLOUT_CAUSE, result, token, before
                )
                now = time.monotonic()
                for name in result.changed:
                    self.replacer.drained_at[name] = now
        finally:  # the drained held until the reads show them; the rest released
            self.gate.written(ticket, drained)
        for name in plan.draining:
            await self.replacer.step(by_node[name], before.get(name))
        for name in list(self.replacer.drained_at):  # released, or undrained by someone else
            if plan.phases.get(name) not in ACTIVE and name not in plan.start:
                self.replacer.forget(name)
        self._publish(self._summary(views, plan))
        if plan.paused:  # nothing moves: look again on a change, or when poked on an unpause
            return False
        return bool(plan.start or plan.draining or self._status["in_progress"])

    def _report_held(self, held: Mapping[str, str]) -> None:
        """Log once when a worker's hold starts or ends (the rollout leaves it alone meanwhile)."""
        for name, why in held.items():
            if self._held.get(name) != why:
                log.warning("rollout.held", node=name, cause=str(ROLLOUT_CAUSE), detail=why)
        for name in set(self._held) - set(held):
            log.info("rollout.hold_lifted", node=name, cause=str(ROLLOUT_CAUSE))
        self._held = dict(held)

    def _publish(self, status: dict[str, Any]) -> None:
        """Keep ``status`` for :meth:`status`; log it when the progress changed."""
        changed = {k: v for k, v in status.items() if k != "leading"} != {
            k: v for k, v in self._status.items() if k != "leading"
        }
        self._status = status
        if changed and (status["outdated"] or status["in_progress"] or self._announced):
            self._announced = bool(status["outdated"] or status["in_progress"])
            log.info("rollout.progress", **{k: v for k, v in status.items() if k != "leading"})

    def _audit_plan(self, plan: RolloutPlan, before: Mapping[str, str]) -> None:
        """A dry run's plan, audited once per node, action and state (as the passes' are)."""
        planned = [
            *((Kind.DRAIN, n) for n in plan.start),
            *((Kind.RELEASE, n) for n in plan.release),
            *((Kind.EVICT, n) for n in plan.draining),
        ]
        token = self.elector.token or 0
        for kind, name in planned:
            if self.auditor.seen.is_new(name, (kind.value, str(ROLLOUT_CAUSE)), before.get(name)):
                self.auditor.record(
                    kind.value, name, ROLLOUT_CAUSE, token, "dry-run", before.get(name)
                )

    def _settled(self, slurm_nodes: dict[str, SlurmNode]) -> None:
        """Stop waiting for released nodes that are back in service (or took too long)."""
        now = time.monotonic()
        for name, released_at in list(self._settling.items()):
            node = slurm_nodes.get(name)
            if node is not None and not node.state.out_of_service:
                del self._settling[name]
                log.info("rollout.node_replaced", node=name, cause=str(ROLLOUT_CAUSE))
            elif node is not None and reason_owner(node.live_reason) in _NOT_OURS:
                del self._settling[name]  # an operator (or SLURM) holds it now: not ours to wait
                log.info(
                    "rollout.node_replaced",
                    node=name,
                    cause=str(ROLLOUT_CAUSE),
                    detail=f"held by someone else now: {node.reason[:80]}",
                )
            elif now - released_at > self.s.settle_s:
                del self._settling[name]
                log.warning(
                    "rollout.settle_timeout",
                    node=name,
                    cause=str(ROLLOUT_CAUSE),
                    state=str(node.state) if node else "unknown",
                    reason=node.reason[:120] if node else "",
                    detail="node still out of service after its new pod became Ready; going on",
                )

    def _summary(self, views: list[WorkerView], plan: RolloutPlan) -> dict[str, Any]:
        statefulsets: list[StatefulSetRevision] = list(self.statefulsets.items().values())
        out = progress(views, plan, statefulsets)
        if not views:  # nothing outdated and nothing in progress: count from the caches
            on_delete = [s for s in statefulsets if s.on_delete]
            pods = [p for p in self.pods.items().values() if any(s.owns(p) for s in on_delete)]
            out["updated"] = len(pods)
            for sts in on_delete:
                entry = out["statefulsets"][sts.name]
                entry["updated"] = sum(1 for p in pods if sts.owns(p))
        out["blocked"] = dict(sorted(self.replacer.blocked.items()))
        out["leading"] = self.elector.is_valid()
        out["max_parallel"] = self.s.max_parallel
        return out


__all__ = ["RolloutController"]
