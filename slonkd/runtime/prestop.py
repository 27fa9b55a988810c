"""The preStop handshake: drain, wait for jobs, requeue what is left, mark the node DOWN.

Run by the slurmd container's preStop hook (``slonkd prestop``) when the worker pod is being
deleted, evicted or preempted. Within the pod's grace period minus a margin it:

1. drains the SLURM node with ``slonkd:pod-terminating`` (a node someone else drained or
   downed is left as it is: slonkd never steals it);
2. waits for the node's running jobs to finish, polling ``squeue``; with a checkpoint signal
   configured, ``window`` seconds before the requeue it signals each requeueable job's batch
   shell that handles that signal (:mod:`slonkd.adapters.slurm.job_signal`; a shell without
   a handler would die of it and is left alone), so the job can write a checkpoint;
3. at the deadline requeues every requeueable job that is still there; a job that cannot be
   requeued is reported loudly and left to SLURM's own handling (the node is then *not*
   set DOWN, since that would kill it);
4. sets the node DOWN with slonkd's reason, so slurmctld does not wait ``SlurmdTimeout``
   for a slurmd that is about to die;
5. with a report URL, tells the pod's agent how long the signal-to-requeue took and which
   slonkd cause held the node when it began (:mod:`slonkd.runtime.agent.requeue_report`: the
   agent exports it per cause); a failed report is logged, nothing else.

It always exits in time, even when slurmctld is unreachable: each call is bounded by what
is left of the deadline, and whatever could not be done is logged as such.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import structlog

from slonkd.adapters.slurm.job_signal import JobSignaller, SignalOutcome
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.checkpoint import SignalSpec, deadlines
from slonkd.core.config_tree import setting
from slonkd.core.errors import ParseError, SlonkdError
from slonkd.core.reasons import Cause, ReasonOwner, parse_reason
from slonkd.core.rollout_phase import ROLLOUT_CAUSE
from slonkd.core.slurm_plan import SkipReason, recorded_causes
from slonkd.runtime.agent.requeue_report import report_requeue

log = structlog.get_logger("slonkd.prestop")

CAUSE = Cause(name="pod-terminating")
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrestopSettings:
    """Who and how long: the SLURM node, the pod's grace period and our safety margin."""

    node: str = field(
        metadata=setting(env="POD_NAME", old_env=("SLONKD_SLURM_NODE", "SLONKD_NODE"))
    )
    """The SLURM node to drain (``--node``; default: the pod's name)."""
    grace_s: float = field(default=30.0, metadata=setting(old_env=("SLONKD_GRACE_S",)))
    """The pod's termination grace period (``--grace``)."""
    margin_s: float = 5.0
    """Kept free at the end of the grace for the requeue and the DOWN (``--margin``)."""
    poll_s: float = 1.0
    """The node's jobs are looked at this often while they run (``--poll``)."""
    call_timeout_s: float = 5.0
    """Each SLURM call is given up after this long."""
    slurm: SlurmSettings = field(default_factory=SlurmSettings, metadata=setting(in_file=False))
    checkpoint_signal: SignalSpec | None = field(
        default=None, metadata=setting(old_env=("SLONKD_CHECKPOINT_SIGNAL",))
    )
    """Sent to each requeueable job's batch shell that handles it, ``window`` before requeue
    (``B:SIG``, e.g. ``B:USR1``; ``--checkpoint-signal``; null: none)."""
    checkpoint_window_s: float = field(
        default=0.0, metadata=setting(old_env=("SLONKD_CHECKPOINT_WINDOW_S",))
    )
    """Seconds from that signal to the requeue (``--checkpoint-window``)."""
    report_url: str | None = field(
        default=None, metadata=setting(old_env=("SLONKD_PRESTOP_REPORT_URL",))
    )
    """The pod's agent's report route (loopback; ``--report-url``); None: the figure is only
    logged."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PrestopOutcome:
    """What happened, for the exit log line and the tests."""

    drained: bool
    left_alone: bool
    jobs_finished: bool
    requeued: tuple[int, ...] = ()
    not_requeueable: tuple[int, ...] = ()
    down: bool = False
    failures: tuple[str, ...] = ()
    signalled: tuple[int, ...] = ()
    """Jobs whose batch shell got the checkpoint signal."""
    signal_to_requeue_s: float | None = None
    """From the checkpoint signal to the requeue (None: nothing signalled was requeued)."""
    reported: bool = False
    """The agent took the measurement."""


STARTUP_ALLOWANCE_S = 0.5
"""Taken off the grace on top of the measured age of the process (the runtime's exec)."""


def process_age_s() -> float:
    """Seconds since this process was started (0.0 when ``/proc`` cannot say).

    The kubelet counts the grace from the hook's exec; the interpreter's start and the
    imports before the clock is read take seconds on a loaded node (measured: 2 s at load
    10), so the deadlines count from the process's start time, not from the first read.
    """
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started_s)
    except (OSError, ValueError, IndexError):
        return 0.0


