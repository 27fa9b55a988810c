"""Quarantined hardware: K8s nodes slonkd marked that no worker pod runs on, for a person.

After a remediation the bad machine keeps slonkd's marks (its cordon, its
``slonk.dev/unhealthy``, ``reboot-requested`` or ``manual-repair`` taint, ``SlurmHealthy=False``)
while its worker pod went elsewhere, so no view of a pass (one per worker pod,
:mod:`slonkd.runtime.coordinating.observing`) looks at it again and the node table of
``slonkd status`` (:mod:`slonkd.core.status`, SLURM nodes) no longer shows it. This module
finds those machines from the K8s nodes, the worker pods and the remediation history of the
state ConfigMap (:mod:`slonkd.core.coordinator_state`): the rung the ladder reached
(:mod:`slonkd.core.kube_actions`), since when, why. It also judges ``slonkd return NODE``:
whether a failure still stands there (:func:`return_refusal`), which marks to lift (only
slonkd's own, by :mod:`slonkd.core.kube_objects`' ownership rules: :func:`return_actions`)
and the history's entry marked returned, kept (:func:`mark_returned`).

Pure. Its users: :mod:`slonkd.runtime.coordinating.returning` (the section, the gauges, the
return's writes) and :mod:`slonkd.cli.quarantine` (the block of ``slonkd status``, the command).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from slonkd.core.coordinator_state import MAX_TEXT, Attempts
from slonkd.core.errors import ParseError
from slonkd.core.health import CheckResult, Verdict
from slonkd.core.kube_actions import FAILURE_TAINT, MANUAL_TAINT, REBOOT_TAINT
from slonkd.core.kube_objects import CORDONED_BY_ANNOTATION, SLURM_HEALTHY, Node, Pod
from slonkd.core.plan import Action, Kind, Writer
from slonkd.core.reasons import Cause, ReasonOwner, cause_detail, decode_causes, parse_reason
from slonkd.core.revalidation import is_failure
from slonkd.core.slurm_node import SlurmNode


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantined:
    """One machine slonkd took out and nobody has returned: it waits for a person."""

    kube_node: str
    rung: Rung
    attempts: int
    since: float | None
    """When the last rung was taken (None: no time on record)."""
    why: str
    """slonkd's cause for the marks (``health:gpu-xid-79``, ``slurm-failure``)."""
    slurm_node: str
    """The SLURM node whose failure the marks are for ("": not recorded)."""
    marks: tuple[str, ...]
    held: bool

    def as_json(self, now: float) -> dict[str, Any]:
        """The entry of ``slonkd status``'s ``quarantined`` section."""
        return {
            "kube_node": self.kube_node,
            "rung": self.rung.value,
            "attempts": self.attempts,
            "since": None
            if self.since is None
            else datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds"),
            "for_s": None if self.since is None else round(max(0.0, now - self.since), 1),
            "why": self.why,
            "slurm_node": self.slurm_node,
            "marks": list(self.marks),
            "hold": self.held,
        }


class Rung(StrEnum):
    """How far the remediation ladder went on a quarantined machine."""

    MARKED = "marked"
    """slonkd's marks, no ladder step on record (``policy.remediate`` off, the pod went)."""
    EVICTED = "pod-evicted"
    """The ladder's first step: the pod was evicted to other hardware."""
    REBOOT = "reboot-requested"
    MANUAL = "manual-repair"


RETURNED = "returned"
"""The cause name of the writes ``slonkd return`` makes (its detail: who)."""


def slonkd_marks(node: Node) -> tuple[str, ...]:
    """slonkd's own marks on ``node``: its cordon, its taints, ``SlurmHealthy=False``.

    A cordon counts only with slonkd's annotation (the adapter checks managedFields again
    before it lifts one), a taint only as slonkd's record lists it; the condition type is
    slonkd's whoever wrote it.
    """
    marks = ["cordon"] if node.unschedulable and node.cordoned_by_slonkd else []
    marks.extend(f"taint:{t.key}" for t in node.our_taints)
    if node.slurm_healthy is False:
        marks.append("condition")
    return tuple(marks)


