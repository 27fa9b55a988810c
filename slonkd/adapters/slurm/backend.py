"""The SLURM port (:class:`SlurmReads`, :class:`SlurmWrites`), and the choice of backend at start.

Two backends are foreseen: the scontrol/sinfo clients (``scontrol.py``, always available)
and pyslurm, the C-API bindings, used only when pyslurm imports *and* was built for the
installed SLURM release. PyPI ships pyslurm 25.11 only (and 18.x), which refuses SLURM
22.05 and 24.11; no pyslurm backend is implemented yet, so :func:`select_backend` always
returns the scontrol backend and says plainly why.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from slonkd.adapters.slurm.parsing import ReasonGroup
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats
from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.adapters.slurm.runner import CommandRunner, SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend
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


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendChoice:
    """The backend chosen at start, and why (logged once)."""

    backend: SlurmBackend
    name: str
    slurm_version: str
    why: str


def _major_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) as numbers: pyslurm writes 22.05 as ``22.5.3``, SLURM as ``22.05.8``."""
    parts = version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def pyslurm_verdict(module_version: str | None, slurm_version: str) -> tuple[bool, str]:
    """Whether a pyslurm of ``module_version`` (None: not installed) fits ``slurm_version``."""
    if module_version is None:
        return False, "pyslurm is not installed (PyPI ships 25.11 only)"
    wanted = _major_minor(slurm_version)
    if wanted is None or _major_minor(module_version) != wanted:
        return False, f"pyslurm {module_version} does not match SLURM {slurm_version}"
    return True, f"pyslurm {module_version} matches SLURM {slurm_version}"


def _pyslurm_version() -> str | None:
    """The installed pyslurm's version, from its metadata: never ``import pyslurm`` here.

    Importing it runs ``slurm_init``, which ends the whole process when no configuration
    source is found: the daemon choosing its backend must not load libslurm itself.
    """
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return None


async def installed_slurm_version(settings: SlurmSettings) -> str:
    """The SLURM release of the configured clients (``scontrol --version``)."""
    out = await CommandRunner(settings).run("scontrol", "--version")
    parts = out.split()
    return parts[-1] if parts else "unknown"


async def select_backend(settings: SlurmSettings) -> BackendChoice:
    """Pick the backend for the installed SLURM; today always scontrol, with the reason."""
    version = await installed_slurm_version(settings)
    fits, why = pyslurm_verdict(_pyslurm_version(), version)
    if fits:
        why += "; no pyslurm backend is implemented yet"
    return BackendChoice(
        backend=ScontrolBackend(settings), name="scontrol", slurm_version=version, why=why
    )
