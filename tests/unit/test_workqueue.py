"""The work queue: de-duplication, one worker per key, dirty re-queue, backoff."""

from __future__ import annotations

import asyncio

import pytest

from slonkd.runtime.kit.workqueue import Backoff, WorkQueue


async def test_keys_are_deduplicated_and_ordered() -> None:
    """Adding a waiting key again does nothing; keys come out in arrival order."""
    q = WorkQueue()
    for key in ["a", "b", "a", "c", "b"]:
        q.add(key)
    assert len(q) == 3
    assert [await q.get() for _ in range(3)] == ["a", "b", "c"]


async def test_a_key_added_while_processing_comes_back_after_done() -> None:
    """A key is never handed out twice at once; an add during processing re-queues it after."""
    q = WorkQueue()
    q.add("n1")
    assert await q.get() == "n1"
    q.add("n1")
    assert len(q) == 0  # not handed to a second worker
    q.done("n1")
    assert await asyncio.wait_for(q.get(), 1) == "n1"


async def test_retry_backs_off_and_forget_resets() -> None:
    """Failures delay the key exponentially; forget() clears the count."""
    q = WorkQueue(backoff=Backoff(base_s=0.01, max_s=1, jitter=0))
    q.add("n1")
    key = await q.get()
    q.done(key)
    assert q.retry(key) == pytest.approx(0.01)
    assert await asyncio.wait_for(q.get(), 1) == "n1"
    q.done("n1")
    assert q.retry("n1") == pytest.approx(0.02)
    assert q.failures("n1") == 2
    q.forget("n1")
    assert q.failures("n1") == 0


async def test_getter_wakes_on_add_and_on_shutdown() -> None:
    """A waiting get() returns when a key arrives, and is released on shut down."""
    q = WorkQueue()
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0.01)
    q.add("x")
    assert await asyncio.wait_for(waiter, 1) == "x"
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0.01)
    q.shut_down()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiter, 1)
