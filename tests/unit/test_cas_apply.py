"""The compare-and-set core (:class:`~slonkd.adapters.slurm.cas_apply.CasApply`) on fake callables.

Issue 39 step 3: the core knows no transport. A backend hands it its node read and its
update (``update(expr, state, reason, extra) -> bool``, raising ``NotReachedError`` or
``OutcomeUnknownError``), and the first chunk's own update when that chunk goes another way
(scontrol's primed process); the backend counts its calls. Here both are one in-memory
SLURM: the chunking, the rechecks of later chunks, the judgement of a refused chunk and the
resend rules, with no subprocess. Neighbours: ``test_slurm_write_resend`` and
``test_slurm_write_calls`` (the scontrol backend's callables on fake clients),
``tests/contract/test_slurm_bulk.py``, ``test_slurm_resend.py``, ``test_slurm_primed.py``
(real SLURM).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import hostlist
import pytest

from slonkd.adapters.slurm.cas_apply import CasApply, SendUpdate
from slonkd.adapters.slurm.runner import NotReachedError, SlurmSettings
from slonkd.core.errors import OutcomeUnknownError
from slonkd.core.reasons import Cause, format_reason
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.core.slurm_plan import (
    HoldState,
    Skip,
    SkipReason,
    Update,
    plan_hold,
    plan_or_missing,
)

CAUSE = Cause.parse("pod-terminating")
REASON = format_reason(CAUSE, "bye")
ONE_A_CHUNK = SlurmSettings(
    max_hostlist_chars=3, attempts=3, retry_wait_min_s=0.0, retry_wait_max_s=0.0
)
"""Chunks of one node each (``n1``, ``n2``...); sendings that never arrived: 3, no waits."""
ONE_CHUNK = dataclasses.replace(ONE_A_CHUNK, max_hostlist_chars=8192)

Answer = bool | Exception | Callable[[], bool]
"""What one update does: applied (True), refused (False), raised, or a hook that decides."""


def _node(name: str, *flags: str, reason: str = "") -> SlurmNode:
    return SlurmNode(
        name=NodeName(name), state=NodeState.from_tokens("IDLE", list(flags)), reason=reason
    )


def _drain(node: SlurmNode) -> Update | Skip:
    return plan_hold(node, HoldState.DRAIN, CAUSE, "bye")


class Slurm:
    """Nodes in memory; the reads and updates the core makes, recorded in order."""

    def __init__(self, *names: str) -> None:
        self.nodes = {n: _node(n) for n in names}
        self.reads: list[list[str]] = []
        self.sent: list[tuple[str, str]] = []
        """(which update: first or update, hostlist) of every sending."""
        self.answers: list[Answer] = []
        """One per sending, in order; none left: applied."""

    async def read_nodes(self, names: Sequence[str]) -> list[SlurmNode]:
        """The named nodes as they are now (recorded)."""
        self.reads.append(list(names))
        return [self.nodes[n] for n in names if n in self.nodes]

    def operator_drains(self, name: str) -> None:
        """Someone else drains ``name`` under a reason of their own."""
        self.nodes[name] = _node(name, "DRAIN", reason="admin maint")

    def apply(self, expr: str, state: str | None, reason: str | None) -> None:
        """Drain the nodes of ``expr`` under ``reason``."""
        for name in hostlist.expand_hostlist(expr):
            assert state == HoldState.DRAIN  # the only update these tests plan
            self.nodes[name] = _node(name, "DRAIN", reason=reason or "")

    def update(self, via: str) -> SendUpdate:
        """An update callable, its sendings recorded as ``via``; each takes the next answer."""

        async def send(expr: str, state: str | None, reason: str | None, extra: str | None) -> bool:
            self.sent.append((via, expr))
            answer = self.answers.pop(0) if self.answers else True
            if isinstance(answer, Exception):
                raise answer
            done = answer() if callable(answer) else answer
            if done:
                self.apply(expr, state, reason)
            return done

        return send

    def cas(self, settings: SlurmSettings, *, first: bool = True) -> CasApply:
        """The core on this SLURM's callables (``first``: with a first chunk's own update)."""
        return CasApply(
            settings,
            self.read_nodes,
            self.update("update"),
            self.update("first") if first else None,
        )

    def plans(self, *names: str) -> list[Update | Skip]:
        """The compare-and-set drains of ``names`` on the nodes as they are now."""
        return [plan_or_missing(self.nodes, n, _drain) for n in names]


async def test_the_first_chunk_rides_on_the_read_later_ones_are_read_again() -> None:
    """The first chunk goes by ``first_update`` unread; each later one by ``update``, reread."""
    slurm = Slurm("n1", "n2", "n3")
    result = await slurm.cas(ONE_A_CHUNK).apply(slurm.plans("n1", "n2", "n3"), _drain)
    assert result.changed == ("n1", "n2", "n3")
    assert result.skipped == ()
    assert slurm.sent == [("first", "n1"), ("update", "n2"), ("update", "n3")]
    assert slurm.reads == [["n2"], ["n3"]]
    assert all(n.reason == REASON for n in slurm.nodes.values())


async def test_without_a_first_update_every_chunk_goes_by_update() -> None:
    """A transport with one way to write gives only ``update``."""
    slurm = Slurm("n1", "n2")
    result = await slurm.cas(ONE_A_CHUNK, first=False).apply(slurm.plans("n1", "n2"), _drain)
    assert result.changed == ("n1", "n2")
    assert slurm.sent == [("update", "n1"), ("update", "n2")]


async def test_an_operators_drain_before_a_later_chunk_is_kept() -> None:
    """n2 drained by an operator after the read: its chunk's recheck skips it, n3 goes on."""
    slurm = Slurm("n1", "n2", "n3")
    plans = slurm.plans("n1", "n2", "n3")

    def first_then_operator() -> bool:
        slurm.operator_drains("n2")
        return True

    slurm.answers = [first_then_operator]
    result = await slurm.cas(ONE_A_CHUNK).apply(plans, _drain)
    assert result.changed == ("n1", "n3")
    assert [(s.node, s.why) for s in result.skipped] == [("n2", SkipReason.FOREIGN_REASON)]
    assert slurm.sent == [("first", "n1"), ("update", "n3")]
    assert slurm.nodes["n2"].reason == "admin maint"


