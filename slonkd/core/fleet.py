"""The fleet as numbers: what the coordinator's metrics say about one pass (pure; no I/O).

From the SLURM read, the views, the plans and the budget's answer a pass already has, this
module counts nodes by SLURM base state, drain status and flag, nodes by who owns their
reason (slonkd and its cause name, an operator, SLURM itself, nobody), the actions still
pending (by writer and kind), the nodes where SLURM and Kubernetes disagree, and the
budget of each group. Across passes it follows two things per node: the outage (held in
SLURM: drained, draining, down or failed) with its owner and cause, observed as a duration
when it ends, and since when a node's sides disagree.

Every label value comes from a bounded set: enum values, the four owners, slonkd's cause
names without their detail, and budget groups (pools, or pools and topology blocks).
Disagreement is what ``slonkd status`` shows as DRIFT: a node whose plan still holds an
action (empty when both sides agree, or when the node is not slonkd's to change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slonkd.core.budget import Admission
from slonkd.core.plan import Kind, NodeView, Plan, Writer
from slonkd.core.reasons import ReasonOwner, parse_reason
from slonkd.core.slurm_node import BaseState, DrainStatus, NodeFlag, SlurmNode

OWNERS = {
    ReasonOwner.SLONKD: "slonkd",
    ReasonOwner.FOREIGN: "operator",
    ReasonOwner.SLURM: "slurm",
    ReasonOwner.NONE: "none",
}
"""The ``owner`` label of a node's reason: slonkd, an operator (any foreign writer), SLURM."""
STATES = tuple(s.value for s in BaseState)
DRAIN_STATUSES = tuple(d.value for d in DrainStatus)
FLAGS = tuple(f.value.lower() for f in NodeFlag)
PENDING = tuple((w.value, k.value) for w in Writer for k in Kind)
"""Every (writer, kind) of a pending action: all series exist, zero included."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Holder:
    """Who holds a node out: the reason's owner and, for slonkd, its cause name ("" else)."""

    owner: str
    cause: str = ""


ZERO_HOLDERS = tuple(Holder(owner=o) for o in ("operator", "slurm", "none"))
"""Holders whose series exist at zero (slonkd's come with their cause name)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outage:
    """A node held out of service in SLURM by ``holder`` since ``since`` (Unix time)."""

    holder: Holder
    since: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupBudget:
    """One budget group's size, nodes out and limit at the pass."""

    nodes: int
    out: int
    limit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetCounts:
    """What one pass counted; every mapping holds all of its series, zero included."""

    states: Mapping[str, int]
    """SLURM nodes by base state (:data:`STATES`)."""
    drain: Mapping[str, int]
    """SLURM nodes by derived drain status (:data:`DRAIN_STATUSES`)."""
    flags: Mapping[str, int]
    """SLURM nodes carrying each flag (:data:`FLAGS`, lower case)."""
    holders: Mapping[Holder, int]
    """SLURM nodes by their live reason's owner (and slonkd's cause name)."""
    pending: Mapping[tuple[str, str], int]
    """Actions still to do, by (writer, kind) (:data:`PENDING`)."""
    disagreeing: int
    """Worker nodes whose plan still holds an action."""
    groups: Mapping[str, GroupBudget] = field(default_factory=dict)


def holder(node: SlurmNode) -> Holder:
    """Who owns the node's live reason (a leftover reason on a node in service is nobody's)."""
    reason = parse_reason(node.live_reason)
    owner = OWNERS[reason.owner]
    if reason.owner is ReasonOwner.SLONKD and reason.cause is not None:
        return Holder(owner=owner, cause=reason.cause.name)
    return Holder(owner=owner)


def count_fleet(
    slurm_nodes: Sequence[SlurmNode],
    views: Sequence[NodeView],
    plans: Sequence[Plan],
    admission: Admission,
) -> FleetCounts:
    """The counts of one pass: SLURM's nodes (all of the read) and the workers' plans."""
    states = dict.fromkeys(STATES, 0)
    drain = dict.fromkeys(DRAIN_STATUSES, 0)
    flags = dict.fromkeys(FLAGS, 0)
    holders: dict[Holder, int] = dict.fromkeys(ZERO_HOLDERS, 0)
    for node in slurm_nodes:
        states[node.state.base.value] += 1
        drain[node.state.drain.value] += 1
        for flag in node.state.flags:
            flags[flag.value.lower()] += 1
        who = holder(node)
        holders[who] = holders.get(who, 0) + 1
    pending = dict.fromkeys(PENDING, 0)
    for plan in plans:
        for action in plan.actions:
            pending[(action.writer.value, action.kind.value)] += 1
    groups = {
        use.pool: GroupBudget(nodes=use.size, out=use.out, limit=use.limit)
        for use in admission.pools
    }
    return FleetCounts(
        states=states,
        drain=drain,
        flags=flags,
        holders=holders,
        pending=pending,
        disagreeing=sum(1 for _, plan in zip(views, plans, strict=True) if plan.actions),
        groups=groups,
    )


def _reason_since(node: SlurmNode, now: float) -> float:
    """When SLURM says the reason was set (an aware time), never in the future."""
    if node.reason_time is None or not node.live_reason:
        return now
    return min(node.reason_time.timestamp(), now)


def track_outages(
    previous: Mapping[str, Outage], slurm_nodes: Iterable[SlurmNode], now: float
) -> tuple[dict[str, Outage], list[tuple[Holder, float]]]:
    """The outages standing after this read, and the ``(holder, seconds)`` of those that ended.

    An outage ends when its node is back in service, or when another owner or cause holds
    it now (that one starts a new outage). It starts when SLURM says its reason was set
    (a new leader measures outages that began before it), else when first seen. A node
    missing from the read is forgotten, not counted as back.
    """
    standing: dict[str, Outage] = {}
    ended: list[tuple[Holder, float]] = []
    seen: set[str] = set()
    for node in slurm_nodes:
        name = str(node.name)
        seen.add(name)
        old = previous.get(name)
        if not node.held:
            if old is not None:
                ended.append((old.holder, max(0.0, now - old.since)))
            continue
        who = holder(node)
        if old is not None and old.holder == who:
            standing[name] = old
            continue
        if old is not None:
            ended.append((old.holder, max(0.0, now - old.since)))
        standing[name] = Outage(holder=who, since=_reason_since(node, now))
    return standing, ended


def oldest_outages(outages: Mapping[str, Outage]) -> dict[Holder, float]:
    """The start of the longest standing outage of each holder."""
    oldest: dict[Holder, float] = {}
    for outage in outages.values():
        known = oldest.get(outage.holder)
        oldest[outage.holder] = outage.since if known is None else min(known, outage.since)
    return oldest


def track_disagreement(
    previous: Mapping[str, float], plans: Iterable[Plan], now: float
) -> dict[str, float]:
    """Since when each node's sides disagree (its plan holds an action); agreeing: absent."""
    return {str(plan.node): previous.get(str(plan.node), now) for plan in plans if plan.actions}
