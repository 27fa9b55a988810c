"""Refusals logged with a bound: the first in full, the rest as one summary per interval.

A flood of junk requests must not become a flood of log lines. After a quiet period the first
refusal is logged with its context (what an operator debugging one agent needs); the ones
after it, within ``interval_s``, are counted per reason and per source, and logged as one
summary line under the same event name when the interval ends (then a new interval starts;
a quiet interval ends the aggregation). At most one line per interval plus one, whatever
the request rate; the per-source tally is capped so its memory is bounded too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

MAX_SOURCES_TALLIED = 1000
"""Distinct sources counted by name per interval; the rest are counted as ``other``."""
TOP_SOURCES = 5


class RefusalLog:
    """Aggregates refusals for ``event`` on ``logger`` (a structlog logger)."""

    def __init__(self, logger: Any, event: str, *, interval_s: float) -> None:
        self._log = logger
        self._event = event
        self._interval_s = interval_s
        self._reasons: Counter[str] = Counter()
        self._statuses: Counter[int] = Counter()
        self._sources: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None
        self.logged = 0
        """Lines written (for tests and metrics)."""

    def refused(self, *, status: int, reason: str, remote: str, **context: str) -> None:
        """One refusal: logged now after a quiet interval, else counted for the summary."""
        if self._timer is None:
            self._log.warning(self._event, status=status, reason=reason, remote=remote, **context)
            self.logged += 1
            self._timer = asyncio.get_running_loop().call_later(self._interval_s, self._tick)
            return
        self._reasons[reason] += 1
        self._statuses[status] += 1
        if remote in self._sources or len(self._sources) < MAX_SOURCES_TALLIED:
            self._sources[remote] += 1
        else:
            self._sources["other"] += 1

    def _tick(self) -> None:
        if self.flush():
            self._timer = asyncio.get_running_loop().call_later(self._interval_s, self._tick)
        else:
            self._timer = None

    def flush(self) -> bool:
        """Log the summary of what was counted, if anything; whether there was."""
        total = sum(self._reasons.values())
        if not total:
            return False
        self._log.warning(
            self._event,
            summary=True,
            count=total,
            interval_s=self._interval_s,
            reasons=dict(self._reasons),
            statuses={str(k): v for k, v in self._statuses.items()},
            sources=len(self._sources),
            top_sources=self._sources.most_common(TOP_SOURCES),
        )
        self.logged += 1
        self._reasons.clear()
        self._statuses.clear()
        self._sources.clear()
        return True

    def close(self) -> None:
        """Log what is pending and stop the timer (on shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
