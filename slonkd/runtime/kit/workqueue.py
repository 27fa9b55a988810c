"""A de-duplicating work queue of node names, with per-key backoff (client-go's workqueue).

Events only put a key on the queue; a reconciler takes it, reads a fresh view and decides.
A key is never handed to two workers at once: a key added while it is being processed is
marked dirty and comes back once the worker calls :meth:`done`. Adding a key that is
already waiting does nothing. A failed reconcile is retried with exponential backoff per
key; success forgets the key's failures.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Per-key retry delays: ``base * 2**failures``, capped, with jitter."""

    base_s: float = 0.05
    max_s: float = 30.0
    jitter: float = 0.1

    def delay(self, failures: int) -> float:
        """The wait before retry number ``failures`` (1 = first retry)."""
        raw = min(self.max_s, self.base_s * 2.0 ** max(0, failures - 1))
        return raw * random.uniform(1 - self.jitter, 1 + self.jitter)  # noqa: S311 - jitter


@dataclass(slots=True)
class WorkQueue:
    """Keys waiting to be reconciled, each at most once, none processed twice at once."""

    backoff: Backoff = field(default_factory=Backoff)
    _queue: deque[str] = field(default_factory=deque)
    _waiting: set[str] = field(default_factory=set)
    _processing: set[str] = field(default_factory=set)
    _dirty: set[str] = field(default_factory=set)
    _failures: dict[str, int] = field(default_factory=dict)
    _timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _shutdown: bool = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        """Queue ``key`` unless it already waits; if it is being processed, redo it after."""
        if self._shutdown:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._waiting:
            return
        self._waiting.add(key)
        self._queue.append(key)
        self._notify()

    def add_after(self, key: str, delay_s: float) -> None:
        """Queue ``key`` after ``delay_s`` (an earlier pending timer for it is replaced)."""
        loop = asyncio.get_running_loop()
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._timers[key] = loop.call_later(delay_s, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def retry(self, key: str) -> float:
        """Count a failure of ``key`` and queue it after its backoff; returns the delay."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = self.backoff.delay(failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset ``key``'s failure count (after a successful reconcile)."""
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        """How often ``key`` failed in a row."""
        return self._failures.get(key, 0)

    async def get(self) -> str:
        """Wait for a key and mark it as being processed."""
        while not self._queue:
            if self._shutdown:
                raise asyncio.CancelledError("work queue shut down")
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        self._waiting.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        """Processing of ``key`` finished; a key added meanwhile is queued again."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def shut_down(self) -> None:
        """Stop handing out keys; waiting getters are released."""
        self._shutdown = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._notify()

    def _notify(self) -> None:
        self._ready.set()
