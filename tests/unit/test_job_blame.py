"""Triangulation of bad nodes from failed jobs (slonkd/core/job_blame.py): pure logic.

Every ``random.Random`` here is a seeded simulation of job placement, not a secret.
"""
# ruff: noqa: S311

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slonkd.core.job_blame import (
    BlamePolicy,
    JobOutcome,
    binomial_tail,
    blame,
    is_infrastructure_failure,
    window,
)
from slonkd.core.slurm_job import JobId, JobState
from slonkd.core.slurm_node import NodeName

NODES = [NodeName(f"n{i:03d}") for i in range(64)]


class Jobs:
    """A growing job history with consecutive ids."""

    def __init__(self) -> None:
        self.items: list[JobOutcome] = []

    def add(self, nodes: set[NodeName] | list[NodeName], *, failed: bool) -> None:
        """One finished job on ``nodes``."""
        self.items.append(
            JobOutcome(
                job_id=JobId(len(self.items) + 1),
                nodes=frozenset(nodes),
                infrastructure_failure=failed,
            )
        )


def _successes(jobs: Jobs, rng: random.Random, count: int, exclude: set[NodeName]) -> None:
    pool = [n for n in NODES if n not in exclude]
    for _ in range(count):
        jobs.add(set(rng.sample(pool, rng.randint(1, 4))), failed=False)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 4))
def test_a_bad_node_failing_with_different_partners_is_blamed_at_its_kth_failure(
    seed: int, k: int
) -> None:
    """Its failed jobs share no partner: it is blamed exactly when the K-th one ends, no other is.

    The rate test is relaxed (``max_p_value=1``) so that this checks the partner rule alone;
    the rate test has its own tests below and the bench measures both together.
    """
    rng = random.Random(seed)
    bad = rng.choice(NODES)
    others = [n for n in NODES if n != bad]
    rng.shuffle(others)
    jobs = Jobs()
    _successes(jobs, rng, 60, exclude={bad})
    policy = BlamePolicy(min_failures=k, max_p_value=1.0)
    for i in range(k):
        assert blame(jobs.items, policy) == ()
        partners = others[i * 3 : i * 3 + rng.randint(0, 3)]  # disjoint slices
        jobs.add({bad, *partners}, failed=True)
        _successes(jobs, rng, rng.randint(0, 5), exclude={bad})
    found = blame(jobs.items, policy)
    assert [b.node for b in found] == [bad]
    assert found[0].independent == k
    assert len(found[0].jobs) == k


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), jobs_count=st.integers(1, 300))
def test_nodes_that_fail_only_together_with_the_bad_node_are_never_blamed(
    seed: int, jobs_count: int
) -> None:
    """Every failure includes the bad node: whoever else is blamed, it is never a partner.

    Also with the rate test relaxed: the partner rule alone keeps them clear.
    """
    rng = random.Random(seed)
    bad = rng.choice(NODES)
    jobs = Jobs()
    for _ in range(jobs_count):
        nodes = set(rng.sample(NODES, rng.randint(1, 8)))
        jobs.add(nodes, failed=bad in nodes and rng.random() < 0.7)
    assert {b.node for b in blame(jobs.items, BlamePolicy())} <= {bad}
    assert {b.node for b in blame(jobs.items, BlamePolicy(max_p_value=1.0))} <= {bad}


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_two_bad_nodes_are_both_found_and_their_partners_are_not(seed: int) -> None:
    """Two nodes each break their jobs; both are blamed, in any order, no one else."""
    rng = random.Random(seed)
    bad = set(rng.sample(NODES, 2))
    jobs = Jobs()
    for _ in range(600):
        nodes = set(rng.sample(NODES, rng.randint(2, 6)))
        jobs.add(nodes, failed=bool(nodes & bad))
    assert {b.node for b in blame(jobs.items, BlamePolicy())} == bad


def test_two_nodes_that_always_fail_together_are_not_told_apart() -> None:
    """Every failure had the same two nodes: neither has an independent failure, none blamed."""
    jobs = Jobs()
    rng = random.Random(1)
    _successes(jobs, rng, 100, exclude={NODES[0], NODES[1]})
    for i in range(10):
        jobs.add({NODES[0], NODES[1], NODES[2 + i]}, failed=True)
    assert blame(jobs.items, BlamePolicy()) == ()
    jobs.add({NODES[0], NODES[30]}, failed=True)  # now NODES[0] failed without NODES[1] ...
    assert blame(jobs.items, BlamePolicy()) == ()  # ... once: 2 independent failures, not 3
    jobs.add({NODES[0], NODES[31]}, failed=True)
    found = blame(jobs.items, BlamePolicy())
    assert [b.node for b in found] == [NODES[0]]
    assert found[0].independent == 3


