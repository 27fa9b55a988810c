"""The typed model of a SLURM job as far as node operations care (pure; no I/O).

slonkd never kills jobs silently: before a node goes DOWN it requeues what can be
requeued and reports what cannot. This module says which jobs those are.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NewType

from slonkd.core.slurm_node import NodeName

JobId = NewType("JobId", int)


class JobState(StrEnum):
    """SLURM job states slonkd distinguishes; anything else is UNRECOGNISED."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    CONFIGURING = "CONFIGURING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    UNRECOGNISED = "UNRECOGNISED"

    @classmethod
    def parse(cls, token: str) -> JobState:
        """The state for one token (any case); UNRECOGNISED when unknown."""
        try:
            return cls(token.strip().upper())
        except ValueError:
            return cls.UNRECOGNISED


_ON_NODE = frozenset(
    {JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING, JobState.CONFIGURING}
)
_REQUEUEABLE = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.CONFIGURING})


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmJob:
    """One job with the nodes it holds."""

    job_id: JobId
    state: JobState
    raw_state: str
    nodes: tuple[NodeName, ...]
    batch: bool
    requeue: bool
    """The job's own requeue flag (``--requeue``/``--no-requeue``, or the cluster default)."""

    @property
    def on_node(self) -> bool:
        """Whether the job holds resources on its nodes now."""
        return self.state in _ON_NODE

    @property
    def requeueable(self) -> bool:
        """Whether ``scontrol requeue`` would put it back in the queue (batch, allowed)."""
        return self.batch and self.requeue and self.state in _REQUEUEABLE
