"""The process helpers every role shares: the shutdown deadline and the task dump."""

from __future__ import annotations

import asyncio

import pytest

from slonkd.runtime.kit.process import cancel_within, dump_tasks


async def test_a_task_that_stops_on_cancel_is_within_the_deadline() -> None:
    """A well-behaved task is cancelled and awaited: True, and it is done."""
    task = asyncio.create_task(asyncio.sleep(60))
    assert await cancel_within(task, 1.0, event="test.shutdown_deadline")
    assert task.cancelled()


async def test_a_task_that_swallows_its_cancel_is_reported_and_dumped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A task that ignores cancellation: False after the deadline, the tasks go to stderr."""
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    assert not await cancel_within(task, 0.05, event="test.shutdown_deadline")
    assert not task.done()
    assert "--- task stubborn" in capsys.readouterr().err
    release.set()
    task.cancel()
    await asyncio.wait({task}, timeout=1)


async def test_the_dump_names_every_task(capsys: pytest.CaptureFixture[str]) -> None:
    """SIGUSR1's dump lists the running tasks by name."""
    task = asyncio.create_task(asyncio.sleep(60), name="waiting-one")
    await asyncio.sleep(0)
    dump_tasks()
    task.cancel()
    assert "--- task waiting-one" in capsys.readouterr().err
