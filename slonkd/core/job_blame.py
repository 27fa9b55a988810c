"""Which node keeps breaking jobs: triangulation over finished jobs (pure; no I/O).

A multi-node job that ends NODE_FAIL (or fails with an exit code the policy calls an
infrastructure failure) implicates every node it ran on, most of them innocent. One bad node
shows up as the node that fails with many *different* partners; a healthy node that failed
only together with it is explained by it. The rule here, applied to a window of finished jobs:

- a node's **independent failures** are its infrastructure failures with those it shared
  with its most frequent partner counted as one: ``failures(n) - max(0, shared(n, p) - 1)``
  for the partner ``p`` it shared most with. A node whose every failure had the same partner
  has one (the two cannot be told apart, so neither is blamed until the evidence separates
  them); a node that failed with a different partner each time has all of them;
- a node is blamed when it has at least ``min_failures`` independent failures **and** its
  failure rate is improbable under the rate of the jobs it did not run in (a one-sided
  binomial tail below ``max_p_value`` divided by the number of nodes judged: every node is
  tested at once, and chance alone must not blame one of hundreds): on a cluster where many
  jobs fail for their own reasons, a busy node is not blamed for being busy;
- blamed nodes are taken one at a time, strongest evidence first, and the jobs a blamed node
  failed are explained by it before the next one is judged (two bad nodes are both found;
  their common partners are not);
- a failure by an exit code the policy names is the user's program speaking: it counts
  against a node only once jobs of ``exit_code_min_users`` (2) different users failed that
  way on it. Otherwise any user who can pick nodes (``sbatch -w``) and exit with that code
  could drain them alone; two colluding users, or one user beside a genuine failure of
  another's, still can (a site whose users can pick nodes names few or no codes).

A "node" here is any string that names one piece of hardware for a while: the coordinator
judges **places** (:mod:`slonkd.core.job_places`: a SLURM node name with the pod that served
it when the job ran, so a failure on a previous pod never counts against the new one); the
tests and the bench judge plain node names.

Successful jobs are evidence too (they give each node's rate): feed every finished job, not
only the failures. Neighbours: :mod:`slonkd.core.slurm_job` (job ids and states),
:mod:`slonkd.core.budget` (a blamed node is drained within the budget like any automated
cause); the wiring into the coordinator (the job-outcome source and the
``slonkd:job-failures`` drain) is :mod:`slonkd.runtime.coordinating.job_outcomes`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from slonkd.core.slurm_job import JobId, JobState

# States that mean the machine failed the job whatever its exit code (SLURM sets them).
_INFRASTRUCTURE_STATES = frozenset({JobState.NODE_FAIL, JobState.BOOT_FAIL})


def is_infrastructure_failure(
    state: JobState, exit_code: int, infrastructure_exit_codes: Collection[int]
) -> bool:
    """Whether a finished job's end counts against its nodes.

    NODE_FAIL and BOOT_FAIL always do; FAILED does when its exit code is one the policy names
    (NCCL or ECC aborts a site maps to codes); a cancelled, timed-out or completed job never does.
    """
    if state in _INFRASTRUCTURE_STATES:
        return True
    return state is JobState.FAILED and exit_code in infrastructure_exit_codes


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    """One finished job: where it ran and whether it ended in an infrastructure failure."""

    job_id: JobId
    nodes: frozenset[str]
    """Where it ran: node names, or the coordinator's places (``slonkd.core.job_places``)."""
    infrastructure_failure: bool
    by_exit_code: bool = False
    """Its failure is an exit code the policy names (the user's program chose it), not a
    state SLURM set (NODE_FAIL, BOOT_FAIL)."""
    user: int | None = None
    """The uid it ran as (None: not known; all such count as one user)."""

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError(f"job {self.job_id}: a finished job ran on at least one node")


