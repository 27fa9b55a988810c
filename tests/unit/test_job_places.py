"""Job blame judges where a job ran, not the name it ran under (issue 37 item 7 (a), (b)).

The pure part (slonkd/core/job_places.py: the pods behind each SLURM node name over time,
and where a job of a given time ran) and the coordinator's part wired to it
(slonkd/runtime/coordinating/job_outcomes.py fed with the pod cache's events), with a
scripted read (no SLURM, no apiserver).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from slonkd.adapters.kube.informer import CacheEvent, EventType
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.core.decide import decide
from slonkd.core.job_places import UNKNOWN_POD, PodHistory, locate, place, place_parts
from slonkd.core.kube_objects import Pod, PodPhase
from slonkd.core.slurm_job import JobState
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.coordinating.job_outcomes import JobOutcomes
from slonkd.runtime.coordinating.settings import JobBlameSettings
from slonkd_sandbox.fleet import FleetShape
from tests.unit.coordinator_fakes import POLICY, view
from tests.unit.jobs import finished_job
from tests.unit.pods import running_pod

T0 = 1_800_000_000.0
"""The tests' history starts here (seconds since the epoch)."""
BAD = NodeName("w-0")
SETTINGS = JobBlameSettings(min_failures=3, max_p_value=0.5)
SHAPE = FleetShape(slurmds=10, kube_nodes=10)
"""Ten workers w-0 ... w-9, one a K8s node (kn-0 ... kn-9): the names only, nothing runs."""


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str, uid: str, *, on: str, created: float, **kw: Any) -> Pod:
    return replace(running_pod(name, uid=uid, on=on), created=_stamp(created), **kw)


def _job(
    job_id: int, *nodes: str, end: float, state: JobState = JobState.NODE_FAIL, code: int = 0
) -> FinishedJob:
    """A job that ran for 60 s up to ``end``."""
    return finished_job(job_id, *nodes, state=state, code=code, start=end - 60, end=end)


class Fleet:
    """A JobOutcomes fed with pod events at a scripted time, as the coordinator feeds it.

    It starts with :data:`SHAPE`'s pods, each a day old.
    """

    def __init__(self, settings: JobBlameSettings = SETTINGS) -> None:
        self.now = T0

        async def never() -> list[FinishedJob]:
            raise AssertionError("not read in these tests")

        self.outcomes = JobOutcomes(settings, never, lambda: None, clock=lambda: self.now)
        self.pods: dict[str, Pod] = {}
        placed = zip(SHAPE.names, SHAPE.kube_node_names("kn-"), strict=True)
        for i, (name, kube_node) in enumerate(placed):
            self.event(EventType.ADDED, _pod(name, f"u{i}", on=kube_node, created=T0 - 86400))

    def event(self, kind: EventType, pod: Pod, at: float | None = None) -> None:
        """The pod cache's event for ``pod`` at ``at`` (default: now)."""
        if at is not None:
            self.now = at
        old = self.pods.get(pod.name)
        if kind is EventType.DELETED:
            self.pods.pop(pod.name, None)
        else:
            self.pods[pod.name] = pod
        self.outcomes.on_pod_event(CacheEvent(type=kind, key=f"slonk/{pod.name}", obj=pod, old=old))

    def replace_pod(self, name: str, uid: str, *, on: str, deleted: float, created: float) -> Pod:
        """The pod of ``name`` deleted at ``deleted`` (30 s grace), a new one at ``created``."""
        old = self.pods[name]
        going = replace(old, deletion_timestamp=_stamp(deleted + 30), deletion_grace_s=30)
        self.event(EventType.MODIFIED, going, at=deleted)
        self.event(EventType.DELETED, going, at=deleted + 30)
        new = _pod(name, uid, on=on, created=created)
        self.event(EventType.ADDED, new, at=created)
        return new

    def judge(self, jobs: list[FinishedJob]) -> None:
        """A read of ``jobs`` now, judged."""
        self.outcomes.ingest(jobs)
        self.outcomes.judge()

    def view_of(self, name: str) -> str:
        """The evidence in the view of ``name``'s current pod ("": not blamed)."""
        pod = self.pods[name]
        return self.outcomes.annotate([view(node=NodeName(name), pod=pod)])[0].job_blame


def _successes(start: int, end: float) -> list[FinishedJob]:
    return [
        _job(start + i, f"w-{i}", f"w-{i + 1}", end=end, state=JobState.COMPLETED)
        for i in range(1, 8)
    ]


# -- (a) failures are keyed by the pod (and K8s node) that ran the job ------------------------


