"""One worker's replacement in a rollout: wait for its jobs, requeue them, evict its pod.

:class:`~.rolling.RolloutController` drains the chosen outdated workers for the
rollout and releases them once their new pod is Ready; in between, for each node drained for
the rollout whose pod is still outdated, it asks :meth:`Replacer.step` for the next step: wait
for the node's jobs up to ``job_wait_s``, then judge them all. All or none: when a job there
cannot be requeued (``--no-requeue``, not a batch job, or a state that is not plainly running,
:func:`slonkd.core.slurm_job.presence`), none of the others is requeued either; the node stays
drained, its pod is not evicted, the job is never killed, and why (with the job ids) is
logged (``rollout.blocked``) and audited once. Once those jobs have ended, the rest are
requeued (with ``requeue_in_prestop``, left running to the pod's preStop hook, which signals
them for a checkpoint before it requeues them); then the pod is evicted through the Eviction
API with its uid as precondition, so the pool's PodDisruptionBudget holds too (a refusal is
retried next pass; an eviction that went is not sent again for the same uid, though the
watch cache may show that pod Running for one more pass). Requeueing the others at once
would send them back to the queue, unsignalled, for a node that may wait days for the last
job (issue 37 item 5). The requeue
is judged again on its own read (``requeue_jobs(all_or_none=True)``), so a job that turns
unrequeueable in between holds back the others too. What blocks each node is kept for
``slonkd status``. The lease is checked right before each write, and so is the pause
(``paused``: an operator's, a corrupt state's, or a state the term has not read yet): a pass
may have read one while this step waited for SLURM, and then nothing is requeued nor evicted
(the next step, once unpaused, goes on from there). Every write is audited and counted as
the coordinator's others are.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from slonkd.adapters.kube.ports import PodWrites
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.kube_changes import ChangeOutcome
from slonkd.core.plan import Kind
from slonkd.core.rollout import RolloutSettings
from slonkd.core.rollout_phase import REVISION_LABEL, ROLLOUT_CAUSE, WorkerView
from slonkd.core.slurm_job import JobId
from slonkd.runtime.coordinating.auditing import Auditor
from slonkd.runtime.coordinating.recording import record_requeue
from slonkd.runtime.kit.metrics import Metrics

log = structlog.get_logger("slonkd.rollout")


@dataclass(slots=True, kw_only=True)
class Replacer:
    """Takes each drained, outdated worker of a rollout on to its pod's eviction."""

    settings: RolloutSettings
    slurm: SlurmBackend
    pods: PodWrites
    auditor: Auditor
    metrics: Metrics
    check_valid: Callable[[], int]
    """The fencing token, or an error when the lease is not held right now."""
    read_turn: Callable[[], Awaitable[None]]
    """Waits for a turn of the coordinator's slurmctld read limiter."""
    paused: Callable[[], str] = lambda: ""
    """Why nothing may be written now (slonkd paused), "" when it may: asked before each write."""
    drained_at: dict[str, float] = field(default_factory=dict)
    """Node -> when this leader first saw it drained for the rollout (monotonic)."""
    blocked: dict[str, str] = field(default_factory=dict)
    """Node -> why its pod is not evicted yet (for ``slonkd status``)."""
    jobs_seen: dict[str, int] = field(default_factory=dict)
    evicted: dict[str, str] = field(default_factory=dict)
    """Node -> the uid of the pod this leader evicted there: the watch cache may show it
    Running for another pass, and the same pod is not evicted twice."""

    def forget(self, name: str) -> None:
        """The node left the rollout (released, or undrained by someone else)."""
        self.drained_at.pop(name, None)
        self.blocked.pop(name, None)
        self.jobs_seen.pop(name, None)
        self.evicted.pop(name, None)

    async def step(self, view: WorkerView, before: str | None) -> None:
        """A node drained for the rollout, pod outdated: wait for jobs, requeue, evict."""
        pod = view.pod
        name = view.node
        if pod is None or pod.terminating or self.paused() or self.evicted.get(name) == pod.uid:
            return
        drained_at = self.drained_at.setdefault(name, time.monotonic())
        await self.read_turn()
        jobs = await self.slurm.jobs_on(name)
        waited = time.monotonic() - drained_at
        if jobs and waited < self.settings.job_wait_s:
            if self.jobs_seen.get(name) != len(jobs):
                self.jobs_seen[name] = len(jobs)
                log.info(
                    "rollout.waiting_for_jobs",
                    node=name,
                    cause=str(ROLLOUT_CAUSE),
                    jobs=[j.job_id for j in jobs],
                    left_s=round(self.settings.job_wait_s - waited, 1),
                )
            self.blocked[name] = f"waiting for {len(jobs)} job(s)"
            return
        stuck = [j for j in jobs if not j.requeueable]
        if stuck:  # all or none: the others stay, unrequeued, until these have ended
            self._block(
                name,
                [j.job_id for j in stuck],
                [j.job_id for j in jobs if j.requeueable],
                before,
                states={str(j.job_id): j.raw_state for j in stuck},
            )
            return
        if jobs and self.settings.requeue_in_prestop:
            log.info(  # the preStop hook signals them for a checkpoint, then requeues them
                "rollout.requeue_left_to_prestop",
                node=name,
                cause=str(ROLLOUT_CAUSE),
                jobs=[j.job_id for j in jobs],
            )
        elif jobs:
            if self._paused_now(name):
                return
            token = self.check_valid()
            requeued = await self.slurm.requeue_jobs(name, all_or_none=True)
            if requeued.not_requeueable:  # one changed since the judgement: none requeued
                self._block(name, list(requeued.not_requeueable), list(requeued.held_back), before)
                return
            record_requeue(self.auditor, name, ROLLOUT_CAUSE, requeued, token, before)
        if self._paused_now(name):
            return
        token = self.check_valid()
        result = await self.pods.evict(pod.namespace, pod.name, uid=pod.uid)
        outcome = result.outcome.value
        self.metrics.applied(Kind.EVICT.value, ROLLOUT_CAUSE.name, changed=outcome == "changed")
        self.auditor.record(
            Kind.EVICT.value, name, ROLLOUT_CAUSE, token, outcome, before, pod=pod.name
        )
        refused = ""
        if result.outcome is ChangeOutcome.REFUSED:
            refused = f"eviction refused (PodDisruptionBudget): {result.detail[:120]}"
        if not refused or self.blocked.get(name) != refused:  # a refusal is logged once
            log.info(
                "kube.evict",
                node=name,
                pod=pod.name,
                uid=pod.uid,
                cause=str(ROLLOUT_CAUSE),
                owner="coordinator",
                outcome=result.outcome.value,
                detail=result.detail[:200],
                revision=pod.labels.get(REVISION_LABEL, ""),
            )
        if refused:
            self.blocked[name] = refused
        else:
            self.blocked.pop(name, None)
            self.evicted[name] = pod.uid

    def _paused_now(self, name: str) -> bool:
        """Whether a pause came while this step waited: then it writes nothing (logged)."""
        why = self.paused()
        if why:
            log.info("rollout.paused", node=name, cause=str(ROLLOUT_CAUSE), detail=why[:200])
        return bool(why)

    def _block(
        self,
        name: str,
        stuck: list[JobId],
        held_back: list[JobId],
        before: str | None,
        *,
        states: dict[str, str] | None = None,
    ) -> None:
        """Requeue nothing on ``name`` while ``stuck`` jobs are there; say so once per change."""
        why = (
            f"job(s) {stuck} cannot be requeued: none of the node's jobs is requeued, "
            f"waiting for them to end"
        )
        if self.blocked.get(name) != why:
            token = self.check_valid()
            log.warning(
                "rollout.blocked",
                node=name,
                cause=str(ROLLOUT_CAUSE),
                jobs=stuck,
                held_back=held_back,
                states=states or {},
                detail=why,
            )
            self.auditor.record(
                "requeue", name, ROLLOUT_CAUSE, token, "blocked", before,
                jobs=[], not_requeueable=[str(j) for j in stuck],
                held_back=[str(j) for j in held_back],
            )  # fmt: skip
        self.blocked[name] = why