class _Clock:
    """The handshake's deadlines (:func:`slonkd.core.checkpoint.deadlines` does the sums).

    Waiting for jobs ends at ``wait_until``, everything at ``hard``; the checkpoint signal
    goes at ``signal_at``.
    """

    def __init__(self, grace_s: float, margin_s: float, window_s: float = 0.0) -> None:
        self.start = time.monotonic() - process_age_s()
        d = deadlines(
            grace_s=grace_s,
            margin_s=margin_s,
            startup_s=STARTUP_ALLOWANCE_S,
            checkpoint_window_s=window_s,
        )
        self.hard = self.start + d.hard_s
        self.wait_until = self.start + d.requeue_at_s
        self.signal_at = None if d.signal_at_s is None else self.start + d.signal_at_s
        self.window_s = d.window_s

    def until_signal(self) -> float:
        """Time left before the checkpoint signal (infinite without one)."""
        if self.signal_at is None:
            return float("inf")
        return self.signal_at - time.monotonic()

    def left(self) -> float:
        """Time left for waiting on jobs."""
        return self.wait_until - time.monotonic()

    def hard_left(self) -> float:
        """Time left for anything at all."""
        return self.hard - time.monotonic()

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.start) * 1000)


async def run_prestop(s: PrestopSettings) -> PrestopOutcome:
    """Do the handshake for ``s.node``; never raises for SLURM trouble, never overstays."""
    window = s.checkpoint_window_s if s.checkpoint_signal is not None else 0.0
    clock = _Clock(s.grace_s, s.margin_s, window)
    bound = log.bind(node=s.node, cause=str(CAUSE), owner="slonkd")
    failures: list[str] = []

    def backend() -> ScontrolBackend:
        per_call = max(0.2, min(s.call_timeout_s, clock.hard_left()))
        return ScontrolBackend(
            replace(s.slurm, timeout_s=per_call, attempts=1, retry_total_s=per_call)
        )

    async def attempt(step: str, call: Awaitable[T]) -> T | None:
        try:
            async with asyncio.timeout(max(0.1, clock.hard_left())):
                return await call
        except (SlonkdError, TimeoutError, OSError) as exc:
            failures.append(f"{step}: {type(exc).__name__}: {exc}"[:300])
            bound.error(
                "prestop.step_failed",
                step=step,
                error=str(exc)[:300],
                elapsed_ms=clock.elapsed_ms(),
            )
            return None

    held_for = ""
    if s.checkpoint_signal is not None:  # the cause of the checkpoint, before our own drain
        held_for = await _held_for(backend(), s.node, clock)
    drained = await attempt("drain", backend().drain([s.node], CAUSE, "pod is terminating"))
    left_alone = False
    if isinstance(drained, UpdateResult):
        foreign = (
            drained.skipped_for(SkipReason.FOREIGN_REASON)
            | drained.skipped_for(SkipReason.SLURM_REASON)
            | drained.skipped_for(SkipReason.FOREIGN_STATE)
        )
        left_alone = bool(foreign)
        if left_alone:
            bound.info("prestop.left_alone", reason="node held by someone else; not draining it")
        else:
            bound.info("slurm.node_drained", action="drain", elapsed_ms=clock.elapsed_ms())

    jobs_finished = False
    last_count = -1
    signalled: list[int] = []
    signal_sent_at: float | None = None
    while clock.left() > 0:
        jobs = await attempt("list-jobs", backend().jobs_on(s.node))
        if jobs is None:
            break
        if not jobs:
            jobs_finished = True
            break
        if len(jobs) != last_count:
            bound.info("prestop.waiting", jobs=len(jobs), left_s=round(clock.left(), 1))
            last_count = len(jobs)
        if s.checkpoint_signal is not None and signal_sent_at is None and clock.until_signal() <= 0:
            signal_sent_at = time.monotonic()
            signalling = backend()
            signaller = JobSignaller(runner=signalling.runner, slurm=signalling, node=s.node)
            for job in jobs:
                if not job.requeueable:
                    continue  # it will not be requeued; a checkpoint signal would only disturb it
                sent = await attempt(
                    "checkpoint-signal", signaller.signal(job.job_id, s.checkpoint_signal)
                )
                bound.info(
                    "prestop.checkpoint_signal",
                    job=int(job.job_id),
                    signal=str(s.checkpoint_signal),
                    outcome=str(sent) if sent is not None else "failed",
                    window_s=round(clock.window_s, 1),
                )
                if sent is SignalOutcome.SENT:
                    signalled.append(int(job.job_id))
        nap = min(s.poll_s, max(0.0, clock.left()), max(0.0, clock.until_signal()))
        await asyncio.sleep(nap)

    requeued: tuple[int, ...] = ()
    stuck: tuple[int, ...] = ()
    took: float | None = None
    if not jobs_finished:
        result = await attempt("requeue", backend().requeue_jobs(s.node))
        if result is not None:
            requeued = tuple(int(j) for j in result.requeued)
            stuck = tuple(int(j) for j in result.not_requeueable)
            if signal_sent_at is not None and set(signalled) & set(requeued):
                took = time.monotonic() - signal_sent_at
            if requeued:
                bound.info(
                    "slurm.jobs_requeued",
                    action="requeue",
                    jobs=list(requeued),
                    signal_to_requeue_s=round(took, 2) if took is not None else None,
                    window_s=round(clock.window_s, 1) if took is not None else None,
                    held_for=held_for or None,
                )
            if stuck:
                bound.error(
                    "prestop.jobs_not_requeueable",
                    jobs=list(stuck),
                    detail="left to SLURM's own handling; the node is not set DOWN",
                )

    down = False
    if not left_alone and not stuck and not failures:
        downed = await attempt("down", backend().down([s.node], CAUSE, "pod is terminating"))
        down = downed is not None and s.node in downed.changed
        if down:
            bound.info("slurm.node_down", action="down", elapsed_ms=clock.elapsed_ms())
    reported = False
    if took is not None and s.report_url:  # after the DOWN: the report must not delay it
        try:
            await report_requeue(
                s.report_url,
                signal_to_requeue_s=took,
                window_s=clock.window_s,
                held_for=held_for,
                timeout_s=max(0.1, min(1.0, clock.hard_left())),
            )
            reported = True
        except (OSError, TimeoutError) as exc:  # urllib's HTTPError and URLError are OSErrors
            bound.warning("prestop.report_failed", url=s.report_url, error=str(exc)[:200])
    outcome = PrestopOutcome(
        drained=isinstance(drained, UpdateResult) and not left_alone,
        left_alone=left_alone,
        jobs_finished=jobs_finished,
        requeued=requeued,
        not_requeueable=stuck,
        down=down,
        failures=tuple(failures),
        signalled=tuple(signalled),
        signal_to_requeue_s=took,
        reported=reported,
    )
    bound.info(
        "prestop.finished",
        elapsed_ms=clock.elapsed_ms(),
        drained=outcome.drained,
        down=down,
        jobs_finished=jobs_finished,
        requeued=list(requeued),
        failures=list(failures),
    )
    return outcome


async def _held_for(backend: ScontrolBackend, node: str, clock: _Clock) -> str:
    """Why slonkd holds the node now: ``rollout`` if among its causes, else its reason's.

    "" if none, not slonkd's, or unreadable. The set matters: the agent may already have
    added ``pod-terminating`` next to the rollout's cause.
    """
    try:
        async with asyncio.timeout(max(0.1, min(2.0, clock.hard_left()))):
            read = await backend.read_node(node)
    except (SlonkdError, TimeoutError, OSError) as exc:
        log.warning("prestop.read_failed", node=node, error=str(exc)[:200])
        return ""
    if read is None or not read.held:
        return ""
    reason = parse_reason(read.live_reason)
    if reason.owner is not ReasonOwner.SLONKD or reason.cause is None:
        return ""
    try:
        names = {c.name for c in recorded_causes(read)}
    except ParseError:
        names = set()
    return ROLLOUT_CAUSE.name if ROLLOUT_CAUSE.name in names else reason.cause.name
