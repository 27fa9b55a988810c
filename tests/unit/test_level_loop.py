"""The level-triggered loop shared by the coordinator, the rollout and the topology sync."""

from __future__ import annotations

import asyncio
import time

import pytest

from slonkd.runtime.kit.level_loop import Cause, Debounce, run_level_triggered, settle, wait_marked


class _Done(Exception):
    """Ends a loop under test after its last wanted pass."""


class Recorder:
    """A pass that records why and when it ran, marks on request, and ends after ``passes``."""

    def __init__(self, dirty: asyncio.Event, passes: int, resync_s: float) -> None:
        self.dirty = dirty
        self.passes = passes
        self.resync_s = resync_s
        self.runs: list[tuple[Cause, float]] = []
        self.mark_during: set[int] = set()
        self.order: list[str] = []

    async def __call__(self, cause: Cause) -> float:
        """One pass: record, mark if asked, end after the last."""
        self.runs.append((cause, time.monotonic()))
        self.order.append("pass")
        if len(self.runs) - 1 in self.mark_during:
            await asyncio.sleep(0)
            self.dirty.set()  # an informer's handler, while the pass works
        if len(self.runs) >= self.passes:
            raise _Done
        return self.resync_s

    async def wake(self) -> None:
        """The wake hook: recorded in order with the passes."""
        self.order.append("wake")


async def test_the_first_pass_runs_at_once_and_says_start() -> None:
    """The loop starts with a pass whose cause is START, before any mark."""
    dirty = asyncio.Event()
    rec = Recorder(dirty, passes=1, resync_s=60)
    with pytest.raises(_Done):
        await asyncio.wait_for(run_level_triggered(dirty, rec), 5)
    assert [c for c, _ in rec.runs] == [Cause.START]


async def test_a_mark_made_during_a_pass_is_not_lost() -> None:
    """A handler that marks while the pass runs brings the next pass at once, not at resync."""
    dirty = asyncio.Event()
    rec = Recorder(dirty, passes=2, resync_s=60)
    rec.mark_during = {0}
    began = time.monotonic()
    with pytest.raises(_Done):
        await asyncio.wait_for(run_level_triggered(dirty, rec), 5)
    assert [c for c, _ in rec.runs] == [Cause.START, Cause.CHANGE]
    assert rec.runs[1][1] - began < 2.0


async def test_without_a_mark_the_next_pass_is_a_resync_after_the_period_the_pass_asked() -> None:
    """No mark: the pass's returned period passes, and the next pass's cause is RESYNC."""
    dirty = asyncio.Event()
    rec = Recorder(dirty, passes=3, resync_s=0.1)
    with pytest.raises(_Done):
        await asyncio.wait_for(run_level_triggered(dirty, rec), 5)
    assert [c for c, _ in rec.runs] == [Cause.START, Cause.RESYNC, Cause.RESYNC]
    assert rec.runs[1][1] - rec.runs[0][1] >= 0.1
    assert rec.runs[2][1] - rec.runs[1][1] >= 0.1


async def test_a_burst_of_marks_is_one_pass_after_the_marks_go_quiet() -> None:
    """Ten marks 20 ms apart, debounced by 0.3 s of quiet: one pass, after the last mark."""
    dirty = asyncio.Event()
    rec = Recorder(dirty, passes=3, resync_s=60)
    loop = asyncio.create_task(
        run_level_triggered(dirty, rec, debounce=Debounce(quiet_s=0.3, max_wait_s=10))
    )
    await asyncio.sleep(0.2)
    assert [c for c, _ in rec.runs] == [Cause.START]
    for _ in range(10):
        dirty.set()
        await asyncio.sleep(0.02)
    last_mark = time.monotonic()
    await asyncio.sleep(1.0)
    assert [c for c, _ in rec.runs] == [Cause.START, Cause.CHANGE]
    assert rec.runs[1][1] - last_mark >= 0.25
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop


async def test_the_wake_hook_runs_before_the_debounce_and_the_pass() -> None:
    """on_wake runs once per wake, before the debounced pass (the coordinator's fast marks)."""
    dirty = asyncio.Event()
    rec = Recorder(dirty, passes=3, resync_s=0.05)
    with pytest.raises(_Done):
        await asyncio.wait_for(
            run_level_triggered(
                dirty, rec, debounce=Debounce(quiet_s=0.01, max_wait_s=1), on_wake=rec.wake
            ),
            5,
        )
    assert rec.order == ["pass", "wake", "pass", "wake", "pass"]


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
async def test_settle_returns_within_its_bound_under_endless_marks() -> None:
    """Marks that never go quiet hold the debounce for max_wait_s, not for ever."""
    dirty = asyncio.Event()

    async def marker() -> None:
        while True:
            dirty.set()
            await asyncio.sleep(0.01)

    task = asyncio.create_task(marker())
    began = time.monotonic()
    await asyncio.wait_for(settle(dirty, quiet_s=0.2, max_wait_s=0.3), 5)
    took = time.monotonic() - began
    task.cancel()
    assert 0.3 <= took < 1.5


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
async def test_wait_marked_returns_at_once_on_a_mark_already_made() -> None:
    """A mark set before the wait is seen at once (True); none times out (False)."""
    dirty = asyncio.Event()
    assert await wait_marked(dirty, 0.05) is False
    dirty.set()
    began = time.monotonic()
    assert await wait_marked(dirty, 60) is True
    assert time.monotonic() - began < 1.0
