"""The pyslurm backend's reads of SLURM: nodes, one node, reasons, jobs on a node, finished jobs.

:class:`PyslurmReads` implements the read methods of
:class:`~slonkd.adapters.slurm.backend.SlurmReads` through the pyslurm child
(:class:`~slonkd.adapters.slurm.pyslurm_link.PyslurmChild`: a process that imports pyslurm,
:mod:`slonkd.adapters.slurm.pyslurm_child`; slonkd never does), and builds slonkd's types from
the child's rows (:mod:`slonkd.adapters.slurm.parsing_pyslurm`, where the differences from the
scontrol backend's reads are listed). Each read is one request, with
``SlurmSettings.timeout_s``: past it the child is killed, the read is a TransientError, and
the next read starts a new child (at doubling waits while it keeps dying). A read is tried
once: the caller polls at its own rate (a restart wait would refuse a retry at once anyway).

The statistics (``diag``) and the topology slurmctld runs are reads too; the topology through
ctypes on the library pyslurm loaded (pyslurm does not read it), printed by the function
``scontrol show topology`` prints with. The writes are :mod:`slonkd.adapters.slurm.
pyslurm_writes`'s (:class:`~slonkd.adapters.slurm.pyslurm_writes.PyslurmBackend`); the
scontrol backend's reads are :mod:`slonkd.adapters.slurm.scontrol_reads`. Not here yet:
``changed_since`` (the change poll through this child: plan step 9).

The child runs ``[*child_prefix, python, -m, ...pyslurm_child, SLURM_CONF]`` with
``PYTHONPATH`` led by ``pyslurm_path`` (a pyslurm build's site; empty: this interpreter's
path) and ``SlurmSettings.env`` over this process's environment; ``child_prefix`` None is
:data:`slonkd.adapters.slurm.slurm_child.CHILD_PREFIX` (another release's loader, harness).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slonkd.adapters.slurm.parsing import ReasonGroup, reason_groups
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.adapters.slurm.parsing_pyslurm import (
    NodeRows,
    finished_jobs,
    jobs_on,
    parse_node_row,
    parse_nodes,
)
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats, stats_from_fields
from slonkd.adapters.slurm.pyslurm_link import PyslurmChild
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.core.errors import ParseError
from slonkd.core.slurm_job import SlurmJob
from slonkd.core.slurm_node import SlurmNode


@dataclass(slots=True)
class PyslurmReads:
    """The reads of SLURM through pyslurm, in a child process."""

    settings: SlurmSettings = field(default_factory=SlurmSettings)
    pyslurm_path: str = ""
    """The pyslurm build's site directory (first on the child's ``PYTHONPATH``)."""
    child_prefix: tuple[str, ...] | None = None
    """Put before the child's interpreter (None: the shared ``CHILD_PREFIX``)."""
    child: PyslurmChild = field(init=False)
    rows: NodeRows = field(init=False, default_factory=NodeRows)
    """The last whole read's rows, parsed (an unchanged row is not parsed again)."""

    def __post_init__(self) -> None:
        self.child = PyslurmChild(
            conf=self.settings.env.get("SLURM_CONF"),
            env=self.settings.env,
            pyslurm_path=self.pyslurm_path,
            prefix=self.child_prefix,
        )

    @property
    def calls(self) -> int:
        """SLURM RPCs so far, as the child counts them."""
        return self.child.rpcs

    async def _ask(self, op: str, **args: object) -> Any:
        return await self.child.ask(op, args, timeout_s=self.settings.timeout_s)

    async def versions(self) -> dict[str, str]:
        """pyslurm's, its library's and the running slurmctld's versions (one RPC)."""
        said = _mapping(await self._ask("versions"), "versions")
        return {str(k): str(v) for k, v in said.items()}

    async def read_nodes(
        self, names: Sequence[str] = (), *, with_jobs: bool = False
    ) -> list[SlurmNode]:
        """All nodes, or those in ``names``, in one request (``with_jobs``: counts too).

        slurmctld packs its whole node table either way (and the partitions, and with
        ``with_jobs`` every job, in the same request): the child keeps the named nodes.
        """
        said = _mapping(await self._ask("nodes", names=list(names), with_jobs=with_jobs), "nodes")
        jobs = said.get("jobs") if with_jobs else None
        if names:  # a few nodes: parsed, the whole read's rows left as they are
            return parse_nodes(said.get("nodes"), jobs)
        return self.rows.parse(said.get("nodes"), jobs)

    async def read_node(self, name: str) -> SlurmNode | None:
        """One node, or None when slurmctld does not know it."""
        row = await self._ask("node", name=name)
        return None if row is None else parse_node_row(row)

    async def read_reasons(self) -> list[ReasonGroup]:
        """One group a node whose reason holds it (the whole table is read)."""
        return reason_groups(parse_nodes(await self._ask("reasons")))

    async def jobs_on(self, name: str) -> list[SlurmJob]:
        """Jobs holding resources on node ``name`` now, with their requeue-ability."""
        return jobs_on(await self._ask("jobs_on", name=name), name)

    async def finished_jobs(self) -> list[FinishedJob]:
        """Jobs that ended within slurmctld's ``MinJobAge``."""
        return finished_jobs(await self._ask("finished"))

    async def diag(self) -> SlurmctldStats:
        """slurmctld's statistics (one RPC), tried once."""
        return stats_from_fields(await self._ask("diag"))

    async def show_topology(self) -> str:
        """The topology slurmctld runs, as ``scontrol show topology`` prints it (one RPC)."""
        said = await self._ask("topology")
        if not isinstance(said, str):
            raise ParseError(f"pyslurm topology: not text: {str(said)[:80]!r}")
        return said

    async def aclose(self) -> None:
        """End the child."""
        await self.child.aclose()


def _mapping(said: object, op: str) -> Mapping[str, Any]:
    if not isinstance(said, dict):
        raise ParseError(f"pyslurm {op}: not an object: {str(said)[:80]!r}")
    return said
