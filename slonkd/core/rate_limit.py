"""Token buckets: a global one and one per source address, for requests that cost a peer work.

The credentials API checks them before it asks the apiserver anything (a TokenReview per
request is what a flood of junk tokens would otherwise buy). Pure logic: the caller passes
the clock, so tests need no sleeps.

A bucket holds at most ``burst`` tokens and gains ``rate`` per second; a request takes one
or is told how long until one is there (a refusal takes nothing). The per-source table
forgets buckets that have filled up again (a full bucket is the same as a new one) and never
holds more than ``max_sources``: past that, the least recently used source is forgotten,
which at worst gives that source a fresh burst while the global bucket still caps the total.
"""

from __future__ import annotations

from collections import OrderedDict


class TokenBucket:
    """``burst`` requests at once, then ``rate`` per second."""

    __slots__ = ("at", "burst", "rate", "tokens")

    def __init__(self, *, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.at = now

    def _refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
            self.at = now

    def full(self, now: float) -> bool:
        """Whether the bucket has refilled to its burst (it may be forgotten)."""
        self._refill(now)
        return self.tokens >= self.burst

    def take(self, now: float) -> float:
        """Take a token: 0.0, or the seconds until one is there (nothing taken)."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class SourceLimiter:
    """A bucket per source address and one shared by all."""

    def __init__(
        self,
        *,
        source_rate: float,
        source_burst: int,
        global_rate: float,
        global_burst: int,
        max_sources: int = 10_000,
    ) -> None:
        self._source_rate = source_rate
        self._source_burst = source_burst
        self._max_sources = max_sources
        self._sources: OrderedDict[str, TokenBucket] = OrderedDict()
        self._global: TokenBucket | None = None
        self._global_rate = global_rate
        self._global_burst = global_burst
        self._pruned_at = float("-inf")

    @property
    def sources(self) -> int:
        """How many sources the table holds now."""
        return len(self._sources)

    def take_source(self, source: str, now: float) -> float:
        """Take from ``source``'s bucket: 0.0, or the seconds until it may try again."""
        self._prune(now)
        bucket = self._sources.get(source)
        if bucket is None:
            while len(self._sources) >= self._max_sources:
                self._sources.popitem(last=False)
            bucket = TokenBucket(rate=self._source_rate, burst=self._source_burst, now=now)
            self._sources[source] = bucket
        else:
            self._sources.move_to_end(source)
        return bucket.take(now)

    def take_global(self, now: float) -> float:
        """Take from the shared bucket: 0.0, or the seconds until one is there."""
        if self._global is None:
            self._global = TokenBucket(rate=self._global_rate, burst=self._global_burst, now=now)
        return self._global.take(now)

    def _prune(self, now: float) -> None:
        """Forget refilled buckets, at most once per refill time of one bucket."""
        if now - self._pruned_at < self._source_burst / self._source_rate:
            return
        self._pruned_at = now
        for source in [s for s, b in self._sources.items() if b.full(now)]:
            del self._sources[source]
