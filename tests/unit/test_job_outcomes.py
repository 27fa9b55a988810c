"""Nodes blamed for failed jobs, wired: the window of reads, decide's ``job-failures``, its end.

The coordinator's part (slonkd/runtime/coordinating/job_outcomes.py) with a scripted read
(no SLURM), and ``decide`` on the views it annotates. The workers' pods (``test_decide``'s,
one per name, long running) are fed as the pod cache's events, as the coordinator does:
jobs are kept by the pods that ran them (slonkd/core/job_places.py, tests/unit/test_job_places.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace

import pytest

from slonkd.adapters.kube.informer import CacheEvent, EventType
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.core.decide import JOB_FAILURES, decide
from slonkd.core.plan import Kind, Writer
from slonkd.core.slurm_job import JobState
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.coordinating.job_outcomes import JobOutcomes
from slonkd.runtime.coordinating.settings import JobBlameSettings
from tests.unit.coordinator_fakes import POLICY, kinds, pod, slurm, view
from tests.unit.jobs import finished_job

BAD = NodeName("w-0")
SETTINGS = JobBlameSettings(min_failures=3, max_p_value=0.5, infrastructure_exit_codes=(42,))


def _job(
    job_id: int,
    *nodes: str,
    state: JobState = JobState.COMPLETED,
    code: int = 0,
    user: int | None = None,
) -> FinishedJob:
    """Job ``job_id`` on ``nodes``; run by user ``user`` (default: a user of its own)."""
    return finished_job(
        job_id, *nodes, state=state, code=code, user=1000 + job_id if user is None else user
    )


def _history(failures: int) -> list[FinishedJob]:
    """Successes among w-1..w-8, then ``failures`` jobs of w-0 with a different partner each."""
    jobs = [_job(i, f"w-{i}", f"w-{i + 1}") for i in range(1, 8)]
    jobs += [
        _job(100 + i, "w-0", f"w-{i}", state=JobState.FAILED, code=42)
        for i in range(1, 1 + failures)
    ]
    return jobs


def _fed(outcomes: JobOutcomes) -> JobOutcomes:
    """``outcomes`` with the pods of w-0..w-9 in its history, as the pod cache lists them."""
    for i in range(10):
        worker = pod(name=f"w-{i}", on=f"kn-{i}")
        outcomes.on_pod_event(CacheEvent(type=EventType.ADDED, key=f"slonk/w-{i}", obj=worker))
    return outcomes


def _outcomes() -> tuple[JobOutcomes, list[int]]:
    changes: list[int] = []

    async def never() -> list[FinishedJob]:
        raise AssertionError("not read in these tests")

    return _fed(JobOutcomes(SETTINGS, never, lambda: changes.append(1))), changes


def test_a_node_failing_with_different_partners_is_blamed_after_k_failures() -> None:
    """Two failures blame nobody; the third (K=3) blames w-0 and none of its partners."""
    outcomes, _ = _outcomes()
    outcomes.ingest(_history(2))
    assert not outcomes.judge()
    assert outcomes.blamed == {}
    outcomes.ingest(_history(3))  # the same jobs listed again, and one more
    assert len(outcomes.outcomes) == 10  # a job slurmctld still lists is not new again
    assert outcomes.judge()
    assert set(outcomes.blamed) == {BAD}
    evidence = outcomes.blamed[BAD].describe()
    assert "jobs 101,102,103" in evidence
    assert "3 different partners" in evidence


def test_other_exit_codes_and_jobs_that_never_ran_blame_nobody() -> None:
    """FAILED with a code the policy does not name, cancelled jobs without nodes: no blame."""
    outcomes, _ = _outcomes()
    jobs = [_job(i, f"w-{i}", f"w-{i + 1}") for i in range(1, 8)]
    jobs += [_job(100 + i, "w-0", f"w-{i}", state=JobState.FAILED, code=1) for i in range(1, 6)]
    jobs += [_job(200, state=JobState.CANCELLED)]
    assert outcomes.ingest(jobs) == 12
    assert not outcomes.judge()


def test_the_blamed_view_drains_job_failures_in_the_budget_with_the_evidence() -> None:
    """decide on the annotated view: a budgeted SLURM drain and a JobFailures Event.

    The Event is not budgeted (it takes nothing out); both are the coordinator's, the Event
    carries the job ids; the partners' views want nothing.
    """
    outcomes, _ = _outcomes()
    outcomes.ingest(_history(3))
    outcomes.judge()
    views = outcomes.annotate([view(), view(node=NodeName("w-1"))])
    assert views[1].job_blame == ""
    plan = decide(views[0], POLICY)
    assert kinds(plan, Writer.COORDINATOR) == [
        ("drain", "job-failures"),
        ("event", "job-failures"),
    ]
    assert [a.budgeted for a in plan.actions] == [True, False]  # the Event takes nothing out
    event = next(a for a in plan.actions if a.kind is Kind.EVENT)
    assert event.key == "JobFailures"
    assert "jobs 101,102,103" in event.detail
    assert any("blamed for failed jobs" in n for n in plan.notes)
    assert decide(views[1], POLICY).actions == ()


def test_slonkd_never_releases_job_failures_itself() -> None:
    """Held for job-failures and no longer blamed (the window moved on): kept, with a note."""
    held = view(slurm=slurm("IDLE+DRAIN", reason="slonkd:job-failures"))
    plan = decide(held, POLICY)
    assert not [a for a in plan.actions if a.cause == JOB_FAILURES]
    assert any("operator" in n and "job-failures" in n for n in plan.notes)


def test_an_operators_resume_ends_the_blame_and_it_is_not_drained_again() -> None:
    """Drained for job-failures, then resumed by an operator: its failures leave the window.

    New failures blame it afresh.
    """
    outcomes, _ = _outcomes()
    outcomes.ingest(_history(3))
    outcomes.judge()
    drained = view(slurm=slurm("IDLE+DRAIN", reason="slonkd:job-failures"))
    assert outcomes.annotate([drained])[0].job_blame
    assert outcomes.drained == {BAD}
    resumed = outcomes.annotate([view()])[0]
    assert resumed.job_blame == ""
    assert outcomes.blamed == {}
    assert decide(resumed, POLICY).actions == ()
    more = [_job(300 + i, "w-0", f"w-{i}", state=JobState.FAILED, code=42) for i in range(4, 7)]
    outcomes.ingest(more)
    outcomes.judge()
    assert set(outcomes.blamed) == {BAD}


def test_an_operators_resume_keeps_the_evidence_the_jobs_hold_against_the_other_nodes() -> None:
    """w-0 and w-1 failed two jobs together; w-0 is the stronger (5 failures, 4 independent).

    w-0 is blamed and explains the shared jobs; w-1 (2 failures of its own) is not. An
    operator resumes w-1 (say it was drained earlier): its jobs count for w-1 no more, but
    they are still w-0's failures. Forgetting them would leave w-0 three failures, under K=4.
    """
    outcomes, _ = _outcomes()
    outcomes.s = replace(SETTINGS, min_failures=4)
    outcomes.policy = outcomes.s.policy()
    jobs = [_job(i, f"w-{i}", f"w-{i + 1}") for i in range(2, 8)]
    jobs += [
        _job(101, "w-0", "w-1", state=JobState.NODE_FAIL),
        _job(102, "w-0", "w-1", "w-5", state=JobState.NODE_FAIL),
        *(_job(100 + i, "w-0", f"w-{i - 1}", state=JobState.NODE_FAIL) for i in (3, 4, 5)),
        _job(106, "w-1", "w-6", state=JobState.NODE_FAIL),
        _job(107, "w-1", "w-7", state=JobState.NODE_FAIL),
    ]
    outcomes.ingest(jobs)
    outcomes.judge()
    assert set(outcomes.blamed) == {BAD}
    outcomes.forgive(NodeName("w-1"))
    outcomes.judge()
    assert set(outcomes.blamed) == {BAD}
    assert outcomes.blamed[BAD].jobs == (101, 102, 103, 104, 105)


def test_a_partner_that_failed_only_with_the_resumed_node_is_still_not_blamed() -> None:
    """w-9 failed three jobs, every one with w-0: after w-0's resume it is still explained.

    (w-0 also failed three without w-9: it is the one blamed.)
    """
    outcomes, _ = _outcomes()
    jobs = [_job(i, f"w-{i}", f"w-{i + 1}") for i in range(1, 8)]
    jobs += [_job(100 + i, "w-0", "w-9", f"w-{i}", state=JobState.NODE_FAIL) for i in (1, 2, 3)]
    jobs += [_job(100 + i, "w-0", f"w-{i}", state=JobState.NODE_FAIL) for i in (4, 5, 6)]
    outcomes.ingest(jobs)
    outcomes.judge()
    assert set(outcomes.blamed) == {BAD}
    outcomes.forgive(BAD)
    outcomes.judge()
    assert outcomes.blamed == {}


def test_a_drain_slonkd_did_not_make_is_never_touched() -> None:
    """Blamed, but an operator drained the node with a reason of their own: no action."""
    outcomes, _ = _outcomes()
    outcomes.ingest(_history(3))
    outcomes.judge()
    foreign = outcomes.annotate([view(slurm=slurm("IDLE+DRAIN", reason="bad cable"))])[0]
    assert foreign.job_blame
    assert decide(foreign, POLICY).actions == ()
    assert outcomes.drained == set()


def test_the_task_reads_judges_and_starts_a_pass_on_a_new_blame() -> None:
    """run(): every read is ingested and judged; a changed blame calls on_change once.

    A failed read (slurmctld away, or an output that does not parse) is counted and retried,
    never fatal, and changes nothing.
    """
    from slonkd.core.errors import ParseError, TransientError

    reads: list[list[FinishedJob] | Exception] = [
        _history(2),
        TransientError("slurmctld away"),
        ParseError("not a squeue id|state|exit|nodes| line"),
        _history(3),
        _history(3),
    ]
    changes: list[int] = []

    async def read() -> list[FinishedJob]:
        item = reads.pop(0) if reads else _history(3)
        if isinstance(item, Exception):
            raise item
        return item

    async def scenario() -> tuple[JobOutcomes, int]:
        outcomes = _fed(JobOutcomes(replace(SETTINGS, poll_s=1), read, lambda: changes.append(1)))
        task = asyncio.create_task(outcomes.run())
        try:
            async with asyncio.timeout(15):
                while outcomes.read_errors < 2:  # noqa: ASYNC110 - polls the task's counter
                    await asyncio.sleep(0.05)
                after_errors = len(outcomes.outcomes)
                while outcomes.reads < 3:  # noqa: ASYNC110 - polls the task's counter
                    await asyncio.sleep(0.05)
        finally:
            task.cancel()
        return outcomes, after_errors

    outcomes, after_errors = asyncio.run(scenario())
    assert after_errors == 9  # the first read's jobs, nothing from the failed reads
    assert outcomes.read_errors == 2
    assert changes == [1]
    assert set(outcomes.blamed) == {BAD}
    assert outcomes.status()["blamed"].keys() == {"w-0"}


def test_one_user_exiting_with_an_infrastructure_code_cannot_drain_the_nodes_they_pick() -> None:
    """A user picks w-0 and three partners, and exits 42 (a code the policy names) each time.

    One user is not enough (exit_code_min_users, 2 by default): nobody is blamed. A second
    user's job failing that way on w-0 makes them count. NODE_FAIL, which SLURM sets, never
    needed more than one user.
    """
    outcomes, _ = _outcomes()
    jobs = [_job(i, f"w-{i}", f"w-{i + 1}") for i in range(1, 8)]
    mine = [
        _job(100 + i, "w-0", f"w-{i}", state=JobState.FAILED, code=42, user=666) for i in (1, 2, 3)
    ]
    outcomes.ingest(jobs + mine)
    outcomes.judge()
    assert outcomes.blamed == {}
    other = _job(104, "w-0", "w-4", state=JobState.FAILED, code=42, user=1001)
    outcomes.ingest([*jobs, *mine, other])
    outcomes.judge()
    assert set(outcomes.blamed) == {BAD}
    assert outcomes.blamed[BAD].jobs == (101, 102, 103, 104)

    lost, _ = _outcomes()
    lost.ingest(
        jobs
        + [_job(100 + i, "w-0", f"w-{i}", state=JobState.NODE_FAIL, user=666) for i in (1, 2, 3)]
    )
    lost.judge()
    assert set(lost.blamed) == {BAD}


def test_without_the_bound_one_users_exit_code_is_enough() -> None:
    """exit_code_min_users 1: the old behaviour, for a site whose users cannot pick nodes."""
    outcomes, _ = _outcomes()
    outcomes.s = replace(SETTINGS, exit_code_min_users=1)
    outcomes.policy = outcomes.s.policy()
    jobs = [_job(i, f"w-{i}", f"w-{i + 1}") for i in range(1, 8)]
    jobs += [
        _job(100 + i, "w-0", f"w-{i}", state=JobState.FAILED, code=42, user=666) for i in (1, 2, 3)
    ]
    outcomes.ingest(jobs)
    outcomes.judge()
    assert set(outcomes.blamed) == {BAD}


def _heavy_history(count: int) -> list[FinishedJob]:
    """``count`` finished jobs of 1 to 64 nodes among 1,024; a quarter fail, n0007 mostly."""
    rng = random.Random(7)  # noqa: S311 - a seeded simulation, not a secret
    names = [f"n{i:04d}" for i in range(1024)]
    jobs = []
    for i in range(1, count + 1):
        nodes = rng.sample(names, rng.choice((1, 4, 16, 64)))
        failed = ("n0007" in nodes and rng.random() < 0.9) or rng.random() < 0.25
        jobs.append(_job(i, *nodes, state=JobState.NODE_FAIL if failed else JobState.COMPLETED))
    return jobs


@pytest.mark.alone  # a bound in time: no other worker's tests beside it (docs/testing.md)
def test_judging_twenty_thousand_jobs_leaves_the_event_loop_responsive() -> None:
    """The task's read, its 20,000 jobs placed and judged: the loop never stalls 0.5 s.

    Judged on the loop, the same read stalled it 3.9 to 7 s here; off it, 17 to 97 ms alone,
    and 0.41 s once beside three other workers before this test ran alone.

    The window spans every job (window_failures = max_jobs = 20,000), the worst case the
    settings allow. A heartbeat task beside the term's task measures the loop's longest gap;
    a lease renewal and a pass run on that loop. The task's second read starts once the
    first read's jobs were placed and judged.
    """
    heavy = _heavy_history(20_000)
    settings = replace(SETTINGS, poll_s=1, window_failures=20_000, max_jobs=20_000)
    reads = 0

    async def read() -> list[FinishedJob]:
        nonlocal reads
        reads += 1
        return heavy

    async def scenario() -> tuple[float, float]:
        outcomes = JobOutcomes(settings, read, lambda: None)
        gaps: list[float] = []

        async def heartbeat() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        began = time.monotonic()
        task = asyncio.create_task(outcomes.run())
        try:
            async with asyncio.timeout(120):
                while reads < 2:  # noqa: ASYNC110 - polls the scripted read's counter
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            beat.cancel()
        assert len(outcomes.outcomes) == 20_000
        return max(gaps), time.monotonic() - began

    worst, took = asyncio.run(scenario())
    assert worst < 0.5, f"the loop stalled {worst:.2f} s (the first read judged in {took:.1f} s)"


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"min_failures": 1}, "min_failures"),
        ({"min_failures": 2.5}, "min_failures"),
        ({"window_failures": 1}, "window_failures"),
        ({"max_p_value": 0}, "max_p_value"),
        ({"max_p_value": "low"}, "max_p_value"),
        ({"infrastructure_exit_codes": [0]}, "infrastructure_exit_codes"),
        ({"infrastructure_exit_codes": [300]}, "infrastructure_exit_codes"),
        ({"infrastructure_exit_codes": 42}, "infrastructure_exit_codes"),
        ({"poll_s": 0.5}, "poll_s"),
        ({"max_jobs": 10}, "max_jobs"),
        ({"exit_code_min_users": 0}, "exit_code_min_users"),
        ({"exit_code_min_users": 1.5}, "exit_code_min_users"),
        ({"exit_code_min_users": True}, "exit_code_min_users"),
        ({"k": 3}, "k"),
    ],
)
def test_bad_settings_name_their_key(raw: dict[str, object], key: str) -> None:
    """Every bad value is refused at load with a message naming ``job_blame.<key>``."""
    with pytest.raises(ValueError, match=key):
        JobBlameSettings.from_mapping(raw)
    assert JobBlameSettings.from_mapping({}) == JobBlameSettings()


async def test_a_read_with_no_new_jobs_after_a_resume_does_not_drain_the_node_again() -> None:
    """The resumed node's blame stays ended when the next read brings nothing new.

    slurmctld lists the same finished jobs for minutes (MinJobAge): such a read maps the last
    judgement to the pods as they are now. The e2e test saw w-5 drained again 0.1 s after the
    operator's resume, for the same jobs 7, 8 and 9: the judgement kept the unretired place.
    """
    outcomes, _ = _outcomes()
    jobs = [_job(i, f"w-{i}", f"w-{i + 1}") for i in range(1, 8)]
    jobs += [_job(100 + i, "w-0", f"w-{i}", state=JobState.NODE_FAIL) for i in (1, 2, 3)]
    assert await outcomes.step(jobs)
    assert set(outcomes.blamed) == {BAD}
    outcomes.forgive(BAD)
    assert outcomes.blamed == {}
    await outcomes.step(jobs)  # the same listing again: nothing new
    assert outcomes.blamed == {}
    assert BAD not in outcomes.drained
