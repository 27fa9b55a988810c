"""Waiting for a burst of events to settle, so that one pass handles the whole burst."""

from __future__ import annotations

import asyncio
import time


async def settle(dirty: asyncio.Event, *, quiet_s: float, max_wait_s: float) -> None:
    """Return once ``dirty`` stayed unset for ``quiet_s``, or after ``max_wait_s`` at most.

    ``dirty`` is cleared on the way; a change that arrives while the caller then works sets
    it again and is seen at the caller's next wait.
    """
    began = time.monotonic()
    while time.monotonic() - began < max_wait_s:
        dirty.clear()
        try:
            async with asyncio.timeout(quiet_s):
                await dirty.wait()
        except TimeoutError:
            return
