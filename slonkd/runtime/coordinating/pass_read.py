"""Which SLURM node table a pass plans on: the term's read ahead, the poll's, or its own.

A new term starts its first pass's read side by side with the informers' lists
(:meth:`PassRead.start_ahead`, from :mod:`.term`); later passes take the table the poll
(:mod:`.slurm_watch`) has just read or a change probe has just confirmed, when slonkd wrote
nothing since (the term's :class:`~.node_table.NodeTable`), or the one it is reading now
(waiting for it: the same request, already sent), or a kept table older than that which
the change poll's question confirms (:attr:`PassRead.confirm`), and read on their own otherwise,
each read a turn of the coordinator's :class:`~.slurm_watch.ReadLimiter`. The pass itself is
:meth:`.reconciling.Coordinator.reconcile_all`; the table it took last (:attr:`PassRead.last`)
is what the fast path (:mod:`.fast_path`) patches the poll's changes into.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import structlog

from slonkd.core.errors import SlonkdError
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.coordinating.node_table import KeptSlurm, NodeTable
from slonkd.runtime.coordinating.slurm_watch import ReadLimiter

log = structlog.get_logger("slonkd.coordinator")


class PassTable(NamedTuple):
    """The table a pass plans on."""

    nodes: list[SlurmNode]
    read_began: float
    """When the read behind it began (monotonic): what the poll handed over before, it has."""
    began: float
    """When the pass asked for its table, or, for a read of its own, when its turn to read
    came (after the read limit): its phase timing's start."""
    reused: bool
    """It is the poll's table (no read of the pass's own)."""


class PassRead:
    """The passes' SLURM reads of one term."""

    def __init__(
        self, slurm: KeptSlurm, reads: ReadLimiter, table: NodeTable, *, max_age_s: float
    ) -> None:
        self.slurm = slurm
        """The port with the table (:class:`~.node_table.KeptSlurm`): a whole read is kept."""
        self.reads = reads
        self.node_table = table
        self.max_age_s = max_age_s
        """A poll's table this old at most serves a pass (the poll's period)."""
        self._ahead: asyncio.Task[list[SlurmNode]] | None = None
        self._ahead_began = 0.0
        self.reused = 0
        """Passes that took the poll's table instead of reading again (no write since)."""
        self.last: PassTable | None = None
        """The table the last pass took (None: no pass has read SLURM in this term yet)."""
        self.confirm: Callable[[], Awaitable[bool]] | None = None
        """Asks slurmctld "changed since the kept table's read?" (the change poll's question,
        :meth:`.slurm_watch.SlurmWatch.confirm_now`): True when it confirmed the table. None
        without a poll."""

    def start_ahead(self) -> None:
        """Start the first pass's SLURM read now, side by side with the informers' lists.

        A new term's first action waits for both; one after the other they add up (5,000
        nodes: the lists and ``scontrol show node`` take about as long). The read is the
        pass's own (its one read within the limit), taken when the term began.
        """
        if self._ahead is None:
            self._ahead_began = time.monotonic()
            self._ahead = asyncio.ensure_future(self._read())

    def cancel_ahead(self) -> None:
        """Stop a read started ahead that no pass took (the term ends)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not ahead.done():
            ahead.cancel()
        elif ahead is not None and not ahead.cancelled():
            ahead.exception()  # retrieved: a failed read nobody took is no loop warning

    async def table(self) -> PassTable:
        """The read ahead, else the poll's recent table, else a read of the pass's own."""
        ahead, self._ahead = self._ahead, None
        # the table the poll has just read, when slonkd wrote nothing since: the same request
        recent = self.node_table.recent(self.max_age_s) if ahead is None else None
        waited_from = None
        if ahead is None and recent is None:
            waited_from = time.monotonic()  # or the one it is reading now: wait for it
            recent = await self.slurm.after_read(self.max_age_s)
            if recent is None and self.confirm is not None and await self.confirm():
                recent = self.node_table.recent(self.max_age_s)  # "no change": still SLURM's
            if recent is None:
                await self.reads.acquire()
        began = time.monotonic()
        if recent is not None and waited_from is not None:
            began = waited_from  # the wait for the poll's read is the pass's SLURM read
        read_began = self._ahead_began if ahead is not None else began
        if recent is not None:
            self.reused += 1
            self.last = PassTable(recent, read_began, began, reused=True)
        else:
            self.last = PassTable(await self._own(ahead), read_began, began, reused=False)
        return self.last

    async def _read(self) -> list[SlurmNode]:
        await self.reads.acquire()
        return await self.slurm.read_nodes()

    async def _own(self, ahead: asyncio.Task[list[SlurmNode]] | None) -> list[SlurmNode]:
        """The read started ahead (a failed one is read again), else a read (limit taken)."""
        if ahead is not None:
            try:
                return await ahead
            except SlonkdError as exc:
                log.warning("coordinator.read_ahead_failed", error=str(exc)[:300])
            await self.reads.acquire()
        return await self.slurm.read_nodes()
