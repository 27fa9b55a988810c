"""Compare-and-set decisions for SLURM node updates (pure; no I/O).

Given a node as just read from slurmctld, decide whether slonkd may hold it (drain, down,
fail) or release it (resume, undrain) for one cause, and what exactly to write. The rules
of docs/architecture.md ("Ownership") live here:

- a node drained, down or failed under a reason that is not slonkd's is left alone (a new
  reason would replace the operator's and steal the node);
- a node slonkd already holds gets the new cause added to its set (``extra``) and the
  reason shows the highest-priority cause;
- release removes one cause; the node is resumed only when no slonkd cause is left and its
  reason is still slonkd's (an operator who re-drained it owns it now);
- a node whose reboot is pending is never released: a resume cancels the reboot, and the
  reboot clears slonkd's reason itself when it completes;
- a state slonkd does not recognise is never acted on;
- a reason left on a node that is no longer held (24.11 keeps it after a resume) is stale:
  it neither protects nor claims the node.

The adapter runs these against a fresh read and groups identical updates into hostlists;
when slurmctld refuses part of a bulk update, :func:`shows` judges each node by a new read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from slonkd.core.errors import ParseError
from slonkd.core.reasons import (
    Cause,
    ReasonOwner,
    decode_causes,
    encode_causes,
    format_reason,
    highest,
    parse_reason,
)
from slonkd.core.slurm_node import DrainStatus, NodeFlag, NodeName, SlurmNode


class HoldState(StrEnum):
    """States slonkd puts a node in; values are scontrol's ``state=`` words."""

    DRAIN = "drain"
    DOWN = "down"
    FAIL = "fail"


class ReleaseState(StrEnum):
    """How slonkd lifts its hold: ``resume`` (any hold) or ``undrain`` (only DRAIN)."""

    RESUME = "resume"
    UNDRAIN = "undrain"