@dataclass(frozen=True, slots=True, kw_only=True)
class BlamePolicy:
    """How much evidence blames a node."""

    min_failures: int = 3
    """Independent infrastructure failures a node needs (K, at least 2: one failure never
    tells which of its nodes broke it)."""
    window_failures: int = 200
    """Only the jobs since the last this many infrastructure failures count (M)."""
    max_p_value: float = 1e-4
    """How improbable a failure rate must be under the peers' rate to blame a node, for the
    whole window (each node is held to this divided by the number of nodes in the window)."""
    exit_code_min_users: int = 2
    """Different users whose jobs failed on a node with an infrastructure exit code before
    such failures count against it (1: no bound). A user who can pick nodes (``-w``) and
    exit with that code could otherwise drain them alone; NODE_FAIL and BOOT_FAIL, which
    SLURM sets, always count."""

    def __post_init__(self) -> None:
        if self.min_failures < 2:
            raise ValueError("min_failures must be at least 2")
        if self.window_failures < self.min_failures:
            raise ValueError("window_failures must be at least min_failures")
        if not 0 < self.max_p_value <= 1:
            raise ValueError("max_p_value must be in (0, 1]")
        if self.exit_code_min_users < 1:
            raise ValueError("exit_code_min_users must be at least 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Blame:
    """A node blamed for failed jobs, with the evidence an operator reads in the Event."""

    node: str
    jobs: tuple[JobId, ...]
    """The infrastructure-failed jobs it is blamed for, by id (submission order): jobs that
    end in the same second come back from SLURM in either order."""
    partners: tuple[str, ...]
    """Every other node of those jobs (sorted): many different ones is the point."""
    independent: int
    """Its failures, those shared with its most frequent partner counted as one."""
    ran: int
    """Jobs of the window it ran in, failed or not."""
    p_value: float

    def describe(self) -> str:
        """One line for the Event and ``explain``."""
        ids = ",".join(str(j) for j in self.jobs)
        return (
            f"failed {len(self.jobs)} of {self.ran} jobs with {len(self.partners)} different "
            f"partners ({self.independent} independent; p={self.p_value:.1e}); jobs {ids}"
        )


def window(outcomes: Sequence[JobOutcome], policy: BlamePolicy) -> Sequence[JobOutcome]:
    """The jobs that count: everything since the ``window_failures``-th last failure."""
    seen = 0
    for i in range(len(outcomes) - 1, -1, -1):
        if outcomes[i].infrastructure_failure:
            seen += 1
            if seen == policy.window_failures:
                return outcomes[i:]
    return outcomes


def binomial_tail(successes: int, trials: int, p: float) -> float:
    """P[X >= successes] for X ~ Binomial(trials, p).

    Terms by their ratio (one log each, not three lgammas), and no further once past the
    mode they no longer change the sum (they only shrink from there).
    """
    if successes <= 0:
        return 1.0
    if successes > trials:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    mode = (trials + 1) * p
    log_term = (
        math.lgamma(trials + 1)
        - math.lgamma(successes + 1)
        - math.lgamma(trials - successes + 1)
        + successes * log_p
        + (trials - successes) * log_q
    )
    total = 0.0
    for k in range(successes, trials + 1):
        term = math.exp(log_term)
        total += term
        if k >= mode and term <= total * 1e-17:
            break
        if k < trials:
            log_term += math.log(trials - k) - math.log(k + 1) + log_p - log_q
    return min(1.0, total)


def _independent(node: str, failed: Iterable[JobOutcome]) -> tuple[int, set[str]]:
    """The node's failures, those shared with its most frequent partner counted as one."""
    shared: Counter[str] = Counter()
    count = 0
    for job in failed:
        count += 1
        shared.update(p for p in job.nodes if p != node)
    worst = max(shared.values(), default=0)
    return count - max(0, worst - 1), set(shared)


def blame(outcomes: Sequence[JobOutcome], policy: BlamePolicy) -> tuple[Blame, ...]:
    """The nodes the window's failed jobs blame, strongest evidence first."""
    jobs = list(window(outcomes, policy))
    blamed: list[Blame] = []
    while True:
        found = _strongest(jobs, policy)
        if found is None:
            return tuple(blamed)
        blamed.append(found)
        explained = set(found.jobs)
        # the blamed node's failures are explained; its successes stay evidence for others
        jobs = [j for j in jobs if j.job_id not in explained]


def _counted(failed: list[JobOutcome], policy: BlamePolicy) -> list[JobOutcome]:
    """A node's failed jobs that count against it.

    Its exit-code failures count only once jobs of ``exit_code_min_users`` different users
    failed that way on it.
    """
    if policy.exit_code_min_users <= 1:
        return failed
    users = {j.user for j in failed if j.by_exit_code}
    if not users or len(users) >= policy.exit_code_min_users:
        return failed
    return [j for j in failed if not j.by_exit_code]


def _strongest(jobs: Sequence[JobOutcome], policy: BlamePolicy) -> Blame | None:
    # one pass over the jobs: every node's runs and failed jobs (not a scan per node)
    ran: Counter[str] = Counter()
    failed_by: dict[str, list[JobOutcome]] = defaultdict(list)
    total_failed = 0
    for job in jobs:
        ran.update(job.nodes)
        if job.infrastructure_failure:
            total_failed += 1
            for node in job.nodes:
                failed_by[node].append(job)
    total_jobs = len(jobs)
    threshold = policy.max_p_value / max(1, len(ran))
    best: tuple[float, int, str] | None = None
    chosen: Blame | None = None
    for node, all_failed in failed_by.items():
        if len(all_failed) < policy.min_failures:
            continue
        failed_jobs = _counted(all_failed, policy)
        failed_count = len(failed_jobs)
        if failed_count < policy.min_failures:
            continue
        # the peers' rate: the jobs this node did not run in (Laplace-smoothed, never 0 or 1);
        # tested first, it is the cheaper of the two tests
        others_jobs = total_jobs - ran[node]
        others_failed = total_failed - len(all_failed)
        rate = (others_failed + 1) / (others_jobs + 2)
        p_value = binomial_tail(failed_count, ran[node], rate)
        if p_value > threshold:
            continue
        independent, partners = _independent(node, failed_jobs)
        if independent < policy.min_failures:
            continue
        key = (p_value, -independent, node)
        if best is None or key < best:
            best = key
            chosen = Blame(
                node=node,
                jobs=tuple(sorted(j.job_id for j in failed_jobs)),
                partners=tuple(sorted(partners)),
                independent=independent,
                ran=ran[node],
                p_value=p_value,
            )
    return chosen
