"""SLURM's node table as the coordinator last read it whole, and the rules that keep it true.

The coordinator's poll (:mod:`.slurm_watch`) and its passes send slurmctld the same request
(the whole node table); a pass that starts right after the poll's read takes that table
(:mod:`.pass_read`, and a term's first rollout look, :mod:`.rollout_read`) instead of asking
again (issue 21), and the change poll confirms it with each libslurm "no change". The table
is kept here, in the coordinator, not in the SLURM adapter: the port
(:mod:`slonkd.adapters.slurm.backend`) reads and writes, and any backend of it gets the same
table. :class:`KeptSlurm` is that port with the table: the composition root
(:mod:`.composing`) hands it to every part, so each whole read of the coordinator's feeds
the table and each of its writes drops it.

Three rules keep a served table no older than what slonkd already acted on:

- a write of slonkd's drops it, and a read across a write keeps nothing;
- a read that began earlier never replaces one that began later (reads overlap: the poll's
  and a pass's);
- a "no change" confirms only the table of the read it covers, or a later one.

A pass that comes while a whole read is on its way (the poll's, at 5,000 nodes a few tenths
of a second of every period) waits for that read (:meth:`KeptSlurm.after_read`) instead of
sending slurmctld the same request again; the rules above still say whether it is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.parsing import ReasonGroup
from slonkd.adapters.slurm.parsing_finished import FinishedJob
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats
from slonkd.adapters.slurm.results import RequeueResult, UpdateResult
from slonkd.core.checkpoint import SignalSpec
from slonkd.core.reasons import Cause
from slonkd.core.slurm_job import JobId, SlurmJob
from slonkd.core.slurm_node import SlurmNode


class KeptTable(NamedTuple):
    """A whole node read kept for the passes."""

    began: float
    """When its read began (monotonic): a read that began earlier never replaces it."""
    current_at: float
    """The latest time it is known to hold: its read's start, or a change probe's since."""
    nodes: list[SlurmNode]


@dataclass(slots=True)
class NodeTable:
    """The last whole node table and the write counter that guards it (one per term)."""

    table: KeptTable | None = None
    """The last whole node table, None once slonkd wrote."""
    writes: int = 0
    """Raised when a write begins and when it ends: a read across one keeps no table."""

    def recent(self, max_age_s: float) -> list[SlurmNode] | None:
        """The table if it is known to hold at most ``max_age_s`` ago, else None."""
        table = self.table
        if table is None or time.monotonic() - table.current_at > max_age_s:
            return None
        return list(table.nodes)

    def read(self) -> tuple[float, list[SlurmNode]] | None:
        """The table and when its read began, whatever its age (None: none kept)."""
        table = self.table
        return None if table is None else (table.began, list(table.nodes))

    def confirm(self, read_began: float, at: float) -> None:
        """A probe at ``at`` saw no change since before the read that began at ``read_began``.

        The table kept from that read, or from a later one, is current at ``at``. With the
        libslurm change poll the poll reads only on a change, so its table would age past
        ``poll_s`` and every pass would read the same table again; a probe that says "no
        change" keeps it fresh (a few bytes from slurmctld instead of the table).
        """
        table = self.table
        if table is not None and table.began >= read_began and at > table.current_at:
            self.table = table._replace(current_at=at)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A write to slurmctld: no table read before or during it is served afterwards."""
        self.writes += 1
        self.table = None
        try:
            yield
        finally:
            self.writes += 1
            self.table = None

    def begin(self) -> tuple[float, int]:
        """A whole read begins now: (when, the writes counted then), for :meth:`keep`."""
        return time.monotonic(), self.writes

    def keep(self, began: float, writes: int, nodes: list[SlurmNode]) -> None:
        """Keep a read's table unless slonkd wrote since it began or a newer read is kept.

        Reads overlap (the poll's and a pass's): one that began earlier and ends later holds
        the older state, and a pass served it would undo what the newer one made slonkd do.
        """
        if self.writes == writes and (self.table is None or began >= self.table.began):
            self.table = KeptTable(began=began, current_at=began, nodes=nodes)


