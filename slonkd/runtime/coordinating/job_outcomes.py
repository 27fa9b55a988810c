"""Nodes blamed for failed jobs: the leader reads finished jobs, judges them, feeds ``decide``.

With ``job_blame`` set, a task of the term reads the jobs slurmctld still remembers as
finished (``squeue``, :mod:`slonkd.adapters.slurm.parsing_finished`; within ``MinJobAge``) every
``poll_s``, keeps the new ones in a window (successes too: they give each node's rate), and
runs the triangulation (:func:`slonkd.core.job_blame.blame`). A pass (:mod:`.reconciling`)
puts each blamed node's evidence into its view (``NodeView.job_blame``); ``decide`` then
wants the cause ``job-failures``: a SLURM drain ``slonkd:job-failures`` inside the budget like
every automated cause, with a ``JobFailures`` Event carrying the evidence (job ids, partners),
and the same line in ``slonkd explain``.

How the blame ends: slonkd never releases ``job-failures`` by itself (a blamed node has
shown nothing that proves it repaired). An operator's resume (``scontrol update
nodename=N state=resume``) ends it: the next pass sees the cause gone from a node this term
saw drained for it, and the jobs that implicated the node leave the window, so it is not
drained again for the same evidence; new failures blame it afresh. A drain that is not
slonkd's is never touched (``decide`` leaves such nodes alone).

The window lives in the leader's memory: a new leader starts with the jobs slurmctld still
remembers (less evidence, never more), and a node already drained stays drained.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import structlog

from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.core.decide import JOB_FAILURES, held_causes
from slonkd.core.errors import SlonkdError
from slonkd.core.job_blame import Blame, JobOutcome, blame, is_infrastructure_failure
from slonkd.core.plan import NodeView
from slonkd.core.slurm_job import JobId
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.coordinating.settings import JobBlameSettings

log = structlog.get_logger("slonkd.coordinator")

ReadFinished = Callable[[], Awaitable[list[FinishedJob]]]
"""Reads the finished jobs slurmctld remembers (``ScontrolBackend.finished_jobs``)."""


class JobOutcomes:
    """The window of finished jobs of one leader's term and the nodes it blames."""

    def __init__(
        self, settings: JobBlameSettings, read: ReadFinished, on_change: Callable[[], None]
    ) -> None:
        self.s = settings
        self.policy = settings.policy()
        self.read = read
        self.on_change = on_change
        """Called when the blamed nodes changed (starts a pass)."""
        self.outcomes: dict[JobId, JobOutcome] = {}
        """The window, oldest first (insertion order)."""
        self.blamed: dict[NodeName, Blame] = {}
        self.drained: set[NodeName] = set()
        """Nodes seen drained for ``job-failures`` in this term (an operator may resume them)."""
        self._listed: frozenset[JobId] = frozenset()
        """Job ids of the last read: a job slurmctld still lists is not new again."""
        self.reads = 0
        self.read_errors = 0
        self.last_read_at = 0.0

    async def run(self) -> None:
        """Read and judge every ``poll_s`` until cancelled; a failed read is logged, retried."""
        while True:
            try:
                jobs = await self.read()
            except SlonkdError as exc:
                self.read_errors += 1
                log.warning("job_blame.read_failed", error=str(exc)[:300], retry_s=self.s.poll_s)
            else:
                self.reads += 1
                self.last_read_at = time.time()
                if self.ingest(jobs) and self.judge():
                    self.on_change()
            await asyncio.sleep(self.s.poll_s)

    def ingest(self, jobs: Sequence[FinishedJob]) -> int:
        """Add the jobs not seen before (by id, oldest first); returns how many."""
        listed = frozenset(j.job_id for j in jobs)
        new = sorted(
            (j for j in jobs if j.nodes and j.job_id not in self._listed),
            key=lambda j: j.job_id,
        )
        self._listed = listed
        codes = self.s.infrastructure_exit_codes
        added = 0
        for job in new:
            if job.job_id in self.outcomes:
                continue
            failed = is_infrastructure_failure(job.state, job.exit_code, codes)
            self.outcomes[job.job_id] = JobOutcome(
                job_id=job.job_id, nodes=frozenset(job.nodes), infrastructure_failure=failed
            )
            added += 1
            if failed:
                log.info(
                    "job_blame.job_failed",
                    job=int(job.job_id),
                    state=job.state.value,
                    exit_code=job.exit_code,
                    nodes=sorted(job.nodes)[:50],
                )
        while len(self.outcomes) > self.s.max_jobs:
            del self.outcomes[next(iter(self.outcomes))]
        return added

    def judge(self) -> bool:
        """Run the triangulation over the window; returns whether the blamed nodes changed."""
        found = {b.node: b for b in blame(list(self.outcomes.values()), self.policy)}
        changed = set(found) != set(self.blamed)
        for node in sorted(set(found) - set(self.blamed)):
            b = found[node]
            log.warning(
                "job_blame.node_blamed",
                node=node,
                cause=str(JOB_FAILURES),
                owner="coordinator",
                jobs=[int(j) for j in b.jobs][:50],
                partners=list(b.partners)[:50],
                independent=b.independent,
                ran=b.ran,
                p_value=b.p_value,
            )
        self.blamed = found
        return changed

    def forgive(self, node: NodeName) -> None:
        """An operator resumed the node: the failures that implicated it leave the window."""
        before = len(self.outcomes)
        self.outcomes = {
            k: o
            for k, o in self.outcomes.items()
            if not (o.infrastructure_failure and node in o.nodes)
        }
        self.drained.discard(node)
        self.judge()
        log.info(
            "job_blame.node_resumed",
            node=node,
            cause=str(JOB_FAILURES),
            owner="coordinator",
            forgotten_jobs=before - len(self.outcomes),
            detail="an operator ended the blame: its failed jobs leave the window",
        )

    def annotate(self, views: Sequence[NodeView]) -> list[NodeView]:
        """The views with each blamed node's evidence; notes an operator's resume first."""
        for view in views:
            held = held_causes(view.slurm) if view.slurm is not None else None
            if held is None:
                continue  # unknown, or not slonkd's: neither drained by us nor resumed
            if JOB_FAILURES in held:
                self.drained.add(view.node)
            elif view.node in self.drained:
                self.forgive(view.node)
        return [
            replace(v, job_blame=self.blamed[v.node].describe()) if v.node in self.blamed else v
            for v in views
        ]

    def status(self) -> dict[str, Any]:
        """The ``job_blame`` section of ``slonkd status``."""
        return {
            "jobs": len(self.outcomes),
            "failed": sum(1 for o in self.outcomes.values() if o.infrastructure_failure),
            "reads": self.reads,
            "read_errors": self.read_errors,
            "last_read_at": self.last_read_at or None,
            "blamed": {n: b.describe() for n, b in sorted(self.blamed.items())},
        }