def _has_marks(node: Node) -> bool:
    """``bool(slonkd_marks(node))`` without building the list (most nodes carry none)."""
    return bool(
        node.our_taints
        or node.slurm_healthy is False
        or (node.unschedulable and node.cordoned_by_slonkd)
    )


def _stamp(text: str) -> float | None:
    """The epoch of an RFC 3339 time (slonkd's ``...Z`` or the apiserver's); None: unreadable."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _annotation(node: Node, key: str) -> tuple[float | None, str]:
    """A rung's annotation ``<time> <cause> (attempt <n>)``: its time and cause."""
    text = node.annotations.get(key, "")
    stamp, _, rest = text.partition(" ")
    return _stamp(stamp) if stamp else None, rest.rpartition(" (attempt ")[0] or rest


def _why(node: Node, rung_cause: str) -> str:
    cordon = node.annotations.get(CORDONED_BY_ANNOTATION, "")
    taint = next((t.value for t in node.our_taints if t.key == FAILURE_TAINT), "")
    condition = node.condition(SLURM_HEALTHY)
    message = condition.message if condition is not None and node.slurm_healthy is False else ""
    why = rung_cause or cordon.partition(" node=")[0] or taint or message
    return why[:MAX_TEXT]


def quarantined_node(node: Node, history: Attempts, *, has_pod: bool) -> Quarantined | None:
    """``node`` as quarantined hardware, or None (no mark of slonkd's, or a worker pod there).

    The rung is the highest of slonkd's ladder taints, else the evicted pod the history
    records since the last return, else ``marked``; since when is that rung's annotation's
    time, else the history's last step, else the condition's transition.
    """
    marks = slonkd_marks(node)
    if not marks or has_pod:
        return None
    ours = {t.key for t in node.our_taints}
    live = history.attempts > 0 and history.last_at > history.returned_at
    since: float | None = None
    cause = ""
    if MANUAL_TAINT in ours or REBOOT_TAINT in ours:
        rung, key = (
            (Rung.MANUAL, MANUAL_TAINT) if MANUAL_TAINT in ours else (Rung.REBOOT, REBOOT_TAINT)
        )
        since, cause = _annotation(node, key)
    else:
        rung = Rung.EVICTED if live else Rung.MARKED
    if since is None and live:
        since = history.last_at
    condition = node.condition(SLURM_HEALTHY)
    if since is None and condition is not None and condition.last_transition_time:
        since = _stamp(condition.last_transition_time)
    return Quarantined(
        kube_node=str(node.name),
        rung=rung,
        attempts=history.attempts,
        since=since,
        why=_why(node, cause),
        slurm_node=node.marked_for or "",
        marks=marks,
        held=node.held,
    )


def quarantined(
    nodes: Iterable[Node], pods: Iterable[Pod], history: Mapping[str, Attempts]
) -> list[Quarantined]:
    """Every K8s node with slonkd's marks and no worker pod (a terminating one counts), by name.

    Once a pass over every node (the gauges): the marks are asked first, from the fields the
    node derived once per informer event, and the pods only when some node carries one.
    """
    marked = [n for n in nodes if _has_marks(n)]
    if not marked:
        return []
    occupied = {p.node_name for p in pods if p.node_name}
    found = (
        quarantined_node(n, history.get(n.name, Attempts()), has_pod=n.name in occupied)
        for n in marked
    )
    return sorted((q for q in found if q is not None), key=lambda q: q.kube_node)


def longest(found: Iterable[Quarantined], now: float) -> float:
    """How long the longest-quarantined machine has waited (0: none, or no time known)."""
    return max((now - q.since for q in found if q.since is not None), default=0.0)