def test_a_failure_on_the_previous_pods_hardware_never_counts_against_the_new_pod() -> None:
    """w-0's old pod (u0 on kn-0) failed three jobs with three partners, then was replaced.

    The jobs are read after the replacement (within slurmctld's MinJobAge): their time puts
    them on the old pod. The new pod (on kn-9) is not blamed, its view wants nothing; the
    old pod's blame is reported (status) with its K8s node, for an operator to look at.
    Two failures on the new pod are not three; the third is.
    """
    fleet = Fleet()
    jobs = _successes(10, T0 + 50)
    jobs += [_job(100 + i, "w-0", f"w-{i}", end=T0 + 100 * i) for i in range(1, 4)]
    fleet.replace_pod("w-0", "new", on="kn-9", deleted=T0 + 1000, created=T0 + 1100)
    fleet.now = T0 + 1200
    fleet.judge(jobs)
    assert fleet.outcomes.blamed == {}
    assert fleet.view_of("w-0") == ""
    assert decide(view(pod=fleet.pods["w-0"]), POLICY).actions == ()
    gone = fleet.outcomes.status()["blamed_gone_pods"]
    assert list(gone) == ["w-0 pod u0 on kn-0"]
    assert "jobs 101,102,103" in gone["w-0 pod u0 on kn-0"]

    more = [_job(200 + i, "w-0", f"w-{i}", end=T0 + 2000 + 100 * i) for i in range(4, 6)]
    fleet.now = T0 + 3000
    fleet.judge(jobs + more)
    assert fleet.outcomes.blamed == {}
    fleet.judge([*jobs, *more, _job(206, "w-0", "w-6", end=T0 + 3000)])
    assert set(fleet.outcomes.blamed) == {BAD}
    assert "jobs 204,205,206" in fleet.view_of("w-0")


def test_the_failures_of_one_name_on_two_pods_are_two_places_not_one() -> None:
    """Two failures on the old pod and one on the new never add up to the new pod's three."""
    fleet = Fleet()
    jobs = _successes(10, T0 + 50)
    jobs += [_job(100 + i, "w-0", f"w-{i}", end=T0 + 100 * i) for i in range(1, 3)]
    fleet.replace_pod("w-0", "new", on="kn-0", deleted=T0 + 1000, created=T0 + 1100)
    jobs.append(_job(103, "w-0", "w-3", end=T0 + 1500))
    fleet.now = T0 + 1600
    fleet.judge(jobs)
    assert fleet.outcomes.blamed == {}
    assert fleet.view_of("w-0") == ""


def test_a_job_is_placed_by_its_start_on_the_pod_that_then_served_the_name() -> None:
    """Pure: the pod alive at the job's start ran it; before any pod this term saw: unknown."""
    history = PodHistory()
    history.observe(_pod("w-0", "a", on="kn-1", created=T0), T0)
    history.observe(_pod("w-0", "b", on="kn-2", created=T0 + 1000), T0 + 1000)
    lives = history.lives()
    assert locate(lives, [BAD], start=T0 + 10, end=T0 + 20, now=T0 + 2000).places == {
        place(BAD, "a")
    }
    assert locate(lives, [BAD], start=T0 + 1010, end=T0 + 1020, now=T0 + 2000).places == {
        place(BAD, "b")
    }
    assert locate(lives, [BAD], start=T0 - 10, end=T0 - 5, now=T0 + 2000).places == {
        place(BAD, UNKNOWN_POD)
    }
    assert locate(lives, [NodeName("w-7")], start=T0, end=T0, now=T0).places == {
        place(NodeName("w-7"), UNKNOWN_POD)
    }
    assert place_parts(place(BAD, "a")) == (BAD, "a", 0)
    assert lives[BAD][0].kube_node == "kn-1"


# -- (b) a failure the pod's own lifecycle explains is not the hardware's -------------------