def _busy_cluster(node: NodeName, share: float, *, node_always_fails: bool) -> Jobs:
    """400 jobs of 4 nodes, ``share`` of them with ``node``; a third fail at random."""
    rng = random.Random(7)
    jobs = Jobs()
    for _ in range(400):
        with_node = rng.random() < share
        nodes = {node, *rng.sample(NODES[1:], 3)} if with_node else set(rng.sample(NODES[1:], 4))
        jobs.add(nodes, failed=(node_always_fails and with_node) or rng.random() < 0.33)
    return jobs


def test_a_busy_node_on_a_cluster_where_many_jobs_fail_is_not_blamed() -> None:
    """A third of all jobs fail at random: a node in many of them fails at that rate, no more."""
    busy = NODES[0]
    jobs = _busy_cluster(busy, 0.5, node_always_fails=False)
    ran = sum(1 for j in jobs.items if busy in j.nodes)
    failed = sum(1 for j in jobs.items if busy in j.nodes and j.infrastructure_failure)
    assert failed >= 3 * BlamePolicy().min_failures  # plenty of diverse failures ...
    assert ran > failed
    assert blame(jobs.items, BlamePolicy()) == ()  # ... at the cluster's own rate


def test_a_node_failing_far_above_a_busy_clusters_rate_is_blamed() -> None:
    """The same busy cluster, but one node fails every job it runs: it stands out."""
    bad = NODES[0]
    jobs = _busy_cluster(bad, 0.1, node_always_fails=True)
    found = blame(jobs.items, BlamePolicy())
    assert [b.node for b in found] == [bad]
    assert found[0].p_value < BlamePolicy().max_p_value
    assert "different partners" in found[0].describe()


def test_only_the_jobs_since_the_last_m_failures_count() -> None:
    """Old failures age out of the window: a repaired node stops being blamed."""
    jobs = Jobs()
    rng = random.Random(3)
    _successes(jobs, rng, 100, exclude={NODES[0]})
    for i in range(3):
        jobs.add({NODES[0], NODES[10 + i]}, failed=True)
    policy = BlamePolicy(window_failures=5)
    assert [b.node for b in blame(jobs.items, policy)] == [NODES[0]]
    for i in range(5):  # five newer failures elsewhere, with diverse partners each
        jobs.add({NODES[20 + 2 * i], NODES[21 + 2 * i]}, failed=True)
    assert window(jobs.items, policy)[0].job_id == jobs.items[-5].job_id
    assert NODES[0] not in {b.node for b in blame(jobs.items, policy)}


