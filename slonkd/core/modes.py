"""Modes per pool: which of a pass's actions the coordinator takes, and which it only reports.

A pool runs in one :class:`Mode`: ``observe`` (decide, log, audit and count every action,
change nothing), ``quarantine`` (SLURM drains and the K8s marks: cordon, taint, condition,
Event; no rung of the remediation ladder: eviction, reboot request, manual repair) or ``full``
(everything). Lifecycle drains and their releases (a pod terminating or not ready, a rollout
replacing it) are taken in every mode: they are no failure's answer, and a node a lifecycle
drain took out must come back. The global dry run is ``observe`` for every pool.

The chart gives each pool's mode (the coordinator's ``pool_modes`` setting); ``slonkd mode
POOL MODE`` switches it at run time in the state ConfigMap
(:mod:`slonkd.core.coordinator_state`), which wins. Pure: :func:`split` takes the plans of a
pass (:mod:`slonkd.core.decide`, :mod:`slonkd.core.fleet_decide`, actions of
:mod:`slonkd.core.plan`) and each node's mode; the pass (:mod:`slonkd.runtime.coordinating.
reconciling`) and the fast path act on what is kept and report what is only "would"
(:mod:`slonkd.runtime.coordinating.observing_modes`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from slonkd.core.budget import DEFAULT_POOL
from slonkd.core.plan import Action, Kind, Plan, Writer
from slonkd.core.slurm_node import NodeName


class Mode(StrEnum):
    """How far the coordinator acts on one pool."""

    OBSERVE = "observe"
    QUARANTINE = "quarantine"
    FULL = "full"


LADDER = frozenset({Kind.EVICT, Kind.REQUEST_REBOOT, Kind.MARK_MANUAL})
"""The remediation ladder's rungs: taken in ``full`` only."""
LIFECYCLE_CAUSES = frozenset({"pod-terminating", "pod-not-ready", "prestop", "rollout"})
"""Causes of a pod's lifecycle: their drains and releases are taken in every mode."""
_POOL_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
"""A Kubernetes label value (the pool label's)."""


def parse_mode(text: str) -> Mode:
    """``text`` as a mode; a ValueError naming it and the modes otherwise."""
    try:
        return Mode(text)
    except ValueError:
        modes = ", ".join(m.value for m in Mode)
        raise ValueError(f"unknown mode {text[:40]!r} (one of {modes})") from None


def check_pool(name: str) -> str:
    """``name`` when it can be a pool (a label value, not empty); a ValueError otherwise."""
    if not name or len(name) > 63 or not _POOL_RE.fullmatch(name):
        raise ValueError(f"unknown pool {name[:70]!r}: not a pool label value")
    return name


def pool_of(group: str) -> str:
    """The pool of a budget group (``pool`` or ``pool/block``)."""
    return group.split("/", 1)[0] or DEFAULT_POOL


def mode_of(
    pool: str, *, chosen: Mapping[str, Mode], configured: Mapping[str, Mode], dry_run: bool
) -> Mode:
    """A pool's mode: observe in a dry run, else the operator's switch, the chart's, ``full``."""
    if dry_run:
        return Mode.OBSERVE
    return chosen.get(pool) or configured.get(pool) or Mode.FULL


def taken(action: Action, mode: Mode) -> bool:
    """Whether the coordinator takes ``action`` in ``mode`` (else it only would)."""
    if action.writer is not Writer.COORDINATOR or action.cause.name in LIFECYCLE_CAUSES:
        return True
    if mode is Mode.FULL:
        return True
    if mode is Mode.QUARANTINE:
        return action.kind not in LADDER
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Would:
    """An action a pool's mode holds back: reported, not taken."""

    node: NodeName
    pool: str
    mode: Mode
    action: Action


def split(
    plans: Sequence[Plan], pools: Sequence[str], modes: Mapping[str, Mode]
) -> tuple[list[Plan], list[Would]]:
    """The plans with only the actions each node's pool mode takes, and those it would take.

    ``pools``: each plan's pool (in order); ``modes``: each pool's mode (absent: ``full``).
    A plan whose actions are all taken is returned as it is; the others say in a note what
    their mode holds back (``slonkd explain``).
    """
    kept: list[Plan] = []
    would: list[Would] = []
    for plan, pool in zip(plans, pools, strict=True):
        mode = modes.get(pool, Mode.FULL)
        if mode is Mode.FULL or not plan.actions:
            kept.append(plan)
            continue
        held = [a for a in plan.actions if not taken(a, mode)]
        if not held:
            kept.append(plan)
            continue
        would.extend(Would(node=plan.node, pool=pool, mode=mode, action=a) for a in held)
        said = ", ".join(f"{a.kind.value} {a.cause}" for a in held)
        kept.append(
            replace(
                plan,
                actions=tuple(a for a in plan.actions if taken(a, mode)),
                notes=(*plan.notes, f"pool {pool} is in {mode.value} mode: would {said}"),
            )
        )
    return kept, would


def held_back(would: Sequence[Would]) -> frozenset[str]:
    """The nodes whose budgeted actions a mode held back (standing once it lets them go)."""
    return frozenset(str(w.node) for w in would if w.action.budgeted)


__all__ = [
    "LADDER",
    "LIFECYCLE_CAUSES",
    "Mode",
    "Would",
    "check_pool",
    "held_back",
    "mode_of",
    "parse_mode",
    "pool_of",
    "split",
    "taken",
]