@pytest.mark.parametrize(
    "going",
    [
        {"deletion_timestamp": _stamp(T0 + 1030), "deletion_grace_s": 30},
        {
            "disruption": "PreemptionByScheduler",
            "disruption_since": _stamp(T0 + 1000),
            "deletion_timestamp": _stamp(T0 + 1030),
            "deletion_grace_s": 30,
        },
        {
            "disruption": "EvictionByEvictionAPI",
            "disruption_since": _stamp(T0 + 1000),
            "deletion_timestamp": _stamp(T0 + 1030),
            "deletion_grace_s": 30,
        },
        {
            "disruption": "TerminationByKubelet",
            "disruption_since": _stamp(T0 + 1000),
            "phase": PodPhase.FAILED,
        },
    ],
    ids=["deleted", "preempted", "evicted", "terminated-by-kubelet"],
)
def test_node_fail_ending_after_the_pod_was_asked_to_go_is_not_the_hardwares(
    going: dict[str, Any],
) -> None:
    """The pod is being deleted, preempted, evicted: its jobs end NODE_FAIL. Nobody is blamed.

    They are counted as excused (status) and none of them is a failure of w-0 or a partner.
    """
    fleet = Fleet()
    fleet.event(EventType.MODIFIED, replace(fleet.pods["w-0"], **going), at=T0 + 1000)
    jobs = _successes(10, T0 + 50)
    jobs += [_job(100 + i, "w-0", f"w-{i}", end=T0 + 1000 + i) for i in range(1, 4)]
    fleet.now = T0 + 1100
    fleet.judge(jobs)
    assert fleet.outcomes.blamed == {}
    assert fleet.outcomes.status()["excused"] == 3
    assert fleet.outcomes.status()["failed"] == 0


def test_a_pod_replaced_under_a_running_job_explains_its_failure() -> None:
    """The job started on the old pod and ended after the new one came: the pod went away."""
    fleet = Fleet()
    fleet.replace_pod("w-0", "new", on="kn-0", deleted=T0 + 1000, created=T0 + 1100)
    history = fleet.outcomes.history.lives()
    found = locate(history, [BAD, NodeName("w-1")], start=T0 + 900, end=T0 + 1130, now=T0 + 1200)
    assert found.lifecycle
    assert found.places == {place(BAD, "u0"), place(NodeName("w-1"), "u1")}


def test_a_failure_before_the_pod_was_asked_to_go_still_counts() -> None:
    """NODE_FAIL first, the pod's deletion after (a remediation, an operator): hardware."""
    fleet = Fleet()
    jobs = _successes(10, T0 + 50)
    jobs += [_job(100 + i, "w-0", f"w-{i}", end=T0 + 100 * i) for i in range(1, 4)]
    going = replace(fleet.pods["w-0"], deletion_timestamp=_stamp(T0 + 1030), deletion_grace_s=30)
    fleet.event(EventType.MODIFIED, going, at=T0 + 1000)
    fleet.now = T0 + 1100
    fleet.judge(jobs)
    assert set(fleet.outcomes.blamed) == {BAD}
    assert fleet.outcomes.status()["excused"] == 0


# -- (c) an operator's resume retires the node's place, the jobs stay -----------------------


def _blamed() -> tuple[Fleet, list[FinishedJob]]:
    """A fleet whose w-0 is blamed (three failures there after ten successes) and its jobs."""
    fleet = Fleet()
    jobs = _successes(10, T0 + 50)
    jobs += [_job(100 + i, "w-0", f"w-{i}", end=T0 + 100 * i) for i in range(1, 4)]
    fleet.now = T0 + 400
    fleet.judge(jobs)
    assert set(fleet.outcomes.blamed) == {BAD}
    return fleet, jobs


def test_a_job_that_ended_before_the_resume_and_is_read_after_it_counts_for_it_no_more() -> None:
    """slurmctld lists a job for MinJobAge: one that ended before the resume is its past."""
    fleet, jobs = _blamed()
    fleet.now = T0 + 1000
    fleet.outcomes.forgive(BAD, "u0")
    assert fleet.outcomes.blamed == {}
    late = _job(104, "w-0", "w-4", end=T0 + 900)
    fresh = [_job(100 + i, "w-0", f"w-{i}", end=T0 + 1100 + i) for i in (5, 6)]
    fleet.now = T0 + 1200
    fleet.judge([*jobs, late, *fresh])
    assert fleet.outcomes.blamed == {}
    fleet.judge([*jobs, late, *fresh, _job(107, "w-0", "w-7", end=T0 + 1150)])
    assert set(fleet.outcomes.blamed) == {BAD}
    assert fleet.outcomes.blamed[BAD].jobs == (105, 106, 107)


def test_a_read_without_new_jobs_stops_draining_a_blamed_pod_that_was_replaced() -> None:
    """The blamed pod goes and a new one serves w-0: the next read says so, no new job needed."""
    fleet, jobs = _blamed()
    fleet.replace_pod("w-0", "new", on="kn-9", deleted=T0 + 1000, created=T0 + 1100)
    assert asyncio.run(fleet.outcomes.step(jobs))  # the same read: the drained blame changed
    assert fleet.outcomes.blamed == {}
    assert list(fleet.outcomes.status()["blamed_gone_pods"]) == ["w-0 pod u0 on kn-0"]
