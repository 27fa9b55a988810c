"""How the coordinator learns of SLURM changes fast without loading slurmctld.

slurmctld has no watch API, and its triggers fire only every 15 s. So the coordinator polls
the nodes that carry a reason (one ``scontrol -o show node``, of which only the lines with
a reason are parsed) every ``poll_s`` and hands what changed to the coordinator, which
marks SLURM failures at once and starts a full pass. Every
slurmctld read of the coordinator, polls and full reads alike, goes through one
:class:`ReadLimiter`, so the coordinator never sends slurmctld more than
``max_reads_per_s`` reads in any second, whatever happens.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import structlog

from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.errors import SlonkdError
from slonkd.core.slurm_node import SlurmNode

log = structlog.get_logger("slonkd.coordinator")

Fingerprint = frozenset[tuple[str, str, str]]


class ReadLimiter:
    """At most ``per_s`` slurmctld reads in any one-second window (shared by all readers).

    A window rather than an even spacing: the poll that sees a change and the full read it
    asks for may follow each other at once, as long as the second holds at most that many.
    """

    def __init__(
        self,
        per_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_read: Callable[[], None] | None = None,
    ) -> None:
        if per_s <= 0:
            raise ValueError("max_reads_per_s must be positive")
        self.per_window = max(1, int(per_s))
        self.window_s = self.per_window / per_s
        self._clock = clock
        self._sleep = sleep
        self._on_read = on_read
        self._recent: deque[float] = deque()
        self._lock = asyncio.Lock()
        self.reads = 0

    async def acquire(self) -> None:
        """Wait for this reader's turn."""
        async with self._lock:
            while True:
                now = self._clock()
                while self._recent and self._recent[0] <= now - self.window_s:
                    self._recent.popleft()
                if len(self._recent) < self.per_window:
                    break
                await self._sleep(self._recent[0] + self.window_s - now)
            self._recent.append(self._clock())
            self.reads += 1
            if self._on_read is not None:
                self._on_read()


def fingerprint(nodes: Sequence[SlurmNode]) -> Fingerprint:
    """What a reasons read shows (node, state, reason), comparable between reads."""
    return frozenset((str(n.name), str(n.state), n.reason) for n in nodes)


class SlurmWatch:
    """Polls the reasons-only read and calls ``changed`` when its answer differs."""

    def __init__(
        self,
        slurm: SlurmBackend,
        limiter: ReadLimiter,
        changed: Callable[[Sequence[SlurmNode]], None],
        *,
        poll_s: float,
    ) -> None:
        self.slurm = slurm
        self.limiter = limiter
        self.changed = changed
        self.poll_s = poll_s
        self.last: Fingerprint | None = None
        self.polls = 0
        self.changes = 0

    async def run(self) -> None:
        """Poll until cancelled; a failed read is logged and retried at the next period."""
        while True:
            began = time.monotonic()
            await self.limiter.acquire()
            try:
                nodes = await self.slurm.read_reason_nodes()
            except SlonkdError as exc:
                log.warning("coordinator.poll_failed", error=str(exc)[:300])
            else:
                self.polls += 1
                seen = fingerprint(nodes)
                if self.last is not None and seen != self.last:
                    self.changes += 1
                    new = [n for n in nodes if fingerprint([n]) - self.last]
                    log.debug("coordinator.slurm_changed", nodes=len(seen), new=len(new))
                    self.changed(new)
                self.last = seen
            await asyncio.sleep(max(0.0, self.poll_s - (time.monotonic() - began)))