class SkipReason(StrEnum):
    """Why a node was left as it is."""

    NOT_FOUND = "not-found"
    UNRECOGNISED_STATE = "unrecognised-state"
    FOREIGN_REASON = "foreign-reason"
    SLURM_REASON = "slurm-reason"
    FOREIGN_STATE = "foreign-state"
    """Drained, down or failed with no reason at all: not slonkd's."""
    FOREIGN_EXTRA = "foreign-extra"
    ALREADY_HELD = "already-held"
    NOT_HELD = "not-held"
    """Release of a node slonkd does not hold (no reason, or not drained)."""
    REFUSED = "refused-by-slurm"
    """slurmctld rejected the update for this node (its state changed under us)."""
    OTHER_CAUSES = "other-causes"
    """Release removed this cause, but other slonkd causes still hold the node."""
    CHANGED = "changed-since-read"
    """The node changed between the pass's read and its chunk's write: left for the next pass."""
    REBOOT_PENDING = "reboot-pending"
    """A reboot is requested or issued already (REBOOT_REQUESTED/REBOOT_ISSUED): not asked
    again, and not released (a resume would cancel it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """One ``scontrol update`` slonkd may issue for a node."""

    node: NodeName
    state: str | None
    reason: str | None = None
    extra: str | None = None
    still_held_by: str = ""
    """For a release: the slonkd causes that keep the node held after this update."""

    @property
    def group_key(self) -> tuple[str | None, str | None, str | None]:
        """Updates with equal keys go into one hostlist call."""
        return (self.state, self.reason, self.extra)


@dataclass(frozen=True, slots=True, kw_only=True)
class Skip:
    """A node left unchanged (or only re-annotated), with why."""

    node: NodeName
    why: SkipReason
    detail: str = ""


def _not_ours(node: SlurmNode, owner: ReasonOwner) -> Skip | None:
    """Why ``node`` is left alone whatever slonkd wants of it (None: it may be acted on).

    A state slonkd does not fully recognise, or a live reason an operator or SLURM itself
    wrote (``owner``). :func:`plan_hold`, :func:`plan_release` and :func:`plan_reboot` ask
    here first.
    """
    if not node.state.fully_recognised:
        return Skip(node=node.name, why=SkipReason.UNRECOGNISED_STATE, detail=str(node.state))
    if owner is ReasonOwner.FOREIGN:
        return Skip(node=node.name, why=SkipReason.FOREIGN_REASON, detail=node.reason[:200])
    if owner is ReasonOwner.SLURM:
        return Skip(node=node.name, why=SkipReason.SLURM_REASON, detail=node.reason[:200])
    return None


def plan_hold(node: SlurmNode, how: HoldState, cause: Cause, text: str = "") -> Update | Skip:
    """Decide a drain/down/fail of ``node`` for ``cause``."""
    state = node.state
    reason = parse_reason(node.live_reason)
    if (skip := _not_ours(node, reason.owner)) is not None:
        return skip
    held = node.held
    if reason.owner is ReasonOwner.NONE:
        if held:
            return Skip(node=node.name, why=SkipReason.FOREIGN_STATE, detail=str(state))
        try:
            extra = _extra_for(node, frozenset({cause}))
        except ParseError as exc:
            return Skip(node=node.name, why=SkipReason.FOREIGN_EXTRA, detail=str(exc))
        return Update(
            node=node.name, state=how.value, reason=format_reason(cause, text), extra=extra
        )
    # slonkd holds it already: add the cause, show the highest one, keep the stronger state.
    try:
        causes = recorded_causes(node)
        new_causes = causes | {cause}
        extra = _extra_for(node, new_causes)
    except ParseError as exc:
        return Skip(node=node.name, why=SkipReason.FOREIGN_EXTRA, detail=str(exc))
    target = _stronger(node, how)
    top = highest(new_causes)
    current_top = reason.cause
    same_state = target == _current_hold(node)
    if extra is None and new_causes == causes and top == current_top and same_state:
        return Skip(node=node.name, why=SkipReason.ALREADY_HELD, detail=str(top))
    new_reason = node.reason if top == current_top else format_reason(top, text)
    return Update(node=node.name, state=target.value, reason=new_reason, extra=extra)


def plan_release(node: SlurmNode, how: ReleaseState, cause: Cause) -> Update | Skip:
    """Decide a resume/undrain of ``node`` for ``cause`` (compare-and-set on the reason)."""
    state = node.state
    reason = parse_reason(node.live_reason)
    if (skip := _not_ours(node, reason.owner)) is not None:
        return skip
    if reason.owner is ReasonOwner.NONE:
        return Skip(node=node.name, why=SkipReason.NOT_HELD, detail=str(state))
    if state.reboot_pending:  # a resume would cancel it; its completion clears the reason
        return Skip(node=node.name, why=SkipReason.REBOOT_PENDING, detail=str(state))
    try:
        causes = recorded_causes(node)
        remaining = causes - {cause}
        extra = _extra_for(node, remaining)
    except ParseError as exc:
        return Skip(node=node.name, why=SkipReason.FOREIGN_EXTRA, detail=str(exc))
    if remaining:
        names = ",".join(sorted(str(c) for c in remaining))
        if cause not in causes:
            return Skip(node=node.name, why=SkipReason.OTHER_CAUSES, detail=names)
        top = highest(remaining)
        return Update(
            node=node.name,
            state=_current_hold(node).value,
            reason=format_reason(top, "held"),
            extra=extra,
            still_held_by=names,
        )
    if how is ReleaseState.UNDRAIN and state.drain is DrainStatus.NONE:
        return Skip(node=node.name, why=SkipReason.NOT_HELD, detail=str(state))
    return Update(node=node.name, state=how.value, extra=extra)


def plan_reboot(node: SlurmNode) -> Update | Skip:
    """Decide a ``scontrol reboot ASAP`` of ``node``, a node slonkd holds.

    The adapter drains the node for the reboot's cause first (that records it, as any hold
    does), so the reboot is planned only for a node slonkd's live reason holds; it goes out
    with that reason unchanged (``state`` None: the reboot drains by itself). A node with a
    reboot requested or issued already is not asked again: one request per ladder step.
    """
    state = node.state
    owner = parse_reason(node.live_reason).owner
    if (skip := _not_ours(node, owner)) is not None:
        return skip
    if owner is ReasonOwner.NONE:
        why = SkipReason.FOREIGN_STATE if node.held else SkipReason.NOT_HELD
        return Skip(node=node.name, why=why, detail=str(state))
    if state.reboot_pending:
        return Skip(node=node.name, why=SkipReason.REBOOT_PENDING, detail=str(state))
    return Update(node=node.name, state=None, reason=node.reason)


Planner = Callable[[SlurmNode], Update | Skip]
"""One of the plans above, for one node as just read."""


def plan_or_missing(nodes: Mapping[str, SlurmNode], name: str, plan: Planner) -> Update | Skip:
    """``plan`` for node ``name`` as read in ``nodes``; a node the read lacks is ``not-found``."""
    node = nodes.get(name)
    if node is None:
        return Skip(node=NodeName(name), why=SkipReason.NOT_FOUND)
    return plan(node)


def shows(node: SlurmNode, update: Update) -> bool:
    """Whether ``node`` as read now shows what ``update`` asked for.

    slurmctld that refuses part of a bulk update still applies it to the nodes it can: the
    adapter then judges each node of the update by what a read shows.
    """
    if update.extra is not None and node.extra != update.extra:
        return False
    if update.state in {ReleaseState.RESUME, ReleaseState.UNDRAIN}:
        drained = NodeFlag.DRAIN in node.state.flags
        stopped = node.state.down or node.state.failed
        return not drained and (update.state == ReleaseState.UNDRAIN or not stopped)
    if update.reason is not None and node.reason != update.reason:
        return False
    if update.state == HoldState.DOWN:
        return node.state.down
    if update.state == HoldState.FAIL:
        return node.state.failed
    return update.state != HoldState.DRAIN or NodeFlag.DRAIN in node.state.flags


def recorded_causes(node: SlurmNode) -> frozenset[Cause]:
    """The causes recorded on a node: those in ``extra`` plus the one its live reason shows.

    What the node says, whoever holds it: the compare-and-set writes read it to change the
    set. Whether the node is slonkd's to touch at all is
    :func:`slonkd.core.decide.held_causes`' question (None when it is not).
    :class:`ParseError` when ``extra`` carries a tampered cause set.
    """
    shown = parse_reason(node.live_reason).cause
    causes = decode_causes(node.extra)
    return causes | {shown} if shown is not None else causes


def _extra_for(node: SlurmNode, causes: frozenset[Cause]) -> str | None:
    """The ``extra`` to write for ``causes``, or None when it already says so.

    A single cause lives in the reason alone; ``extra`` records the set only when there are
    two or more. So a first drain never writes ``extra``, and a bulk drain of nodes whose
    ``extra`` differs (someone else's JSON keys) still goes out as one hostlist.
    """
    stored = causes if len(causes) > 1 else frozenset()
    if decode_causes(node.extra) == stored:
        return None
    return encode_causes(node.extra, stored)


def _current_hold(node: SlurmNode) -> HoldState:
    if node.state.down:
        return HoldState.DOWN
    if node.state.failed:
        return HoldState.FAIL
    return HoldState.DRAIN


_STRENGTH = {HoldState.DRAIN: 0, HoldState.FAIL: 1, HoldState.DOWN: 2}


def _stronger(node: SlurmNode, how: HoldState) -> HoldState:
    current = _current_hold(node)
    if not node.held:
        return how
    return how if _STRENGTH[how] >= _STRENGTH[current] else current