def _slurm_failure(slurm: SlurmNode) -> str | None:
    """SLURM's own failure, or slonkd's failure cause, holding ``slurm`` (None: neither)."""
    reason = parse_reason(slurm.live_reason)
    if reason.owner is ReasonOwner.SLURM:
        return slurm.live_reason[:120]
    if reason.owner is not ReasonOwner.SLONKD:
        return None
    causes: set[Cause] = {reason.cause} if reason.cause else set()
    with suppress(ParseError):  # a tampered extra: the reason's own cause still says
        causes |= decode_causes(slurm.extra)
    failing = sorted(str(c) for c in causes if is_failure(c))
    return f"slonkd:{','.join(failing)}" if failing else None


def return_refusal(
    node: Node | None,
    name: str,
    *,
    pods: Iterable[Pod],
    health: Mapping[str, tuple[str, Mapping[str, CheckResult]]],
    slurm: SlurmNode | None,
) -> str | None:
    """Why ``slonkd return name`` must not lift slonkd's marks now (None: it may).

    ``health``: per SLURM node, the K8s node its agent measured on and its verdicts, as the
    leader last heard them; ``slurm``: the SLURM node the marks are for (:attr:`Node.
    marked_for`), as the last pass read it. A failure stands while an agent's verdict
    measured on this machine fails, or while the SLURM node the marks are for is held by
    SLURM's own failure or one of slonkd's failure causes and its pod has run on no other
    machine since (the failure is still this hardware's). A machine a worker pod runs on is
    not waiting for anyone: slonkd lifts its marks itself once that pod is healthy.
    """
    if node is None:
        return f"no K8s node {name!r}"
    if not slonkd_marks(node):
        return f"K8s node {name} carries none of slonkd's marks: nothing to return"
    pods = list(pods)
    here = sorted(str(p.name) for p in pods if p.node_name == node.name)
    if here:
        return (
            f"worker pod {here[0]} runs on {name}: slonkd lifts its marks itself once it is healthy"
        )
    for slurm_node, (measured_on, verdicts) in sorted(health.items()):
        failing = sorted(c for c, r in verdicts.items() if r.verdict is Verdict.FAIL)
        if measured_on == node.name and failing:
            return f"health check {failing[0]} fails on {name} ({slurm_node}'s agent): fix it first"
    marked = node.marked_for
    if slurm is None or marked is None or slurm.name != marked:
        return None
    elsewhere = any(
        p.name == marked and p.node_name and p.node_name != node.name and p.ready for p in pods
    )
    failure = None if elsewhere else _slurm_failure(slurm)
    if failure is not None:
        return (
            f"SLURM node {marked} is still failing ({failure}) and its pod has run on no other"
            " machine since: resume it in SLURM first if you checked the machine"
        )
    return None


def return_cause(who: str) -> Cause:
    """The cause of a return's writes: ``returned:<who>`` (who in the reason grammar)."""
    return Cause(name=RETURNED, detail=cause_detail(who))


def return_actions(node: Node, who: str) -> list[Action]:
    """The writes that lift slonkd's own marks from ``node``, and nothing else.

    slonkd's cordon (its annotation; the adapter checks managedFields before the uncordon),
    each taint slonkd's record lists (a ``reboot-requested`` or ``manual-repair`` one with
    its annotation), and ``SlurmHealthy`` set True. A foreign cordon or taint is never touched.
    """
    co, cause = Writer.COORDINATOR, return_cause(who)
    out: list[Action] = []
    if node.unschedulable and node.cordoned_by_slonkd:
        out.append(Action(kind=Kind.UNCORDON, writer=co, cause=cause))
    for key in sorted({t.key for t in node.our_taints}):
        out.append(Action(kind=Kind.UNTAINT, writer=co, cause=cause, key=key))
    if node.slurm_healthy is False:
        out.append(Action(kind=Kind.SET_CONDITION, writer=co, cause=cause, key="True"))
    return out


def mark_returned(history: Attempts, who: str, at: float) -> Attempts:
    """The history's entry once a person returned the machine: kept, marked returned.

    The attempts still count (a later failure on this machine takes the next rung, as the
    ladder always did); the next step's record clears the mark.
    """
    return replace(history, returned_at=at, returned_by=who[:MAX_TEXT])
