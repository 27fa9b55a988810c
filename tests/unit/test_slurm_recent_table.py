"""The coordinator's node table over the scontrol backend: the interleavings (fake runner).

:class:`~slonkd.runtime.coordinating.node_table.KeptSlurm` keeps each whole read of the port
in the term's :class:`~slonkd.runtime.coordinating.node_table.NodeTable` and drops it at each
write. The contract test (``tests/contract/test_slurm_recent_table.py``) holds the table
against real SLURM; this one the interleavings that real processes cannot be made to show on
demand: a read that began before a write and ended after it would otherwise serve the state
from before the write to the next pass, which would then plan the same write again.
"""

from __future__ import annotations

import asyncio
import time

from slonkd.adapters.slurm.runner import CommandRunner
from slonkd.adapters.slurm.scontrol import ScontrolBackend
from slonkd.core.errors import TransientError
from slonkd.runtime.coordinating.node_table import KeptSlurm, NodeTable
from tests.unit.recorded import recorded

LINES = "".join(
    line + "\n"
    for line in recorded("22.05", "scontrol_show_node.txt").splitlines()
    if line.startswith("NodeName=n1 ")
)


class _Runner(CommandRunner):
    """``scontrol -o show node`` answers when ``release`` is set; every other call at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.reading = asyncio.Event()

    async def run(self, tool: str, *args: str, retry: bool = True) -> str:
        self.calls += 1
        if args[:3] == ("-o", "show", "node"):
            self.reading.set()
            await self.release.wait()
            return LINES
        return ""

    async def write(self, tool: str, *args: str, retry: bool = True) -> str:
        """A write: answered as :meth:`run` answers it."""
        return await self.run(tool, *args, retry=retry)


def _kept(runner: CommandRunner) -> tuple[KeptSlurm, NodeTable]:
    """The port with a table, over a scontrol backend that runs ``runner``."""
    backend = ScontrolBackend()
    backend.runner = runner
    table = NodeTable()
    return KeptSlurm(backend, table), table


async def test_a_read_across_a_write_keeps_no_table() -> None:
    """Read, write while it is on its way, answer: nothing served; read again: served."""
    runner = _Runner()
    slurm, table = _kept(runner)
    reading = asyncio.create_task(slurm.read_nodes())
    await runner.reading.wait()
    await slurm.set_comment(["n1"], "a write of slonkd's")
    runner.release.set()
    assert [n.name for n in await reading] == ["n1"]
    assert table.recent(60) is None
    nodes = await slurm.read_nodes()
    assert [n.name for n in nodes] == ["n1"]
    assert table.recent(60) == nodes


def _with_reason(reason: str) -> str:
    """n1's line drained by SLURM with ``reason``."""
    text = LINES.replace("State=IDLE ", "State=IDLE+DRAIN ").replace(
        " ExtSensorsTemp=n/s", f" ExtSensorsTemp=n/s Reason={reason} [slurm@2026-12-04T00:00:00]"
    )
    assert text.count("Reason=") == 1
    return text


class _Overlap(CommandRunner):
    """Each ``scontrol -o show node`` answers its own text once its own event is set."""

    def __init__(self, answers: list[tuple[asyncio.Event, str]]) -> None:
        super().__init__()
        self.answers = list(answers)

    async def run(self, tool: str, *args: str, retry: bool = True) -> str:
        if not self.answers:
            raise TransientError(f"{tool} {' '.join(args)}: no answer left")
        self.calls += 1
        release, text = self.answers.pop(0)
        await release.wait()
        return text

    async def write(self, tool: str, *args: str, retry: bool = True) -> str:
        """A write: answered as :meth:`run` answers it."""
        return await self.run(tool, *args, retry=retry)


async def test_an_older_read_that_ends_last_never_replaces_a_newer_table() -> None:
    """Read A begins, SLURM fails n1, read B begins and ends, then A ends: B's table stays.

    CI (stop 32): the pass's read began before a failure, the poll's read after it; the poll's
    ended first, its failure was marked, then the pass's older table replaced it and the next
    pass, taking that table, lifted the marks while the failure stood.
    """
    failed = _with_reason("Kill task failed")
    older, newer = asyncio.Event(), asyncio.Event()
    slurm, table = _kept(_Overlap([(older, LINES), (newer, failed)]))
    a = asyncio.create_task(slurm.read_nodes())  # a pass's read, before the failure
    await asyncio.sleep(0)
    b = asyncio.create_task(slurm.read_nodes())  # the poll's, after it
    newer.set()
    assert [n.reason for n in await b] == ["Kill task failed"]  # the poll saw the failure
    older.set()
    assert [n.reason for n in await a] == [""]
    kept = table.recent(60)
    assert kept is not None
    assert [n.reason for n in kept] != [""], "the older read's table replaced the newer one"


async def test_a_probe_that_saw_no_change_keeps_the_table_fresh() -> None:
    """The change poll's "no change since before that read": the table serves passes longer.

    Not a table older than that read (a probe's answer says nothing of what came before the
    read it follows), and never after slonkd wrote.
    """
    now = asyncio.Event()
    now.set()
    slurm, table = _kept(_Overlap([(now, LINES), (now, LINES), (now, "")]))
    nodes = await slurm.read_nodes()
    assert [n.name for n in nodes] == ["n1"]
    kept = table.table
    assert kept is not None
    await asyncio.sleep(0.05)
    assert table.recent(0.04) is None  # aged
    table.confirm(kept.began + 1, time.monotonic())  # a later read's answer: not this
    assert table.recent(0.04) is None
    table.confirm(kept.began, time.monotonic())
    assert table.recent(0.04) == kept.nodes
    await slurm.read_nodes()  # a newer read replaces it, current from its own start
    assert table.table is not None
    assert table.table.began > kept.began
    await slurm.set_comment(["n1"], "a write of slonkd's")
    table.confirm(0.0, time.monotonic())
    assert table.recent(60) is None


async def test_a_named_read_or_one_with_job_counts_is_not_the_table() -> None:
    """Only a whole read, as a pass and the poll make it, is kept; a write's own reads aren't."""
    now = asyncio.Event()
    now.set()
    slurm, table = _kept(_Overlap([(now, LINES)]))
    assert [n.name for n in await slurm.read_nodes(["n1"])] == ["n1"]
    assert table.table is None
