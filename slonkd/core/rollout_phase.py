"""Where each worker stands in a rollout, read from the world: its phase, and what holds it.

A worker pod whose ``controller-revision-hash`` label (:data:`REVISION_LABEL`) differs from
its StatefulSet's ``status.updateRevision`` is outdated; a SLURM node whose slonkd reason or
cause set holds ``rollout`` (:data:`ROLLOUT_CAUSE`) is in the rollout. :func:`phase_of`
reads a worker's :class:`Phase` from its :class:`WorkerView` (its pod, its StatefulSet, its
SLURM node and K8s node); nothing is kept in memory, so a new leader after a failover
carries on where the old one stopped. An operator's hold on the K8s node keeps the rollout
off a worker (:func:`operator_hold`). Pure functions only: nothing here reads or writes
anything. What a pass does with the phases is :func:`slonkd.core.rollout.plan_rollout`'s
(:mod:`slonkd.core.rollout`); the controller that reads the views and acts is
:mod:`slonkd.runtime.coordinating.rolling`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from slonkd.core.errors import ParseError
from slonkd.core.kube_objects import HOLD_KEY, Node, Pod
from slonkd.core.pod_ready import serving
from slonkd.core.reasons import Cause, ReasonOwner, decode_causes, parse_reason
from slonkd.core.slurm_node import SlurmNode

ROLLOUT_CAUSE = Cause(name="rollout")
"""The cause of a drain the rollout makes (``slonkd:rollout`` in ``sinfo -R``)."""
REVISION_LABEL = "controller-revision-hash"
"""The label the StatefulSet controller puts on each pod: the revision it was made from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StatefulSetRevision:
    """What a rollout needs of one StatefulSet."""

    name: str
    namespace: str
    update_revision: str
    current_revision: str = ""
    replicas: int = 0
    on_delete: bool = False
    """``updateStrategy: OnDelete``: only such StatefulSets are rolled by slonkd."""
    selector: Mapping[str, str] = field(default_factory=dict)
    """``spec.selector.matchLabels``."""

    def owns(self, pod: Pod) -> bool:
        """Whether ``pod`` is one of this StatefulSet's pods (name ``<sts>-<ordinal>``, labels)."""
        if pod.namespace and self.namespace and pod.namespace != self.namespace:
            return False
        if re.fullmatch(re.escape(self.name) + r"-\d+", pod.name) is None:
            return False
        return all(pod.labels.get(k) == v for k, v in self.selector.items())

    def wants(self, pod_name: str) -> bool:
        """Whether this StatefulSet keeps a pod of that name (``<sts>-<ordinal < replicas>``)."""
        match = re.fullmatch(re.escape(self.name) + r"-(\d+)", pod_name)
        return match is not None and int(match[1]) < self.replicas


class Phase(StrEnum):
    """Where one worker stands in a rollout."""

    UPDATED = "updated"
    """Its pod runs the update revision and the rollout does not hold its node."""
    OUTDATED = "outdated"
    """Its pod runs an older revision; not started yet."""
    DRAINING = "draining"
    """Drained for the rollout; waiting for its jobs, then its pod is evicted."""
    REPLACING = "replacing"
    """Its pod is being deleted or is gone; the StatefulSet makes the new one."""
    STARTING = "starting"
    """Its new pod runs the update revision but is not Running and Ready yet."""
    DONE = "done"
    """Its new pod is Ready: the rollout's cause is to be released now."""
    SETTLING = "settling"
    """Released by the rollout; its node is not back in service yet (the agent's turn)."""
    UNMANAGED = "unmanaged"
    """Not rolled by slonkd: no StatefulSet, not OnDelete, or no revision label."""


ACTIVE = frozenset({Phase.DRAINING, Phase.REPLACING, Phase.STARTING, Phase.DONE, Phase.SETTLING})


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerView:
    """One worker as the rollout sees it: its pod, its StatefulSet and its SLURM node.

    With no pod, ``statefulset`` is the one that wants a pod of that name back, if any.
    """

    node: str
    pod: Pod | None
    statefulset: StatefulSetRevision | None
    slurm: SlurmNode | None
    settling: bool = False
    """The rollout released this node a moment ago and waits for it to be back in service."""
    pool: str = "default"
    """Where the worker's budget is counted (:func:`slonkd.core.budget.budget_group`: its
    ``slonk.dev/pool``, and its topology block when the budget holds per block)."""
    kube_node: Node | None = None
    """The K8s node its pod runs on (None: no pod, not scheduled, or not seen)."""


def operator_hold(view: WorkerView) -> str:
    """Why the operator's hold keeps the rollout off this worker ("" when there is none).

    The same ``slonk.dev/hold`` (label or annotation on the K8s node) that stops every other
    automated action of slonkd: the rollout neither drains the node, nor evicts its pod, nor
    releases its own cause there until the hold is lifted.
    """
    kube = view.kube_node
    if kube is None or not kube.held:
        return ""
    return f"K8s node {kube.name} is on hold ({HOLD_KEY}): left alone"


def held_by_rollout(slurm: SlurmNode | None) -> bool:
    """Whether slonkd holds the node for the rollout (its reason or its cause set says so)."""
    if slurm is None:
        return False
    reason = parse_reason(slurm.live_reason)
    if reason.owner is not ReasonOwner.SLONKD:
        return False
    try:
        causes = decode_causes(slurm.extra)
    except ParseError:
        return False
    return reason.cause == ROLLOUT_CAUSE or ROLLOUT_CAUSE in causes


def phase_of(view: WorkerView) -> Phase:
    """The worker's phase (see :class:`Phase`)."""
    held = held_by_rollout(view.slurm)
    pod, sts = view.pod, view.statefulset
    if pod is None:
        if not held:
            return Phase.UNMANAGED
        # Gone: replaced soon if its StatefulSet still wants it; otherwise (scaled down,
        # deleted) nothing will come back, and the rollout lets go of the node.
        return Phase.REPLACING if sts is not None else Phase.DONE
    if pod.terminating and held:
        return Phase.REPLACING
    revision = pod.labels.get(REVISION_LABEL, "")
    if sts is None or not revision or not sts.update_revision:
        return Phase.STARTING if held else Phase.UNMANAGED
    updated = revision == sts.update_revision
    if held:
        if not updated:
            return Phase.DRAINING
        return Phase.DONE if serving(pod) else Phase.STARTING
    if not sts.on_delete:
        return Phase.UNMANAGED
    if updated and view.settling:
        return Phase.SETTLING
    return Phase.UPDATED if updated else Phase.OUTDATED


__all__ = [
    "ACTIVE",
    "REVISION_LABEL",
    "ROLLOUT_CAUSE",
    "Phase",
    "StatefulSetRevision",
    "WorkerView",
    "held_by_rollout",
    "operator_hold",
    "phase_of",
]
