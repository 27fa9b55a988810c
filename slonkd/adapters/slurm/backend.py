"""The SLURM port: :class:`SlurmReads`, :class:`SlurmWrites`, and both (:class:`SlurmBackend`).

Two backends implement it: SLURM's clients (:class:`~slonkd.adapters.slurm.scontrol.
ScontrolBackend`, ``scontrol.py`` and ``scontrol_reads.py``) and pyslurm in a child process
(:class:`~slonkd.adapters.slurm.pyslurm_writes.PyslurmBackend`); which one a role uses is
chosen at its start (:mod:`slonkd.adapters.slurm.choice`). Both pass the same contract tests
(tests/contract/test_slurm_backend.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from slonkd.adapters.slurm.parsing import ReasonGroup
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats
from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.reasons import Cause
from slonkd.core.slurm_job import JobId, SlurmJob
from slonkd.core.slurm_node import SlurmNode


class SlurmReads(Protocol):
    """What slonkd reads from SLURM: nodes, jobs, finished jobs, statistics, topology."""

    @property
    def calls(self) -> int:
        """SLURM invocations so far."""
        ...

    async def read_nodes(
        self, names: Sequence[str] = (), *, with_jobs: bool = False
    ) -> list[SlurmNode]:
        """All nodes (or the named ones) in one consistent read.

        ``with_jobs`` also counts each node's running jobs (``SlurmNode.running_jobs``) in
        one more call.
        """
        ...

    async def read_node(self, name: str) -> SlurmNode | None:
        """One node, or None when slurmctld does not know it."""
        ...

    async def read_reasons(self) -> list[ReasonGroup]:
        """Only the nodes that carry a reason."""
        ...

    async def jobs_on(self, name: str) -> list[SlurmJob]:
        """Jobs holding resources on a node."""
        ...

    async def finished_jobs(self) -> list[FinishedJob]:
        """Jobs that ended within slurmctld's ``MinJobAge`` (job blame's evidence)."""
        ...

    async def diag(self) -> SlurmctldStats:
        """slurmctld's statistics (``sdiag``), tried once: the caller polls at its own rate.

        Typed, whatever the transport: the scontrol backend parses ``sdiag``'s text
        (``parsing_sdiag.py``; an output that is not sdiag's is a ParseError).
        """
        ...

    async def show_topology(self) -> str:
        """The topology slurmctld runs (``scontrol show topology``)."""
        ...


class SlurmWrites(Protocol):
    """What slonkd writes to SLURM: compare-and-set holds and releases, requeues, reboots.

    Every node write takes slonkd's ownership rules (:mod:`slonkd.core.slurm_plan`): a hold
    or reason that is not slonkd's is never changed. :meth:`signal_batch` and
    :meth:`reconfigure` write no node.
    """

    async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Compare-and-set drain."""
        ...

    async def down(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Compare-and-set down."""
        ...

    async def fail(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Compare-and-set fail."""
        ...

    async def resume(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Release a cause; resume what no other slonkd cause holds."""
        ...

    async def undrain(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Release a cause; remove only DRAIN."""
        ...

    async def request_reboot(
        self, names: Sequence[str], cause: Cause, text: str = ""
    ) -> UpdateResult:
        """Reboot ASAP the nodes slonkd may hold."""
        ...

    async def set_comment(self, names: Sequence[str], comment: str) -> UpdateResult:
        """Set node comments."""
        ...

    async def requeue_jobs(self, name: str, *, all_or_none: bool = False) -> RequeueResult:
        """Requeue what can be requeued on a node (``all_or_none``: nothing unless all can)."""
        ...

    async def reconfigure(self) -> None:
        """Make slurmctld read its configuration again (``scontrol reconfigure``)."""
        ...

    async def signal_batch(self, job_id: JobId, signal: SignalSpec) -> None:
        """Send ``signal`` to job ``job_id``'s batch shell alone, sent once (never re-sent).

        A job signal, not a node write: the node table is unchanged. The caller decides
        whether the shell handles it (:mod:`slonkd.adapters.slurm.job_signal`).
        """
        ...


class SlurmBackend(SlurmReads, SlurmWrites, Protocol):
    """Both halves: what a role that reads and writes SLURM holds; every backend is one.

    A part that only reads (the pass's table, the rollout's read, the fleet's statistics, job
    blame) is typed against :class:`SlurmReads`; every backend passes the same contract tests.
    """