class KeptSlurm:
    """The SLURM port with the term's :class:`NodeTable`: whole reads feed it, writes drop it."""

    def __init__(self, inner: SlurmBackend, table: NodeTable) -> None:
        self.inner = inner
        self.table = table
        self._reading: asyncio.Event | None = None
        """Set when the whole read on its way now ends (None: none is)."""

    async def after_read(self, max_age_s: float) -> list[SlurmNode] | None:
        """The table within ``max_age_s``, once the whole read on its way (if any) has ended.

        None when there is no such table even then (no read was on its way, or it failed or
        crossed a write of slonkd's): the caller reads on its own.
        """
        reading = self._reading
        if reading is not None:
            await reading.wait()
        return self.table.recent(max_age_s)

    @property
    def calls(self) -> int:
        """SLURM invocations so far."""
        return self.inner.calls

    # -- reads: a whole read is kept ------------------------------------------------------

    async def read_nodes(
        self, names: Sequence[str] = (), *, with_jobs: bool = False
    ) -> list[SlurmNode]:
        """All nodes (kept: the table) or the named ones (not kept), as the port reads them."""
        if names or with_jobs:
            return await self.inner.read_nodes(names, with_jobs=with_jobs)
        began, writes = self.table.begin()
        self._reading = reading = asyncio.Event()
        try:
            nodes = await self.inner.read_nodes()
            self.table.keep(began, writes, nodes)
        finally:
            reading.set()
            if self._reading is reading:
                self._reading = None
        return nodes

    async def read_node(self, name: str) -> SlurmNode | None:
        """One node: the port's read, not kept."""
        return await self.inner.read_node(name)

    async def read_reasons(self) -> list[ReasonGroup]:
        """The reasons: the port's read."""
        return await self.inner.read_reasons()

    async def jobs_on(self, name: str) -> list[SlurmJob]:
        """Jobs on a node: the port's read."""
        return await self.inner.jobs_on(name)

    async def finished_jobs(self) -> list[FinishedJob]:
        """Finished jobs: the port's read."""
        return await self.inner.finished_jobs()

    async def diag(self) -> SlurmctldStats:
        """slurmctld's statistics: the port's read."""
        return await self.inner.diag()

    async def show_topology(self) -> str:
        """The topology slurmctld runs: the port's read."""
        return await self.inner.show_topology()

    # -- writes: each drops the table -----------------------------------------------------

    async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """The port's drain; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.drain(names, cause, text)

    async def down(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """The port's down; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.down(names, cause, text)

    async def fail(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """The port's fail; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.fail(names, cause, text)

    async def resume(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """The port's resume; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.resume(names, cause)

    async def undrain(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """The port's undrain; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.undrain(names, cause)

    async def request_reboot(
        self, names: Sequence[str], cause: Cause, text: str = ""
    ) -> UpdateResult:
        """The port's request reboot; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.request_reboot(names, cause, text)

    async def set_comment(self, names: Sequence[str], comment: str) -> UpdateResult:
        """The port's set comment; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.set_comment(names, comment)

    async def requeue_jobs(self, name: str, *, all_or_none: bool = False) -> RequeueResult:
        """The port's requeue jobs; the table is dropped around it."""
        with self.table.writing():
            return await self.inner.requeue_jobs(name, all_or_none=all_or_none)

    async def reconfigure(self) -> None:
        """The port's reconfigure: the configuration changes, not the node table."""
        await self.inner.reconfigure()  # the configuration, not the node table

    async def signal_batch(self, job_id: JobId, signal: SignalSpec) -> None:
        """The port's batch-shell signal: a job signal, not a node write; the table is kept."""
        await self.inner.signal_batch(job_id, signal)  # no node changes
