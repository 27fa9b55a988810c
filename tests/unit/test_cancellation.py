"""A cancelled task must stop: no product code may lose a cancellation.

Python 3.11's ``asyncio.wait_for`` returns the awaited result, and drops the cancellation,
when the task is cancelled in the same loop iteration as the awaited call completes. The
soak found what that does (seed 11): a SLURM poll that ended as its term was cancelled
swallowed the cancel, the term's TaskGroup waited for it forever, the old leader kept
polling and handling changes after losing the Lease, and SIGTERM hit the shutdown
deadline. ``asyncio.timeout`` keeps the cancellation; the product uses only that.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import slonkd

PRODUCT = Path(slonkd.__file__).parent


def test_no_product_module_uses_asyncio_wait_for() -> None:
    """Every bounded wait in slonkd/, the product, is ``asyncio.timeout``."""
    offenders = [
        f"{path.relative_to(PRODUCT.parent)}:{n}"
        for path in sorted(PRODUCT.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\basyncio\.wait_for\(", line)
    ]
    assert offenders == []


async def _race(waiting: str) -> str:
    """What a task does when cancelled in the iteration its awaited future completes."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()

    async def waiter() -> str:
        if waiting == "wait_for":
            await asyncio.wait_for(fut, 5)
        else:
            async with asyncio.timeout(5):
                await fut
        return "went on"

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    fut.set_result(1)
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return "cancelled"


async def test_asyncio_timeout_keeps_a_cancellation_that_races_completion() -> None:
    """The reason for the rule above, shown on this interpreter: timeout keeps the cancel."""
    assert await _race("timeout") == "cancelled"


async def test_the_slurm_runner_stops_when_cancelled_as_its_command_ends(tmp_path: Path) -> None:
    """The runner's bounded wait on its child keeps a cancellation (the soak's stuck term)."""
    from slonkd.adapters.slurm.runner import CommandRunner, SlurmSettings

    runner = CommandRunner(SlurmSettings(timeout_s=5))
    for _ in range(20):  # the child ends right away; cancel lands around its exit
        task = asyncio.create_task(runner.run("true", retry=False))
        await asyncio.sleep(0.001)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            continue
        assert task.cancelling() == 0, "the cancellation was dropped"
