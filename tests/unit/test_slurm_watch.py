"""The coordinator's slurmctld read limiter and the reasons fingerprint."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.slurm_watch import ReadLimiter, fingerprint


def _node(name: str, reason: str, state: str = "IDLE+DRAIN") -> SlurmNode:
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName(name),
        state=NodeState.from_tokens(base, flags),
        reason=reason,
        reason_time=datetime(2026, 11, 30, tzinfo=UTC),
    )


def test_no_window_holds_more_reads_than_the_limit() -> None:
    """At 2 reads/s no one-second window holds more than 2 reads (on a fake clock)."""
    now = [0.0]
    stamps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        now[0] += seconds

    async def main() -> None:
        limiter = ReadLimiter(2, clock=lambda: now[0], sleep=fake_sleep)
        for _ in range(7):
            await limiter.acquire()
            stamps.append(now[0])

    asyncio.run(main())
    assert stamps[:2] == [0.0, 0.0]  # a poll and the full read it asks for: back to back
    for i, t in enumerate(stamps):
        assert sum(1 for u in stamps if t - 1.0 < u <= t) <= 2, (i, stamps)
    assert stamps[-1] >= 3.0  # 7 reads at 2 a second need at least 3 s


def test_a_fingerprint_changes_with_state_reason_or_nodes_not_with_order() -> None:
    """Same nodes in another order: same; a new reason, state or node: different."""
    a = [_node("n1", "slonkd:health:x"), _node("n3", "Not responding", "DOWN+NOT_RESPONDING")]
    assert fingerprint(a) == fingerprint(list(reversed(a)))
    assert fingerprint(a) != fingerprint([*a, _node("n4", "maint")])
    assert fingerprint(a) != fingerprint([_node("n1", "other"), a[1]])
    assert fingerprint(a) != fingerprint([a[0], _node("n3", "Not responding", "DOWN")])


def test_a_non_positive_rate_is_refused() -> None:
    """A rate of zero would never read: refused at start."""
    with pytest.raises(ValueError, match="positive"):
        ReadLimiter(0)
