"""The coordinator's slurmctld read limiter and the reasons fingerprint."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from slonkd.adapters.slurm.parsing import ReasonGroup
from slonkd.core.slurm_node import NodeName
from slonkd.runtime.slurm_watch import ReadLimiter, fingerprint


def _group(nodes: tuple[str, ...], reason: str, state: str = "drained") -> ReasonGroup:
    return ReasonGroup(
        nodes=tuple(NodeName(n) for n in nodes),
        state=state,
        reason=reason,
        user="root",
        time=datetime(2026, 11, 30, tzinfo=UTC),
    )


def test_reads_from_any_number_of_readers_are_spaced_by_the_rate() -> None:
    """Ten readers at once at 20 reads/s take at least 9 gaps of 50 ms."""

    async def main() -> float:
        limiter = ReadLimiter(20)
        began = time.monotonic()
        await asyncio.gather(*(limiter.acquire() for _ in range(10)))
        assert limiter.reads == 10
        return time.monotonic() - began

    assert asyncio.run(main()) >= 9 * 0.05 - 0.01


def test_a_fingerprint_changes_with_state_reason_or_nodes_not_with_order() -> None:
    """Same groups in another order: same; a new reason, state or node: different."""
    a = [_group(("n1", "n2"), "slonkd:health:x"), _group(("n3",), "Not responding", "down*")]
    assert fingerprint(a) == fingerprint(list(reversed(a)))
    assert fingerprint(a) != fingerprint([*a, _group(("n4",), "maint")])
    assert fingerprint(a) != fingerprint([_group(("n1", "n2"), "other"), a[1]])
    assert fingerprint(a) != fingerprint([a[0], _group(("n3",), "Not responding", "down")])


def test_a_non_positive_rate_is_refused() -> None:
    """A rate of zero would never read: refused at start."""
    with pytest.raises(ValueError, match="positive"):
        ReadLimiter(0)
