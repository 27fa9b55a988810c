"""A node-table read that a write of slonkd's overlaps keeps no table (fake runner).

The contract test (``tests/contract/test_slurm_recent_table.py``) holds the table against
real SLURM; this one the interleaving that real processes cannot be made to show on demand:
a read that began before a write and ended after it would otherwise serve the state from
before the write to the next pass, which would then plan the same write again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from slonkd.adapters.slurm.scontrol import ScontrolBackend

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm" / "22.05"
LINES = "".join(
    line + "\n"
    for line in (DATA / "scontrol_show_node.txt").read_text().splitlines()
    if line.startswith("NodeName=n1 ")
)


class _Runner:
    """``scontrol -o show node`` answers when ``release`` is set; every other call at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.reading = asyncio.Event()

    async def run(self, tool: str, *args: str, retry: bool = True) -> str:
        self.calls += 1
        if args[:3] == ("-o", "show", "node"):
            self.reading.set()
            await self.release.wait()
            return LINES
        return ""


async def test_a_read_across_a_write_keeps_no_table() -> None:
    """Read, write while it is on its way, answer: nothing served; read again: served."""
    backend = ScontrolBackend()
    runner = _Runner()
    backend.runner = runner  # type: ignore[assignment]
    reading = asyncio.create_task(backend.read_reason_nodes())
    await runner.reading.wait()
    await backend.set_comment(["n1"], "a write of slonkd's")
    runner.release.set()
    assert await reading == []
    assert backend.recent_nodes(60) is None
    nodes = await backend.read_nodes()
    assert [n.name for n in nodes] == ["n1"]
    assert backend.recent_nodes(60) == nodes
