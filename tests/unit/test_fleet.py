"""The fleet's numbers computed from one pass (slonkd.core.fleet): table tests, no services."""

from __future__ import annotations

from datetime import datetime

import pytest

from slonkd.core.budget import Admission, PoolUse
from slonkd.core.fleet import (
    PENDING,
    STATES,
    Holder,
    Outage,
    count_fleet,
    holder,
    oldest_outages,
    track_disagreement,
    track_outages,
)
from slonkd.core.plan import Action, Kind, NodeView, Plan, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode

NOW = 1_800_000_000.0


def node(
    name: str, state: str = "IDLE", reason: str = "", *, set_at: float | None = None
) -> SlurmNode:
    """A SLURM node from ``BASE+FLAG+...`` and a reason set at ``set_at`` (Unix time)."""
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName(name),
        state=NodeState.from_tokens(base, flags),
        reason=reason,
        reason_time=None if set_at is None else datetime.fromtimestamp(set_at),
    )


def view(name: str) -> NodeView:
    """A worker's view (only its name matters to the counts)."""
    return NodeView(node=NodeName(name), now=NOW, slurm=None, pod=None, kube_node=None)


def plan(name: str, *kinds: tuple[Writer, Kind]) -> Plan:
    """A plan holding one action of each (writer, kind)."""
    actions = tuple(Action(kind=k, writer=w, cause=Cause(name="k8s-cordoned")) for w, k in kinds)
    return Plan(node=NodeName(name), actions=actions)


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        ("IDLE", "", Holder(owner="none")),
        (
            "IDLE+DRAIN",
            "slonkd:k8s-cordoned by slonkd",
            Holder(owner="slonkd", cause="k8s-cordoned"),
        ),
        ("MIXED+DRAIN", "slonkd:health:gpu-xid-79 ECC", Holder(owner="slonkd", cause="health")),
        ("IDLE+DRAIN", "maintenance by alice", Holder(owner="operator")),
        ("DOWN+NOT_RESPONDING", "Not responding", Holder(owner="slurm")),
        ("IDLE+FAIL", "Kill task failed", Holder(owner="slurm")),
        ("IDLE", "slonkd:k8s-cordoned leftover of 24.11", Holder(owner="none")),
        ("IDLE+DRAIN", "slonkd:BAD grammar", Holder(owner="operator")),
    ],
)
def test_the_owner_of_a_reason_is_a_bounded_label(
    state: str, reason: str, expected: Holder
) -> None:
    """slonkd's reasons give their cause name (never the detail), others only their owner.

    A reason left on a node in service (SLURM 24.11 keeps it after a resume) is nobody's.
    """
    assert holder(node("n", state, reason)) == expected


def test_count_fleet_counts_every_family_with_all_series() -> None:
    """States, drain statuses, flags, owners, pending actions, disagreement and budget groups."""
    nodes = [
        node("a"),
        node("b", "MIXED+DRAIN", "slonkd:k8s-cordoned x"),
        node("c", "IDLE+DRAIN", "slonkd:k8s-cordoned y"),
        node("d", "IDLE+FAIL", "Kill task failed"),
        node("e", "IDLE+DRAIN", "rack swap (alice)"),
        node("f", "ALLOCATED"),
    ]
    views = [view(n) for n in "abcdef"]
    plans = [
        plan("a"),
        plan("b"),
        plan("c"),
        plan("d", (Writer.COORDINATOR, Kind.CORDON), (Writer.COORDINATOR, Kind.TAINT)),
        plan("e"),
        plan("f", (Writer.AGENT, Kind.DRAIN)),
    ]
    admission = Admission(pools=(PoolUse(pool="w", size=6, out=3, limit=2),))
    counts = count_fleet(nodes, views, plans, admission)
    assert set(counts.states) == set(STATES)
    assert {k: v for k, v in counts.states.items() if v} == {"idle": 4, "mixed": 1, "allocated": 1}
    assert counts.drain == {"none": 3, "draining": 1, "drained": 2, "unknown": 0}
    assert counts.flags["drain"] == 3
    assert counts.flags["fail"] == 1
    assert counts.flags["not_responding"] == 0
    assert counts.holders == {
        Holder(owner="none"): 2,
        Holder(owner="slonkd", cause="k8s-cordoned"): 2,
        Holder(owner="slurm"): 1,
        Holder(owner="operator"): 1,
    }
    assert set(counts.pending) == set(PENDING)
    assert {k: v for k, v in counts.pending.items() if v} == {
        ("coordinator", "cordon"): 1,
        ("coordinator", "taint"): 1,
        ("agent", "drain"): 1,
    }
    assert counts.disagreeing == 2
    assert counts.groups["w"].nodes == 6
    assert (counts.groups["w"].out, counts.groups["w"].limit) == (3, 2)