@pytest.mark.parametrize(
    ("state", "code", "expected"),
    [
        (JobState.NODE_FAIL, 0, True),
        (JobState.BOOT_FAIL, 0, True),
        (JobState.FAILED, 77, True),
        (JobState.FAILED, 1, False),
        (JobState.COMPLETED, 77, False),
        (JobState.CANCELLED, 77, False),
        (JobState.TIMEOUT, 0, False),
        (JobState.OUT_OF_MEMORY, 77, False),
    ],
)
def test_which_job_ends_count_against_their_nodes(
    state: JobState, code: int, expected: bool
) -> None:
    """NODE_FAIL/BOOT_FAIL always; FAILED only with an exit code the policy names (77 here)."""
    assert is_infrastructure_failure(state, code, {77}) is expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_failures": 1}, "min_failures"),
        ({"min_failures": 5, "window_failures": 4}, "window_failures"),
        ({"max_p_value": 0.0}, "max_p_value"),
        ({"exit_code_min_users": 0}, "exit_code_min_users"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_key(kwargs: dict[str, float], message: str) -> None:
    """Nonsense settings are an error naming the setting, never a silent blame-nothing."""
    with pytest.raises(ValueError, match=message):
        BlamePolicy(**kwargs)  # type: ignore[arg-type]


def test_exit_code_failures_count_against_a_node_once_enough_different_users_had_them() -> None:
    """FAILED with a policy's exit code is a user's program speaking: one user is not enough.

    The same node and partners: three exit-code failures of one user blame nobody; of two
    users, they count; NODE_FAIL (SLURM's word) counts whoever ran the job.
    """
    bad = NODES[0]

    def history(users: list[int], *, by_exit_code: bool) -> list[JobOutcome]:
        jobs = [
            JobOutcome(
                job_id=JobId(i + 1),
                nodes=frozenset({bad, NODES[i + 1]}),
                infrastructure_failure=True,
                by_exit_code=by_exit_code,
                user=user,
            )
            for i, user in enumerate(users)
        ]
        jobs += [
            JobOutcome(
                job_id=JobId(10 + i), nodes=frozenset({NODES[i]}), infrastructure_failure=False
            )
            for i in range(1, 40)
        ]
        return jobs

    policy = BlamePolicy(min_failures=3, max_p_value=1.0)
    assert blame(history([7, 7, 7], by_exit_code=True), policy) == ()
    assert [b.node for b in blame(history([7, 7, 8], by_exit_code=True), policy)] == [bad]
    assert [b.node for b in blame(history([7, 7, 7], by_exit_code=False), policy)] == [bad]
    unbounded = BlamePolicy(min_failures=3, max_p_value=1.0, exit_code_min_users=1)
    assert [b.node for b in blame(history([7, 7, 7], by_exit_code=True), unbounded)] == [bad]


def test_a_job_without_nodes_is_refused() -> None:
    """A job record with no nodes is malformed input, not an empty implication."""
    with pytest.raises(ValueError, match="at least one node"):
        JobOutcome(job_id=JobId(1), nodes=frozenset(), infrastructure_failure=True)


def test_binomial_tail_matches_exact_values() -> None:
    """P[X >= k] against hand-computed values and the edges."""
    assert binomial_tail(0, 5, 0.3) == 1.0
    assert binomial_tail(6, 5, 0.3) == 0.0
    assert binomial_tail(5, 5, 0.5) == pytest.approx(1 / 32)
    assert binomial_tail(1, 3, 0.5) == pytest.approx(7 / 8)
    assert binomial_tail(2, 4, 0.1) == pytest.approx(1 - 0.9**4 - 4 * 0.1 * 0.9**3)


def _direct_tail(successes: int, trials: int, p: float) -> float:
    """The tail term by term, each from three lgammas (the definition)."""
    return sum(
        math.exp(
            math.lgamma(trials + 1)
            - math.lgamma(k + 1)
            - math.lgamma(trials - k + 1)
            + k * math.log(p)
            + (trials - k) * math.log1p(-p)
        )
        for k in range(successes, trials + 1)
    )


@settings(max_examples=300, deadline=None)
@given(
    trials=st.integers(1, 3000),
    share=st.floats(0.0, 1.0),
    p=st.floats(1e-6, 1 - 1e-6),
)
def test_binomial_tail_by_ratios_equals_the_sum_of_its_terms(
    trials: int, share: float, p: float
) -> None:
    """The tail by term ratios, cut where the terms stop counting, is the direct sum."""
    successes = max(1, round(share * trials))
    direct = min(1.0, _direct_tail(successes, trials, p))
    assert binomial_tail(successes, trials, p) == pytest.approx(direct, rel=1e-9, abs=1e-300)


def test_the_evidence_lists_jobs_by_id_whatever_order_they_ended_in() -> None:
    """The evidence lists jobs by id, whatever order they ended in.

    Jobs that end in the same second come back from SLURM in either order: the reason and
    the Event list them by id, so they read the same on every leader.

    On 24.11 the e2e test saw "jobs 8,7,9" for jobs 7, 8 and 9 (a full run, 2026-12-04).
    """
    bad = NODES[0]
    outcomes = [
        JobOutcome(job_id=JobId(i), nodes=frozenset({bad, NODES[i]}), infrastructure_failure=True)
        for i in (8, 7, 9)
    ]
    outcomes += [
        JobOutcome(job_id=JobId(10 + i), nodes=frozenset({NODES[i]}), infrastructure_failure=False)
        for i in range(1, 40)
    ]
    found = blame(outcomes, BlamePolicy(min_failures=3, max_p_value=1.0))
    assert [b.node for b in found] == [bad]
    assert found[0].jobs == (7, 8, 9)
    assert found[0].describe().endswith("jobs 7,8,9")
