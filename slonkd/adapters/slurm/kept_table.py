"""The node table a full read kept for the coordinator's passes, and the rules that keep it true.

:class:`~slonkd.adapters.slurm.scontrol_reads.ScontrolReads` keeps the table of its last full
``scontrol -o show node`` read here; the coordinator's passes take it through
``recent_nodes`` instead of asking slurmctld for the same table again (issue 21), and the
change poll (:mod:`slonkd.runtime.coordinating.slurm_watch`) confirms it with each libslurm "no
change".

Three rules keep a served table no older than what slonkd already acted on:

- a write of slonkd's drops it, and a read across a write keeps nothing;
- a read that began earlier never replaces one that began later (reads overlap: the poll's
  and a pass's), and a newer read that keeps no table drops an older one;
- a "no change" confirms only the table of the read it covers, or a later one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from slonkd.core.slurm_node import SlurmNode


class KeptTable(NamedTuple):
    """A full node read kept for the passes."""

    began: float
    """When its read began (monotonic): a read that began earlier never replaces it."""
    current_at: float
    """The latest time it is known to hold: its read's start, or a change probe's since."""
    nodes: list[SlurmNode]


@dataclass(slots=True)
class TableKeeper:
    """The last full node table and the write counter that guards it (one per backend)."""

    table: KeptTable | None = None
    """The last full node table, None once slonkd wrote."""
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

        The table kept from that read, or from a later one, is current at ``at``.
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
        """A full read begins now: (when, the writes counted then), for :meth:`keep`."""
        return time.monotonic(), self.writes

    def keep(self, began: float, writes: int, nodes: list[SlurmNode]) -> None:
        """Keep a read's table unless slonkd wrote since it began or a newer read is kept.

        Reads overlap (the poll's and a pass's): one that began earlier and ends later holds
        the older state, and a pass served it would undo what the newer one made slonkd do.
        """
        if self.writes == writes and (self.table is None or began >= self.table.began):
            self.table = KeptTable(began=began, current_at=began, nodes=nodes)

    def drop_older(self, began: float) -> None:
        """A read that began at ``began`` keeps no table: none older may be served after it."""
        if self.table is not None and self.table.began < began:
            self.table = None
