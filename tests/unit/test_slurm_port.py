"""Everything the coordinator asks of SLURM goes through its port (issue 38 item 2); fakes only.

The port is two protocols, :class:`~slonkd.adapters.slurm.backend.SlurmReads` and
:class:`~slonkd.adapters.slurm.backend.SlurmWrites` (``SlurmBackend`` is both). Before, job
blame's finished jobs and the fleet's ``sdiag`` went to a ``ScontrolBackend`` the coordinator
built for itself beside the port, and topology ran ``scontrol reconfigure`` through that
backend's runner: a second backend (pyslurm) could not have served them, and a test's fake
was passed over. Neighbours: ``test_coordinator_pass`` (the fakes), ``test_topology_sync``
(topology's reads and reconfigure, through the same port).
"""

from __future__ import annotations

import asyncio

from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats
from slonkd.core.slurm_job import JobId, JobState
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.coordinating.leading import lead
from tests.unit import coordinator_fakes as fakes

ENDED = FinishedJob(
    job_id=JobId(41), state=JobState.parse("FAILED"), exit_code=1, nodes=(NodeName("w-0"),)
)


class _Port(fakes.FakeSlurm):
    """The pass's fake, with the reads job blame and the fleet metrics make: counted."""

    def __init__(self) -> None:
        super().__init__([fakes.slurm_node(0)], failing=set())
        self.asked: list[str] = []

    async def finished_jobs(self) -> list[FinishedJob]:
        """One failed job on w-0."""
        self.asked.append("finished_jobs")
        return [ENDED]

    async def diag(self) -> SlurmctldStats:
        """Typed statistics, as every backend answers them (asked is what counts)."""
        self.asked.append("diag")
        return SlurmctldStats(server_threads=1, agent_queue=0)


async def test_job_blames_finished_jobs_come_from_the_port() -> None:
    """The coordinator's finished-jobs read is its port's, not a backend of its own."""
    port = _Port()
    c = fakes.coordinator_with(port, fakes.FakeNodeWriter(), [fakes.kube_node(0)])
    assert await asyncio.wait_for(c._read_finished(), timeout=5) == [ENDED]
    assert port.asked == ["finished_jobs"]


async def test_the_terms_sdiag_comes_from_the_port() -> None:
    """The fleet's statistics poll asks the port's ``diag`` while the term leads."""
    port = _Port()
    c = fakes.coordinator_with(
        port, fakes.FakeNodeWriter(), [fakes.kube_node(0)], sdiag_s=1
    )  # read at once, then each 1 s
    c.nodes.run = fakes.listed_at_once(c.nodes)  # type: ignore[method-assign]
    c.pods.run = fakes.listed_at_once(c.pods)  # type: ignore[method-assign]
    term = asyncio.create_task(lead(c, fakes.TOKEN))
    try:
        for _ in range(300):
            if "diag" in port.asked:
                break
            await asyncio.sleep(0.01)
    finally:
        term.cancel()
        await asyncio.gather(term, return_exceptions=True)
    assert "diag" in port.asked
