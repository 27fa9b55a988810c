"""A write's ``calls`` counts its own SLURM client calls, not those of other tasks meanwhile.

The coordinator's tasks share one runner: the change poll, the rollout's read and the pass's
writes. A write's count was the runner's total after it less the total before it, so a read
another task made meanwhile was charged to the write (the e2e bulk-drain test saw a
10-node drain of one read and one update logged as 3 calls). Fake clients of
``test_slurm_write_resend.py``: the update answers after 0.2 s; another task reads meanwhile.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from slonkd.adapters.slurm.scontrol import ScontrolBackend
from tests.unit.test_slurm_write_resend import HELD_CAS, POD, Clients


async def test_reads_of_another_task_meanwhile_are_not_the_writes_calls(tmp_path: Path) -> None:
    """One read and one update: 2 calls, while another task reads three times on the runner."""
    clients = Clients(tmp_path)
    clients.answer("sleep 0.2\n")
    backend = ScontrolBackend(clients.settings(primed=False))

    async def another_task() -> None:
        await asyncio.sleep(0.02)
        for _ in range(3):
            assert await backend.runner.run("sinfo", "--noheader") == HELD_CAS

    other = asyncio.create_task(another_task())
    result = await backend.resume(["n2"], POD)
    await other
    assert result.changed == ("n2",)
    assert result.calls == 2, result
    assert backend.calls == 5  # the runner's own total counts every task's calls


async def test_counting_blocks_nest(tmp_path: Path) -> None:
    """A call counts in every open block: a reboot's count includes the drain it makes first."""
    clients = Clients(tmp_path)
    clients.answer("")
    backend = ScontrolBackend(clients.settings(primed=False))
    with backend.runner.counting() as outer:
        with backend.runner.counting() as inner:
            await backend.runner.run("sinfo", "--noheader")
        await backend.runner.run("sinfo", "--noheader")
    assert (inner(), outer()) == (1, 2)
