"""Ended jobs for unit tests: the one builder of ``FinishedJob`` the test files share.

Neighbours: :mod:`tests.unit.pods` (pods), :mod:`tests.unit.coordinator_fakes` (the
coordinator's fakes); the record it builds is
:class:`~slonkd.adapters.slurm.parsing_finished.FinishedJob`.
"""

from __future__ import annotations

from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.core.slurm_job import JobId, JobState
from slonkd.core.slurm_node import NodeName


def finished_job(
    job_id: int,
    *nodes: str,
    state: JobState,
    code: int = 0,
    user: int | None = 1000,
    start: float | None = None,
    end: float | None = None,
) -> FinishedJob:
    """Job ``job_id`` that ended in ``state`` with exit ``code`` on ``nodes``."""
    return FinishedJob(
        job_id=JobId(job_id),
        state=state,
        exit_code=code,
        nodes=tuple(NodeName(n) for n in nodes),
        start=start,
        end=end,
        user=user,
    )
