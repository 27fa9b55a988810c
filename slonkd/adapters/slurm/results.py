"""What the SLURM adapter's writes report back: nodes changed or skipped, jobs requeued.

Results of :class:`~slonkd.adapters.slurm.scontrol.ScontrolBackend`'s compare-and-set
writes (the skip reasons come from the pure planner, :mod:`slonkd.core.slurm_plan`); read by
the coordinator's executors, the agent and the preStop hook.
"""

from __future__ import annotations

from dataclasses import dataclass

from slonkd.core.slurm_job import JobId
from slonkd.core.slurm_node import NodeName
from slonkd.core.slurm_plan import Skip, SkipReason


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateResult:
    """What a bulk operation did: nodes changed, nodes skipped (with why), calls made."""

    changed: tuple[NodeName, ...] = ()
    skipped: tuple[Skip, ...] = ()
    calls: int = 0
    # epoch seconds right before the compare-and-set read went out (None: no such read):
    # SLURM has no conditional update, so an operator's write that reaches slurmctld between
    # this read and the update is overwritten; the agent logs this time with its write
    read_at: float | None = None

    def skipped_for(self, why: SkipReason) -> set[NodeName]:
        """Names of the nodes skipped for ``why``."""
        return {s.node for s in self.skipped if s.why is why}


@dataclass(frozen=True, slots=True, kw_only=True)
class RequeueResult:
    """Jobs of a node put back in the queue, those that could not be, those held back."""

    requeued: tuple[JobId, ...] = ()
    not_requeueable: tuple[JobId, ...] = ()
    held_back: tuple[JobId, ...] = ()
    """Requeueable jobs left running because another on the node is not (``all_or_none``)."""