async def test_a_refused_chunk_is_judged_node_by_node_on_a_fresh_read() -> None:
    """Refused, yet applied where it could: changed, refused and vanished nodes told apart."""
    slurm = Slurm("n1", "n2", "n3")
    plans = slurm.plans("n1", "n2", "n3")

    def partly() -> bool:
        slurm.apply("n1", HoldState.DRAIN, REASON)
        del slurm.nodes["n3"]
        return False  # n2: "Invalid node state", left as it was

    slurm.answers = [partly]
    result = await slurm.cas(ONE_CHUNK).apply(plans, _drain)
    assert result.changed == ("n1",)
    assert [(s.node, s.why) for s in result.skipped] == [
        ("n2", SkipReason.REFUSED),
        ("n3", SkipReason.NOT_FOUND),
    ]
    assert slurm.sent == [("first", "n[1-3]")]
    assert slurm.reads == [["n1", "n2", "n3"]]


async def test_one_that_never_arrived_is_judged_again_and_sent_the_first_way_again() -> None:
    """NotReached: the chunk is read again, an operator's drain meanwhile kept, the rest resent.

    The resend of the first chunk goes by ``first_update`` again, as scontrol's did with its
    primed process (which then takes argv itself: it sends one update at most).
    """
    slurm = Slurm("n1", "n2")
    plans = slurm.plans("n1", "n2")

    def operator_then_unreached() -> bool:
        slurm.operator_drains("n1")
        raise NotReachedError("connect failure")

    slurm.answers = [operator_then_unreached]
    result = await slurm.cas(ONE_CHUNK).apply(plans, _drain)
    assert result.changed == ("n2",)
    assert [(s.node, s.why) for s in result.skipped] == [("n1", SkipReason.FOREIGN_REASON)]
    assert slurm.sent == [("first", "n[1-2]"), ("first", "n2")]
    assert slurm.reads == [["n1", "n2"]]


async def test_never_arriving_ends_after_the_settings_attempts() -> None:
    """Each sending read again first; the last NotReached is raised."""
    slurm = Slurm("n1")
    slurm.answers = [NotReachedError("connect failure") for _ in range(3)]
    with pytest.raises(NotReachedError):
        await slurm.cas(ONE_CHUNK).apply(slurm.plans("n1"), _drain)
    assert slurm.sent == [("first", "n1")] * 3
    assert slurm.reads == [["n1"], ["n1"]]


@pytest.mark.parametrize("chunk", [0, 1], ids=["first-chunk", "later-chunk"])
async def test_an_unknown_outcome_is_raised_and_never_sent_again(chunk: int) -> None:
    """It may have landed: raised at once, no later chunk sent, nothing sent twice."""
    slurm = Slurm("n1", "n2", "n3")
    answers: list[Answer] = [True] * chunk
    slurm.answers = [*answers, OutcomeUnknownError("no answer in time")]
    with pytest.raises(OutcomeUnknownError):
        await slurm.cas(ONE_A_CHUNK).apply(slurm.plans("n1", "n2", "n3"), _drain)
    assert len(slurm.sent) == chunk + 1
    assert len({expr for _, expr in slurm.sent}) == chunk + 1


async def test_a_release_that_leaves_other_causes_is_skipped_for_them() -> None:
    """Written, yet still held for other slonkd causes: ``other-causes``, not ``changed``."""
    slurm = Slurm("n1", "n2")
    plans: list[Update | Skip] = [
        Update(node=NodeName("n1"), state="drain", reason=REASON, still_held_by="health"),
        Update(node=NodeName("n2"), state="drain", reason=REASON),
    ]
    result = await slurm.cas(ONE_CHUNK).apply(plans)
    assert result.changed == ("n2",)
    assert [(s.node, s.why, s.detail) for s in result.skipped] == [
        ("n1", SkipReason.OTHER_CAUSES, "health")
    ]
    assert slurm.sent == [("first", "n[1-2]")]
