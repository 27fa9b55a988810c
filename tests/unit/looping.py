"""A daemon loop run for a while in a unit test, then cancelled.

:func:`run_for` serves ``tests/unit/test_coordinator_triggers.py`` (the trigger keeper) and
``tests/unit/test_slurm_watch.py`` (the change poll); the tests that wait for an event of
the loop instead (``test_health_loop.py``, ``test_topology_sync.py``) start and cancel
their task themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest


async def run_for(run: Callable[[], Coroutine[Any, Any, None]], seconds: float) -> None:
    """Run ``run()`` as a task for ``seconds``, then cancel it: it must still be running."""
    task = asyncio.create_task(run())
    await asyncio.sleep(seconds)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
