"""A slonkd process's life: stop signals, the SIGUSR1 task dump and the shutdown deadline.

Every long-running role (``slonkd agent``, ``slonkd coordinator``) stops on SIGTERM or
SIGINT, prints where each asyncio task waits on SIGUSR1 (for a stuck process), and does not
let a task that swallows its cancellation hang the pod's termination. The roles use these
helpers: :mod:`slonkd.runtime.agent.sidecar` and :mod:`slonkd.runtime.coordinating.leading`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, NoReturn

import structlog

log = structlog.get_logger("slonkd.process")


def dump_tasks() -> None:
    """SIGUSR1: every asyncio task and where it waits, to stderr (for a stuck process)."""
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()} {task!r}"[:300], file=sys.stderr)
        task.print_stack(limit=12, file=sys.stderr)
    sys.stderr.flush()


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT; SIGUSR1 dumps the tasks (the running loop's)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    return stop


async def cancel_within(task: asyncio.Task[Any], deadline_s: float, *, event: str) -> bool:
    """Cancel ``task`` and wait for it at most ``deadline_s``; False when it did not stop.

    A task still running past the deadline swallowed its cancellation: ``event`` is logged
    at error with the deadline and the tasks are dumped, so the process can exit anyway
    (:func:`exit_now`) rather than hang.
    """
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=deadline_s)
    if done:
        return True
    log.error(event, deadline_s=deadline_s)
    dump_tasks()
    return False


def exit_now() -> NoReturn:
    """Exit at once (status 0): a stuck task would also hang ``asyncio.run``'s final cancel."""
    sys.stderr.flush()
    os._exit(0)
