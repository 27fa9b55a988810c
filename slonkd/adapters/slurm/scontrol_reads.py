"""The scontrol/sinfo/squeue backend's reads of SLURM: nodes, reasons, jobs, statistics.

:class:`ScontrolReads` reads the node table (``scontrol -o show node``, parsed by
``parsing_show_node.py``, a line unchanged since the last whole read not parsed again; the
coordinator keeps the table it reads: ``slonkd/runtime/coordinating/node_table.py``), falls
back to the unambiguous JSON read when the text does not split in one way only (``parsing.py``,
``parsing_v42.py``), and reads the reasons (``sinfo -R``), the jobs on a node, the
running-job counts (``parsing_jobs.py``), the finished jobs (``parsing_finished.py``) and
``sdiag`` (typed by ``parsing_sdiag.py``). Subprocesses run in ``runner.py``. It writes
nothing: the compare-and-set writes are
:class:`~slonkd.adapters.slurm.scontrol.ScontrolBackend`'s (``scontrol.py``), built on these
reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from slonkd.adapters.slurm.hostlists import compress
from slonkd.adapters.slurm.parsing import (
    AmbiguousOutput,
    ReasonGroup,
    ReportedErrors,
    parse_sinfo_json,
    parse_sinfo_reasons,
    parse_squeue_json,
    reason_groups,
)
from slonkd.adapters.slurm.parsing_finished import (
    SQUEUE_FINISHED_ARGS,
    FinishedJob,
    parse_finished_jobs,
)
from slonkd.adapters.slurm.parsing_jobs import SQUEUE_JOBS_ARGS, parse_running_jobs
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats, parse_sdiag
from slonkd.adapters.slurm.parsing_show_node import NodeLines, parse_show_node
from slonkd.adapters.slurm.parsing_v42 import parse_scontrol_json, parse_squeue_json_v42
from slonkd.adapters.slurm.runner import (
    CommandRunner,
    NodeNotFoundError,
    SlurmSettings,
)
from slonkd.core.errors import ParseError, TerminalError, TransientError
from slonkd.core.slurm_job import SlurmJob
from slonkd.core.slurm_node import NodeName, SlurmNode

REASONS_FORMAT = "%N|%T|%H|%U|%E"


@dataclass(slots=True)
class ScontrolReads:
    """The reads of SLURM through its command-line clients; the writes build on them."""

    settings: SlurmSettings = field(default_factory=SlurmSettings)
    runner: CommandRunner = field(init=False)
    json_read: str | None = field(default=None, init=False)
    """Which JSON node read this SLURM has (``scontrol`` or ``sinfo``), learnt on first use."""
    known: NodeLines = field(default_factory=NodeLines, init=False, repr=False)
    """The last full node read's lines (an unchanged line is not parsed again)."""

    def __post_init__(self) -> None:
        self.runner = CommandRunner(self.settings)

    @property
    def calls(self) -> int:
        """SLURM client invocations so far (reads and writes)."""
        return self.runner.calls

    async def read_nodes(
        self, names: Sequence[str] = (), *, with_jobs: bool = False
    ) -> list[SlurmNode]:
        """All nodes, or those in ``names``, in one read; JSON when the text is ambiguous.

        slurmctld packs its whole node table either way; naming nodes only saves output
        and parsing on this side (1,000 of 5,000: 0.5 MB instead of 2.6 MB). With
        ``with_jobs`` every node also gets ``running_jobs`` from one ``squeue`` call run
        alongside the node read (two calls, read at about the same instant, not atomically).
        """
        if not with_jobs:
            return await self._read_nodes(names)
        reading = asyncio.ensure_future(self._read_nodes(names))
        counting = asyncio.ensure_future(self.running_jobs())
        try:
            nodes, counts = await asyncio.gather(reading, counting)
        except BaseException:
            # The first failure is raised as it is (typed); the other read is stopped.
            for task in (reading, counting):
                task.cancel()
            await asyncio.gather(reading, counting, return_exceptions=True)
            raise
        return [dataclasses.replace(n, running_jobs=counts.get(n.name, 0)) for n in nodes]

    async def running_jobs(self) -> dict[NodeName, int]:
        """Jobs holding resources on each node (nodes without any are absent): one squeue."""
        return parse_running_jobs(await self.runner.run("squeue", *SQUEUE_JOBS_ARGS))

    async def finished_jobs(self) -> list[FinishedJob]:
        """Jobs that ended within slurmctld's ``MinJobAge``: one squeue (parsing_finished.py)."""
        return parse_finished_jobs(await self.runner.run("squeue", *SQUEUE_FINISHED_ARGS))

    async def _read_nodes(self, names: Sequence[str]) -> list[SlurmNode]:
        args = ["-o", "show", "node"]
        if names:
            args.append(compress(names))
        try:
            if not names:  # a full read reuses the last full read's unchanged lines
                text = await self.runner.run("scontrol", "-o", "show", "node")
                return parse_show_node(text, self.known)
            nodes = parse_show_node(await self.runner.run("scontrol", *args))
        except NodeNotFoundError:
            if len(set(names)) <= 1:
                return []
            return await self._read_nodes(())  # some named nodes do not exist: read them all
        except AmbiguousOutput:
            return await self.read_nodes_json(names)
        wanted = set(names)
        return [n for n in nodes if n.name in wanted]

    async def show_topology(self) -> str:
        """The topology slurmctld runs (``scontrol show topology``)."""
        return await self.runner.run("scontrol", "show", "topology")

    async def diag(self) -> SlurmctldStats:
        """slurmctld's statistics (``sdiag``), tried once: the caller polls at its own rate.

        ParseError when the output is not sdiag's (``parsing_sdiag.py``).
        """
        return parse_sdiag(await self.runner.run("sdiag", retry=False))

    async def read_node(self, name: str) -> SlurmNode | None:
        """One node, or None when slurmctld does not know it."""
        nodes = await self.read_nodes([name])
        return next((n for n in nodes if n.name == name), None)

    async def read_nodes_json(self, names: Sequence[str]) -> list[SlurmNode]:
        """The unambiguous read: ``scontrol show node --json`` (24.11) or ``sinfo --json``.

        22.05's scontrol has no ``--json``; which one works is learnt on first use.
        """
        nodes: list[SlurmNode] | None = None
        try:
            if self.json_read in (None, "scontrol"):
                try:
                    text = await self.runner.run("scontrol", "show", "node", "--json")
                    nodes = parse_scontrol_json(text)
                    self.json_read = "scontrol"
                except (TerminalError, ParseError) as exc:
                    if self.json_read is not None or isinstance(exc, ReportedErrors):
                        raise
                    self.json_read = "sinfo"
            if nodes is None:
                nodes = parse_sinfo_json(await self.runner.run("sinfo", "--json"))
        except ReportedErrors as exc:
            raise TransientError(f"JSON node read: {exc}") from exc
        wanted = set(names)
        return [n for n in nodes if not wanted or n.name in wanted]

    async def read_reasons(self) -> list[ReasonGroup]:
        """Only the nodes that carry a reason, grouped by reason (``sinfo -R``): cheap."""
        text = await self.runner.run("sinfo", "-R", "-h", "-o", REASONS_FORMAT)
        try:
            return parse_sinfo_reasons(text)
        except AmbiguousOutput:
            # A reason with a newline: read every node exactly instead (one group a node,
            # the state in slonkd's spelling rather than sinfo's compact word).
            return reason_groups(await self.read_nodes_json(()))

    async def jobs_on(self, name: str) -> list[SlurmJob]:
        """Jobs holding resources on node ``name`` now, with their requeue-ability."""
        text = await self.runner.run("squeue", "--json", "-w", name)
        try:
            try:
                jobs = parse_squeue_json(text)
            except ReportedErrors:
                raise
            except ParseError:
                jobs = parse_squeue_json_v42(text)  # 24.11: job_state is a list
        except ReportedErrors as exc:
            raise TransientError(f"squeue --json: {exc}") from exc
        return [j for j in jobs if name in j.nodes and j.on_node]
