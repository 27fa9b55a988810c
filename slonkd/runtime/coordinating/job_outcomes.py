"""Nodes blamed for failed jobs: the leader reads finished jobs, judges them, feeds ``decide``.

With ``job_blame`` set, a task of the term reads the jobs slurmctld still remembers as
finished (``squeue``, :mod:`slonkd.adapters.slurm.parsing_finished`; within ``MinJobAge``) every
``poll_s``, keeps the new ones in a window (successes too: they give each node's rate), and
runs the triangulation (:func:`slonkd.core.job_blame.blame`). A pass (:mod:`.reconciling`)
puts each blamed node's evidence into its view (``NodeView.job_blame``); ``decide`` then
wants the cause ``job-failures``: a SLURM drain ``slonkd:job-failures`` inside the budget like
every automated cause, with a ``JobFailures`` Event carrying the evidence (job ids, partners),
and the same line in ``slonkd explain``.

Hardware, not names: the pod cache's events (:meth:`JobOutcomes.on_pod_event`) keep the pods of
every node name (:class:`slonkd.core.job_places.PodHistory`), and each job is kept by its
places, the pods that served its nodes when it ran (:func:`slonkd.core.job_places.locate`).
Only a place that is its node's current pod is drained; a blamed pod that is gone is reported
(``status``, ``job_blame.gone_pod_blamed`` with its K8s node) for an operator to look at. A
failure whose pod was asked to go before the job ended (deleted, preempted, evicted, ended by
its kubelet) or was replaced under it is the pod's lifecycle, not its hardware: it is kept
as a job that ran, not as a failure, and counted in ``status`` as ``excused``.

How the blame ends: slonkd never releases ``job-failures`` by itself (a blamed node has
shown nothing that proves it repaired). An operator's resume (``scontrol update
nodename=N state=resume``) ends it: the next pass sees the cause gone from a node this term
saw drained for it, and the node's past jobs count for it no more (they stay, under a
retired place, evidence for and against the other nodes they ran on), so it is not drained
again for the same evidence; new failures blame it afresh. A drain that is not
slonkd's is never touched (``decide`` leaves such nodes alone).

The window lives in the leader's memory: a new leader starts with the jobs slurmctld still
remembers (less evidence, never more), and a node already drained stays drained.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

import structlog

from slonkd.adapters.kube.informer import CacheEvent, EventType
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.core.decide import JOB_FAILURES, held_causes
from slonkd.core.errors import SlonkdError
from slonkd.core.job_blame import Blame, JobOutcome, blame, is_infrastructure_failure
from slonkd.core.job_places import (
    UNKNOWN_POD,
    Lives,
    Place,
    PodHistory,
    locate,
    place,
    place_parts,
    retired,
)
from slonkd.core.kube_objects import Pod
from slonkd.core.plan import NodeView
from slonkd.core.slurm_job import JobId, JobState
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.coordinating.settings import JobBlameSettings

log = structlog.get_logger("slonkd.coordinator")

ReadFinished = Callable[[], Awaitable[list[FinishedJob]]]
"""Reads the finished jobs slurmctld remembers (``ScontrolBackend.finished_jobs``)."""


class JobOutcomes:
    """The window of finished jobs of one leader's term and the nodes it blames."""

    def __init__(
        self,
        settings: JobBlameSettings,
        read: ReadFinished,
        on_change: Callable[[], None],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.s = settings
        self.policy = settings.policy()
        self.read = read
        self.on_change = on_change
        """Called when the blamed nodes changed (starts a pass)."""
        self.clock = clock
        self.history = PodHistory()
        """The pods of every node name (fed by the pod cache: :meth:`on_pod_event`)."""
        self.outcomes: dict[JobId, JobOutcome] = {}
        """The window, oldest first (insertion order); jobs kept by their places."""
        self.found: dict[str, Blame] = {}
        """Every blamed place, drained or not (a gone pod, a retired place)."""
        self.blamed: dict[NodeName, Blame] = {}
        """The blamed places that are their node's current pod: these are drained."""
        self.drained: set[NodeName] = set()
        """Nodes seen drained for ``job-failures`` in this term (an operator may resume them)."""
        self._eras: Counter[NodeName] = Counter()
        """Resumes per node name in this term: the era of its next retired places."""
        self._retired: dict[Place, tuple[float, int]] = {}
        """Places an operator's resume retired: when, and as which era."""
        self._generation = 0
        """Counts resumes: a judgement begun before one is taken again."""
        self._listed: frozenset[JobId] = frozenset()
        """Job ids of the last read: a job slurmctld still lists is not new again."""
        self.excused = 0
        """Failed jobs the pods' own lifecycle explains (deleted, preempted, evicted under
        them): kept as jobs that ran, never as failures."""
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
                if await self.step(jobs):
                    self.on_change()
            await asyncio.sleep(self.s.poll_s)

    async def step(self, jobs: Sequence[FinishedJob]) -> bool:
        """:meth:`ingest` and :meth:`judge` with their CPU work in a worker thread.

        The loop keeps a lease renewal and the passes going meanwhile (20,000 jobs take a
        second or more to place and judge). The thread reads only immutable snapshots (the
        new jobs, the pods' lives, the window as a tuple of frozen outcomes); the loop alone
        changes this object. A judgement begun before an operator's resume is taken again.
        A read without new jobs maps the last judgement to the pods as they are now (a
        blamed pod replaced since is drained no more). Returns whether the drained blame
        changed.
        """
        new = self._new(jobs)
        if not new:  # the same judgement, mapped to the pods as they are now
            return self._apply(list(self.found.values()))
        made, excused = await asyncio.to_thread(
            _prepare, new, self.history.lives(), self.clock(), self.s.infrastructure_exit_codes
        )
        self._add(new, made, excused)
        while True:
            generation = self._generation
            found = await asyncio.to_thread(blame, tuple(self.outcomes.values()), self.policy)
            if generation == self._generation:
                return self._apply(found)

    def on_pod_event(self, event: CacheEvent[Pod]) -> None:
        """The pod cache's handler: record where each node name runs (quick, no I/O)."""
        self.history.observe(event.obj, self.clock(), gone=event.type is EventType.DELETED)

    def ingest(self, jobs: Sequence[FinishedJob]) -> int:
        """Add the jobs not seen before (by id, oldest first) at their places; how many.

        On the caller's thread: the task uses :meth:`step`.
        """
        new = self._new(jobs)
        made, excused = _prepare(
            new, self.history.lives(), self.clock(), self.s.infrastructure_exit_codes
        )
        self._add(new, made, excused)
        return len(new)

    def _new(self, jobs: Sequence[FinishedJob]) -> list[FinishedJob]:
        """The jobs of a read not seen before, oldest first (a listed job is not new again)."""
        listed = frozenset(j.job_id for j in jobs)
        new = sorted(
            (
                j
                for j in jobs
                if j.nodes and j.job_id not in self._listed and j.job_id not in self.outcomes
            ),
            key=lambda j: j.job_id,
        )
        self._listed = listed
        return new

    def _add(self, new: Sequence[FinishedJob], made: Sequence[JobOutcome], excused: int) -> None:
        """Put prepared outcomes into the window (the oldest leave past ``max_jobs``)."""
        for job, outcome in zip(new, made, strict=True):
            self.outcomes[outcome.job_id] = self._retire_late(outcome, job.end)
        self.excused += excused
        while len(self.outcomes) > self.s.max_jobs:
            del self.outcomes[next(iter(self.outcomes))]

    def judge(self) -> bool:
        """Run the triangulation over the window; returns whether the drained blame changed."""
        return self._apply(blame(list(self.outcomes.values()), self.policy))

    def _current(self, where: str) -> NodeName | None:
        """The node whose current pod ``where`` is (None: a gone pod, unknown or retired)."""
        node, pod, era = place_parts(where)
        life = self.history.current(node)
        if era or pod == UNKNOWN_POD or life is None or life.uid != pod:
            return None
        return node

    def _kube_node(self, where: str) -> str:
        node, pod, _ = place_parts(where)
        life = next((x for x in self.history.lives().get(node, ()) if x.uid == pod), None)
        return life.kube_node if life is not None else ""

    def _apply(self, found: Sequence[Blame]) -> bool:
        """Take a judgement: the places it blames, and which of them are drained."""
        by_place = {b.node: b for b in found}
        blamed: dict[NodeName, Blame] = {}
        for where, b in by_place.items():
            node = self._current(where)
            if node is not None:
                blamed[node] = b
        changed = {n: b.node for n, b in blamed.items()} != {
            n: b.node for n, b in self.blamed.items()
        }
        for where in sorted(set(by_place) - set(self.found)):
            b = by_place[where]
            node, pod, era = place_parts(where)
            if era:
                continue  # an operator resumed it: already reported, never drained
            current = self._current(where) is not None
            (log.warning if current else log.info)(
                "job_blame.node_blamed" if current else "job_blame.gone_pod_blamed",
                node=node,
                pod=pod,
                kube_node=self._kube_node(where),
                cause=str(JOB_FAILURES),
                owner="coordinator",
                jobs=[int(j) for j in b.jobs][:50],
                partners=list(b.partners)[:50],
                independent=b.independent,
                ran=b.ran,
                p_value=b.p_value,
                **({} if current else {"detail": "the pod is gone: its K8s node may be bad"}),
            )
        self.found = by_place
        self.blamed = blamed
        return changed

    def forgive(self, node: NodeName, pod: str | None = None) -> None:
        """An operator resumed the node (its pod ``pod``; None: any): its jobs retire.

        Its past jobs count for it no more: its place in them becomes a retired place
        (:func:`slonkd.core.job_places.retired`), judged like any but never drained, so the
        jobs stay what they were for their other places (evidence against a partner, or
        explained by the resumed node for a partner that only failed with it). Jobs that
        ended before now and are read later retire too. The drained blame ends at once; the
        next judgement (the task's) sees the same evidence under the retired name.
        """
        self._eras[node] += 1
        era = self._eras[node]

        def mine(where: str) -> bool:
            name, uid, retired_era = place_parts(where)
            return name == node and not retired_era and (pod is None or uid == pod)

        count = 0
        for key, outcome in self.outcomes.items():
            if any(mine(p) for p in outcome.nodes):
                nodes = frozenset(retired(p, era) if mine(p) else p for p in outcome.nodes)
                self.outcomes[key] = replace(outcome, nodes=nodes)
                count += 1
        places = {p for o in self.outcomes.values() for p in o.nodes if mine(p)}
        places |= {w for w in self.found if mine(w)}
        if pod is not None:
            places.add(place(node, pod))
        now = self.clock()
        for where in places:
            self._retired[Place(where)] = (now, era)
        self.found = {  # the judgement's blames carry their place too: both retire
            (retired(w, era) if mine(w) else w): (
                replace(b, node=retired(b.node, era)) if mine(b.node) else b
            )
            for w, b in self.found.items()
        }
        if node in self.blamed and mine(self.blamed[node].node):
            del self.blamed[node]
        self.drained.discard(node)
        self._generation += 1
        log.info(
            "job_blame.node_resumed",
            node=node,
            pod=pod,
            cause=str(JOB_FAILURES),
            owner="coordinator",
            retired_jobs=count,
            detail="an operator ended the blame: its past jobs count for it no more, and stay "
            "evidence for and against the other nodes they ran on",
        )

    def _retire_late(self, outcome: JobOutcome, end: float | None) -> JobOutcome:
        """A job read after a resume that ended before it: at its retired place."""
        if not self._retired or end is None:
            return outcome
        nodes = frozenset(
            retired(p, hit[1])
            if (hit := self._retired.get(Place(p))) is not None and end <= hit[0]
            else p
            for p in outcome.nodes
        )
        return outcome if nodes == outcome.nodes else replace(outcome, nodes=nodes)

    def annotate(self, views: Sequence[NodeView]) -> list[NodeView]:
        """The views with each blamed node's evidence; notes an operator's resume first."""
        for view in views:
            held = held_causes(view.slurm) if view.slurm is not None else None
            if held is None:
                continue  # unknown, or not slonkd's: neither drained by us nor resumed
            if JOB_FAILURES in held:
                self.drained.add(view.node)
            elif view.node in self.drained:
                self.forgive(view.node, view.pod.uid if view.pod is not None else None)
        return [
            replace(v, job_blame=b.describe()) if (b := self._blame_of(v)) is not None else v
            for v in views
        ]

    def _blame_of(self, view: NodeView) -> Blame | None:
        """The blame of the view's pod (a blame of an earlier pod of the name is not its)."""
        b = self.blamed.get(view.node)
        if b is None or view.pod is None or place_parts(b.node)[1] != view.pod.uid:
            return None
        return b

    def status(self) -> dict[str, Any]:
        """The ``job_blame`` section of ``slonkd status``."""
        return {
            "jobs": len(self.outcomes),
            "failed": sum(1 for o in self.outcomes.values() if o.infrastructure_failure),
            "excused": self.excused,
            "reads": self.reads,
            "read_errors": self.read_errors,
            "last_read_at": self.last_read_at or None,
            "blamed": {n: b.describe() for n, b in sorted(self.blamed.items())},
            "blamed_gone_pods": {
                f"{node} pod {pod} on {self._kube_node(where) or '?'}": b.describe()
                for where, b in sorted(self.found.items())
                for node, pod, era in [place_parts(where)]
                if not era and pod != UNKNOWN_POD and self._current(where) is None
            },
        }


def _prepare(
    jobs: Sequence[FinishedJob], lives: Lives, now: float, codes: Collection[int]
) -> tuple[list[JobOutcome], int]:
    """The outcomes of new jobs, each at its places, and how many failures were excused.

    Reads only its arguments (immutable): it runs in a worker thread.
    """
    made: list[JobOutcome] = []
    excused = 0
    for job in jobs:
        where = locate(lives, job.nodes, start=job.start, end=job.end, now=now)
        failed = is_infrastructure_failure(job.state, job.exit_code, codes)
        lifecycle = failed and bool(where.lifecycle)
        made.append(
            JobOutcome(
                job_id=job.job_id,
                nodes=where.places,
                infrastructure_failure=failed and not lifecycle,
                by_exit_code=failed and job.state is JobState.FAILED,
                user=job.user,
            )
        )
        excused += lifecycle
        if failed:
            log.info(
                "job_blame.job_failed",
                job=int(job.job_id),
                state=job.state.value,
                exit_code=job.exit_code,
                places=sorted(where.places)[:50],
                **({"excused": where.lifecycle} if lifecycle else {}),
            )
    return made, excused
