"""The typed model of a SLURM job as far as node operations care (pure; no I/O).

slonkd never kills jobs silently: before a node goes DOWN it requeues what can be
requeued and reports what cannot. This module says which jobs those are, from the state
words SLURM prints for each (:func:`presence`): 22.05's ``squeue --json`` one word (the
first flag set, else the base state), 24.11's a list (the base state, then every flag). A
word or a combination slonkd does not know as ended or as running reads as "on the node and
not requeueable", never as gone: taken for gone, the preStop hook would set the node DOWN
under the job and a rollout would evict its pod without a requeue.

Neighbours: the parsers that build :class:`SlurmJob` (``slonkd/adapters/slurm/parsing.py``,
``parsing_v42.py``), the backend's ``jobs_on`` (``scontrol_reads.py``) and ``requeue_jobs``
(``scontrol.py``), and their users, the preStop hook (``slonkd/runtime/prestop.py``) and the
rollout's replacer (``slonkd/runtime/coordinating/replacing.py``). Finished jobs (job blame)
are ``slonkd/adapters/slurm/parsing_finished.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NewType

from slonkd.core.slurm_node import NodeName

JobId = NewType("JobId", int)


class JobState(StrEnum):
    """SLURM's job state words, base states and flags; anything else is UNRECOGNISED."""

    # base states (JOB_STATE_BASE)
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    # flags (JOB_STATE_FLAGS)
    LAUNCH_FAILED = "LAUNCH_FAILED"
    UPDATE_DB = "UPDATE_DB"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    RESIZING = "RESIZING"
    CONFIGURING = "CONFIGURING"
    COMPLETING = "COMPLETING"
    STOPPED = "STOPPED"
    RECONFIG_FAIL = "RECONFIG_FAIL"
    POWER_UP_NODE = "POWER_UP_NODE"
    REVOKED = "REVOKED"
    REQUEUE_FED = "REQUEUE_FED"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    UNRECOGNISED = "UNRECOGNISED"

    @classmethod
    def parse(cls, token: str) -> JobState:
        """The state for one token (any case); UNRECOGNISED when unknown."""
        try:
            return cls(token.strip().upper())
        except ValueError:
            return cls.UNRECOGNISED


class Presence(StrEnum):
    """Where a job stands with respect to the nodes it names."""

    GONE = "gone"
    """It holds nothing there: pending, or ended."""
    LIVE = "live"
    """It runs there (or is suspended, or its nodes boot for it): requeued at a deadline
    when the job allows it."""
    HELD = "held"
    """It is there and slonkd does not requeue it: completing, a flag state (stopped,
    signalled, resized...), or a state slonkd does not know. The node waits for it."""


_GONE = frozenset(
    {
        JobState.PENDING,
        JobState.COMPLETED,
        JobState.CANCELLED,
        JobState.FAILED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
        JobState.OUT_OF_MEMORY,
    }
)
"""Base states printed alone (no flag) for a job that holds no node."""
_LIVE: frozenset[frozenset[JobState]] = frozenset(
    {
        frozenset({JobState.RUNNING}),
        frozenset({JobState.SUSPENDED}),
        frozenset({JobState.CONFIGURING}),  # 22.05's one word for a job whose nodes boot
        frozenset({JobState.RUNNING, JobState.CONFIGURING}),  # 24.11's list for the same
    }
)
"""The whole set of words printed for a job that runs on its nodes, exactly."""


def presence(words: Sequence[str]) -> Presence:
    """Whether a job with these state words is on its nodes, and may be requeued there.

    ``words`` as SLURM printed them: one (22.05) or the base state then the flags (24.11).
    Only a known base state alone, or a known running set, is GONE or LIVE; any other word
    (a flag, ``?``, a word of a later release, another case) or combination is HELD.
    """
    known = {JobState(w) for w in words if w in JobState.__members__}
    if len(known) != len(set(words)) or JobState.UNRECOGNISED in known:
        return Presence.HELD  # a word slonkd does not know
    if len(known) == 1 and not known.isdisjoint(_GONE):
        return Presence.GONE
    if frozenset(known) in _LIVE:
        return Presence.LIVE
    return Presence.HELD


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmJob:
    """One job with the nodes it holds."""

    job_id: JobId
    states: tuple[str, ...]
    """Its state words as SLURM printed them (22.05: one; 24.11: the base, then the flags)."""
    nodes: tuple[NodeName, ...]
    batch: bool
    requeue: bool
    """The job's own requeue flag (``--requeue``/``--no-requeue``, or the cluster default)."""

    @property
    def raw_state(self) -> str:
        """Its state words joined by ``+`` (for logs)."""
        return "+".join(self.states)

    @property
    def presence(self) -> Presence:
        """Gone, live, or held on its nodes (:func:`presence`)."""
        return presence(self.states)

    @property
    def on_node(self) -> bool:
        """Whether the job may hold resources on its nodes now (so for any state not known)."""
        return self.presence is not Presence.GONE

    @property
    def requeueable(self) -> bool:
        """Whether ``scontrol requeue`` would put it back in the queue (batch, allowed, live)."""
        return self.batch and self.requeue and self.presence is Presence.LIVE
