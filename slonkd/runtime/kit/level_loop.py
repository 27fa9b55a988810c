"""The one loop of every whole-fleet controller in slonkd: level-triggered, marked dirty, debounced.

The coordinator's passes (:mod:`slonkd.runtime.coordinating.term`), the rollout
(:mod:`slonkd.runtime.coordinating.rolling`) and the topology sync
(:mod:`slonkd.runtime.coordinating.topology_sync`) each look at the whole fleet from their caches.
They
share this idiom instead of three hand-rolled loops:

1. clear the mark, then run one pass from the caches as they are now;
2. sleep until an informer handler (or a poll, or MQTT) marks the loop dirty, or until the
   pass's resync period ends; a mark made *during* the pass is kept, so the wait returns at
   once and nothing is lost;
3. optionally hook the wake (the coordinator marks failures at once there), then debounce:
   wait until the marks stay quiet, within a bound, so that one pass handles a whole burst.

Handlers only mark; the pass reads the caches, which already hold the change (an informer
updates its cache before it calls handlers). The per-key loop, for work that is one key at a
time with backoff, is :mod:`slonkd.runtime.kit.reconcile` over :mod:`slonkd.runtime.kit.workqueue`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn


class Cause(enum.Enum):
    """Why a pass runs: the loop's start, a mark, or the resync period."""

    START = "start"
    CHANGE = "change"
    RESYNC = "resync"


@dataclass(frozen=True)
class Debounce:
    """After a wake, wait until no mark came for ``quiet_s``, at most ``max_wait_s`` in all."""

    quiet_s: float
    max_wait_s: float


Pass = Callable[[Cause], Awaitable[float]]
"""One pass of the loop, told why it runs; returns the seconds until the next resync."""


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


async def wait_marked(dirty: asyncio.Event, timeout_s: float) -> bool:
    """Sleep until ``dirty`` is set (True) or for ``timeout_s`` (False); a mark ends it at once."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await dirty.wait()
            return True
    return False


async def run_level_triggered(
    dirty: asyncio.Event,
    one_pass: Pass,
    *,
    debounce: Debounce | None = None,
    on_wake: Callable[[], Awaitable[None]] | None = None,
) -> NoReturn:
    """Run ``one_pass`` now, then after every mark (debounced) or resync, until cancelled.

    An exception from ``one_pass`` or ``on_wake`` ends the loop: a pass handles the errors
    it can live with itself (logged, retried at the next wake) and raises the rest.
    """
    cause = Cause.START
    while True:
        dirty.clear()
        resync_s = await one_pass(cause)
        cause = Cause.CHANGE if await wait_marked(dirty, resync_s) else Cause.RESYNC
        if on_wake is not None:
            await on_wake()
        if debounce is not None:
            await settle(dirty, quiet_s=debounce.quiet_s, max_wait_s=debounce.max_wait_s)
