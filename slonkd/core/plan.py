"""The vocabulary of a decision: what slonkd knows about one node, and what it plans to do.

A :class:`NodeView` is a frozen snapshot of everything slonkd knows about one node (the
worker pod, the Kubernetes node it runs on, the SLURM node, health verdicts, the operator's
hold and pause, remediation and revalidation history), built by the coordinator
(:mod:`slonkd.runtime.coordinating.observing`) and the agent (:mod:`slonkd.runtime.agent.sidecar`).
:func:`slonkd.core.decide.decide` turns one view and the :class:`Policy` into a :class:`Plan`:
:class:`Action` s, each with its :class:`Kind`, its cause, its :class:`Writer` and whether it
counts against the disruption budget. :mod:`slonkd.core.kube_actions` plans the Kubernetes
side, :mod:`slonkd.core.fleet_decide` merges the plans of nodes that share a K8s node,
:mod:`slonkd.core.revalidation` judges a node's return, and the executors
(:mod:`slonkd.runtime.coordinating.executing`, the agent) carry out the actions of their
own writer. Types only: the rules live in those modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from slonkd.core.config_tree import setting
from slonkd.core.coordinator_state import Attempts
from slonkd.core.health import CheckResult
from slonkd.core.kube_objects import Node, Pod
from slonkd.core.reasons import Cause
from slonkd.core.revalidation import Answer, Judgement, Pending, RevalidationPolicy
from slonkd.core.slurm_node import NodeName, SlurmNode


class Writer(StrEnum):
    """Who executes an action."""

    AGENT = "agent"
    COORDINATOR = "coordinator"


class Kind(StrEnum):
    """What an action does."""

    DRAIN = "drain"
    DOWN = "down"
    REQUEUE = "requeue"
    RELEASE = "release"
    """Remove one slonkd cause; the adapter resumes the node when none is left."""
    CORDON = "cordon"
    UNCORDON = "uncordon"
    TAINT = "taint"
    UNTAINT = "untaint"
    SET_CONDITION = "set-condition"
    EVENT = "event"
    EVICT = "evict"
    REQUEST_REBOOT = "request-reboot"
    MARK_MANUAL = "mark-manual"


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One change, with its cause, writer and budget accounting."""

    kind: Kind
    writer: Writer
    cause: Cause
    budgeted: bool = False
    """Counts against the disruption budget (takes a node out automatically)."""
    key: str = ""
    """Taint key, condition status, or event reason, depending on ``kind``."""
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The actions for one node and the notes that explain what was left alone."""

    node: NodeName
    actions: tuple[Action, ...] = ()
    notes: tuple[str, ...] = ()
    failure: Cause | None = None
    """The failure this node's K8s node is marked for (SLURM-reported or health)."""
    revalidation: Judgement | None = None
    """The revalidation of a node held ``revalidating`` (None: none in progress)."""

    def for_writer(self, writer: Writer) -> tuple[Action, ...]:
        """The actions ``writer`` executes."""
        return tuple(a for a in self.actions if a.writer is writer)


Remediations = Attempts
"""What slonkd already tried on this K8s node: the coordinator's state keeps it per K8s node
(in Kubernetes, so it survives failover) and each view carries it as it is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeView:
    """Everything known about one node at one moment; ``None`` means not seen / unknown."""

    node: NodeName
    now: float
    slurm: SlurmNode | None
    pod: Pod | None
    kube_node: Node | None
    pod_ready_since: float | None = None
    """When the pod last became Running and Ready (None: it is not)."""
    pod_unready_since: float | None = None
    """When the pod last stopped being Ready (None: it is Ready, or never was)."""
    health: Mapping[str, CheckResult] = field(default_factory=dict)
    handled_failure: str = ""
    """Fingerprint of a SLURM failure already remediated (on the hardware the pod left)."""
    paused: bool = False
    remediation: Remediations = field(default_factory=Remediations)
    job_blame: str = ""
    """The evidence that blames the node for failed jobs ("" : not blamed), see
    :mod:`slonkd.core.job_blame`."""
    revalidation: Pending | None = None
    """The node's revalidation in progress, as the state ConfigMap keeps it."""
    recheck: Answer | None = None
    """The latest status of the node's agent that answered a recheck command."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Tunables of the rules (settings)."""

    failure_grace_s: float = field(default=120.0, metadata=setting(old_key="failure_grace_s"))
    """A pod must be Running and Ready this long before SLURM's failure counts as one."""
    unready_grace_s: float = field(default=60.0, metadata=setting(old_key="unready_grace_s"))
    """A pod absent or not Ready this long gets its node drained by the coordinator."""
    remediation_cooldown_s: float = field(
        default=900.0, metadata=setting(old_key="remediation_cooldown_s")
    )
    """The remediation ladder's next rung on a K8s node waits this long after the last one."""
    remediate: bool = field(default=True, metadata=setting(old_key="remediate"))
    """Take the ladder's steps (eviction, reboot request, manual repair); off: marks only."""
    revalidation: RevalidationPolicy = field(default_factory=RevalidationPolicy)
    """Proof of health before return (formerly the flat ``revalidate*`` keys)."""


__all__ = ["Action", "Kind", "NodeView", "Plan", "Policy", "Remediations", "Writer"]
