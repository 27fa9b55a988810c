"""Helpers shared by the Kubernetes adapter's contract tests: run an informer, poll, make pods."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

from slonkd.adapters.kube.informer import CacheEvent, Informer

T = TypeVar("T")


@asynccontextmanager
async def running(informer: Informer[T], *, sync_s: float = 30.0) -> AsyncIterator[Informer[T]]:
    """Run ``informer`` in a task for the body of the block, synced before the body starts."""
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(sync_s):
            await informer.synced.wait()
        yield informer
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


def recorder(informer: Informer[T]) -> list[CacheEvent[T]]:
    """A list that receives every later event of ``informer``."""
    events: list[CacheEvent[T]] = []
    informer.add_handler(events.append)
    return events


async def until(what: str, check: Callable[[], bool], *, timeout_s: float = 30.0) -> float:
    """Poll ``check`` on the event loop until it is true; the seconds it took."""
    begun = time.monotonic()
    while not check():
        if time.monotonic() - begun > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - begun


def pending_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod no node can take: it stays Pending, and a delete removes it at once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "w"}},
        "spec": {
            "containers": [{"name": "c", "image": "slonk/none:dev"}],
            "nodeSelector": {"slonk.dev/nowhere": "true"},
            "automountServiceAccountToken": False,
        },
    }