def test_an_empty_fleet_still_has_every_series_at_zero() -> None:
    """No node: every state, owner and pending series is there, at 0 (rate() and sums work).

    slonkd's series carry a cause name: they appear with the first node slonkd holds.
    """
    counts = count_fleet([], [], [], Admission())
    assert sum(counts.states.values()) == sum(counts.pending.values()) == 0
    assert set(counts.holders) == {Holder(owner=o) for o in ("operator", "slurm", "none")}
    assert counts.disagreeing == 0
    assert counts.groups == {}


CORDONED = Holder(owner="slonkd", cause="k8s-cordoned")
OPERATOR = Holder(owner="operator")


@pytest.mark.parametrize(
    ("previous", "read", "standing", "ended"),
    [
        pytest.param(
            {}, [node("a", "IDLE+DRAIN", "slonkd:k8s-cordoned x", set_at=NOW - 50)],
            {"a": Outage(holder=CORDONED, since=NOW - 50)}, [], id="starts-when-slurm-set-it",
        ),
        pytest.param(
            {}, [node("a", "DOWN", "")], {"a": Outage(holder=Holder(owner="none"), since=NOW)}, [],
            id="no-reason-time-first-seen",
        ),
        pytest.param(
            {}, [node("a", "IDLE+DRAIN", "maintenance", set_at=NOW + 99)],
            {"a": Outage(holder=OPERATOR, since=NOW)}, [], id="a-future-time-is-now",
        ),
        pytest.param(
            {"a": Outage(holder=CORDONED, since=NOW - 30)},
            [node("a", "MIXED+DRAIN", "slonkd:k8s-cordoned x", set_at=NOW - 10)],
            {"a": Outage(holder=CORDONED, since=NOW - 30)}, [], id="standing-keeps-its-start",
        ),
        pytest.param(
            {"a": Outage(holder=CORDONED, since=NOW - 30)}, [node("a", "IDLE")], {},
            [(CORDONED, 30.0)], id="ends-when-back-in-service",
        ),
        pytest.param(
            {"a": Outage(holder=CORDONED, since=NOW - 30)},
            [node("a", "IDLE", "slonkd:k8s-cordoned leftover", set_at=NOW - 30)], {},
            [(CORDONED, 30.0)], id="a-leftover-reason-is-not-an-outage",
        ),
        pytest.param(
            {"a": Outage(holder=CORDONED, since=NOW - 30)},
            [node("a", "IDLE+DRAIN", "maintenance", set_at=NOW - 5)],
            {"a": Outage(holder=OPERATOR, since=NOW - 5)}, [(CORDONED, 30.0)],
            id="another-owner-ends-one-starts-another",
        ),
        pytest.param(
            {"a": Outage(holder=CORDONED, since=NOW - 30)}, [], {}, [],
            id="a-node-gone-from-the-read-is-forgotten",
        ),
    ],
)  # fmt: skip
def test_outages_are_followed_across_passes(
    previous: dict[str, Outage],
    read: list[SlurmNode],
    standing: dict[str, Outage],
    ended: list[tuple[Holder, float]],
) -> None:
    """An outage starts when SLURM set its reason and is observed once, when it ends."""
    got_standing, got_ended = track_outages(previous, read, NOW)
    assert got_standing == standing
    assert [(h, round(s, 3)) for h, s in got_ended] == ended


def test_the_oldest_outage_of_each_holder() -> None:
    """One start per holder: the earliest of its standing outages."""
    outages = {
        "a": Outage(holder=CORDONED, since=NOW - 10),
        "b": Outage(holder=CORDONED, since=NOW - 300),
        "c": Outage(holder=OPERATOR, since=NOW - 7),
    }
    assert oldest_outages(outages) == {CORDONED: NOW - 300, OPERATOR: NOW - 7}


def test_disagreement_keeps_its_start_until_the_sides_agree() -> None:
    """A node with a pending action disagrees since the first pass that saw it; then it is gone."""
    first = track_disagreement({}, [plan("a", (Writer.COORDINATOR, Kind.CORDON)), plan("b")], NOW)
    assert first == {"a": NOW}
    later = track_disagreement(first, [plan("a", (Writer.COORDINATOR, Kind.TAINT))], NOW + 20)
    assert later == {"a": NOW}
    assert track_disagreement(later, [plan("a")], NOW + 40) == {}
