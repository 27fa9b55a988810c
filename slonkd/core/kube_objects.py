"""What slonkd knows of a Kubernetes Pod and Node: small, immutable, library-free values.

The Kubernetes adapter builds these from the apiserver's raw JSON and keeps only the fields
slonkd decides on; nothing here knows about HTTP, watches or client libraries, and no
``V1Pod``/``V1Node`` ever travels past the adapter. Ownership marks (the cordon annotation,
the record of the taints slonkd added, the ``SlurmHealthy`` condition) are defined here so
that the decision core and the adapter agree on them.

What is slonkd's on a K8s node, and what is an operator's:

- A taint is slonkd's only if slonkd's record (:data:`TAINTS_BY_ANNOTATION`) lists that
  exact taint (key, effect and value) and the node carries it. A ``slonk.dev/`` key alone
  proves nothing: an operator may put ``slonk.dev/manual-repair`` or ``slonk.dev/unhealthy``
  on a node by hand, or change the value of slonkd's taint; slonkd never removes those.
- A cordon is slonkd's only if it carries :data:`CORDONED_BY_ANNOTATION` and slonkd's field
  manager alone owns ``spec.unschedulable`` (the adapter checks managedFields). ``kubectl
  cordon`` on a node that is already cordoned sends nothing (kubectl compares first), so the
  apiserver records nothing and that cordon cannot be told from slonkd's: an operator who
  wants to keep a cordon slonkd made puts the node on hold (:data:`HOLD_KEY`), or takes the
  cordon over by removing slonkd's annotation (``kubectl annotate node N
  slonk.dev/cordoned-by-``), or uncordons and cordons again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

PodName = NewType("PodName", str)
KubeNodeName = NewType("KubeNodeName", str)

SLONK_PREFIX = "slonk.dev/"
"""Every label, annotation and taint key slonkd writes starts with this."""

CORDONED_BY_ANNOTATION = "slonk.dev/cordoned-by"
"""Set when slonkd cordoned a node; its value is slonkd's cause for the cordon and the SLURM
node whose failure it is for (:func:`cordon_mark`); values written before that record name
no SLURM node."""

_MARKED_FOR = " node="


def cordon_mark(cause: str, slurm_node: str) -> str:
    """The value of :data:`CORDONED_BY_ANNOTATION` for a cordon for ``slurm_node``'s ``cause``."""
    return f"{cause}{_MARKED_FOR}{slurm_node}"


TAINTS_BY_ANNOTATION = "slonk.dev/taints-added"
"""slonkd's record of the taints it added to the node: a JSON list of
``{"key", "effect", "value"}`` objects, written in the same patch as the taints."""

HOLD_KEY = "slonk.dev/hold"
"""Label or annotation by which an operator tells slonkd to leave a node alone."""

WORKER_LABELS = {"app.kubernetes.io/name": "slurmd"}
"""The labels of a worker pod (slurmd, the agent beside it) as the chart sets them."""

WORKER_SELECTOR = ",".join(f"{k}={v}" for k, v in WORKER_LABELS.items())
"""The label selector of the worker pods: the coordinator's default ``pod_selector``."""

SLURM_HEALTHY = "SlurmHealthy"
"""The NodeCondition type slonkd owns on the Node status."""


class PodPhase(StrEnum):
    """The pod phases the apiserver reports."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class TaintEffect(StrEnum):
    """What a taint does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    """How a toleration compares a taint's value (Kubernetes: no operator means Equal)."""

    EQUAL = "Equal"
    EXISTS = "Exists"


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    """One entry of a pod's ``spec.tolerations``, as Kubernetes defines it.

    Which taints it makes the pool's nature rather than maintenance is
    :mod:`slonkd.core.tolerations`' to say.
    """

    key: str = ""
    """Empty: every key (only with Exists: a wildcard)."""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None
    """None: every effect (Kubernetes' empty effect)."""
    seconds: int | None = None
    """``tolerationSeconds``: how long a NoExecute taint lets the pod stay (None: for ever)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerState:
    """One container of a pod: is it ready, how often has it restarted."""

    name: str
    ready: bool
    restart_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    """A worker pod as slonkd sees it."""

    name: PodName
    namespace: str
    uid: str
    resource_version: str
    node_name: KubeNodeName | None
    phase: PodPhase
    ready: bool
    ready_since: str | None = None
    """When the Ready condition last became True (RFC 3339), as the kubelet reported it."""
    deletion_timestamp: str | None = None
    deletion_grace_s: int | None = None
    termination_grace_s: int | None = None
    containers: tuple[ContainerState, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    disruption: str | None = None
    """The reason of the pod's ``DisruptionTarget`` condition (True): who ends it and why,
    e.g. ``PreemptionByScheduler``; None when it has none (a plain DELETE)."""
    disruption_since: str | None = None
    """When that condition became True (RFC 3339), as its ``lastTransitionTime`` says."""
    created: str | None = None
    """``metadata.creationTimestamp`` (RFC 3339): where a job of a given time ran
    (:mod:`slonkd.core.job_places`)."""
    tolerations: tuple[Toleration, ...] = ()
    """``spec.tolerations`` (those that could be read): the taints its pool runs under."""

    @property
    def terminating(self) -> bool:
        """True once the pod has been asked to go away."""
        return self.deletion_timestamp is not None

    @property
    def restarts(self) -> int:
        """Restarts summed over the pod's containers."""
        return sum(c.restart_count for c in self.containers)


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    """A node taint. Whose it is is the node's record's to say (:attr:`Node.our_taints`)."""

    key: str
    effect: TaintEffect
    value: str = ""
    time_added: str | None = None

    @property
    def slonk_key(self) -> bool:
        """True if the key is under :data:`SLONK_PREFIX` (slonkd's or an operator's)."""
        return self.key.startswith(SLONK_PREFIX)

    @property
    def identity(self) -> tuple[str, str, str]:
        """(key, effect, value): what slonkd's record compares."""
        return (self.key, str(self.effect), self.value)


def decode_taint_record(text: str | None) -> frozenset[tuple[str, str, str]]:
    """The taints slonkd's record lists; anything unreadable lists nothing (nothing is ours)."""
    if not text:
        return frozenset()
    try:
        raw = json.loads(text)
    except ValueError:
        return frozenset()
    if not isinstance(raw, list):
        return frozenset()
    out = set()
    for entry in raw:
        if not isinstance(entry, dict):
            continue
        key, effect, value = entry.get("key"), entry.get("effect"), entry.get("value", "")
        if isinstance(key, str) and isinstance(effect, str) and isinstance(value, str):
            out.add((key, effect, value))
    return frozenset(out)


def encode_taint_record(taints: Iterable[tuple[str, str, str]]) -> str | None:
    """The record's annotation value (None: nothing recorded, the annotation goes)."""
    entries = [{"key": k, "effect": e, "value": v} for k, e, v in sorted(set(taints))]
    return json.dumps(entries, separators=(",", ":")) if entries else None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeCondition:
    """One entry of a node's status.conditions."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A Kubernetes node as slonkd sees it."""

    name: KubeNodeName
    uid: str
    resource_version: str
    unschedulable: bool
    taints: tuple[Taint, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    deletion_timestamp: str | None = None

    our_taints: tuple[Taint, ...] = field(init=False, repr=False, compare=False)
    """The taints slonkd added and that are still exactly as it added them."""
    ready: bool | None = field(init=False, repr=False, compare=False)
    """Ready=True -> True, False/Unknown -> False, no Ready condition -> None."""
    slurm_healthy: bool | None = field(init=False, repr=False, compare=False)
    """slonkd's own SlurmHealthy condition, None while slonkd has not set it."""

    def __post_init__(self) -> None:
        # Derived once per informer event, not once per question of a pass (issue 17).
        record = decode_taint_record(self.annotations.get(TAINTS_BY_ANNOTATION))
        ours = tuple(t for t in self.taints if t.identity in record)
        object.__setattr__(self, "our_taints", ours)
        for name, type_ in (("ready", "Ready"), ("slurm_healthy", SLURM_HEALTHY)):
            cond = self.condition(type_)
            object.__setattr__(self, name, None if cond is None else cond.status == "True")

    def condition(self, type_: str) -> NodeCondition | None:
        """The condition of that type, if the node reports it."""
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def cordoned_by_slonkd(self) -> bool:
        """True if the node carries slonkd's cordon mark (the adapter checks it still holds)."""
        return CORDONED_BY_ANNOTATION in self.annotations

    @property
    def marked_for(self) -> str | None:
        """The SLURM node whose failure slonkd's cordon is for (None: no cordon or no record)."""
        value = self.annotations.get(CORDONED_BY_ANNOTATION)
        if value is None or _MARKED_FOR not in value:
            return None
        node = value.rpartition(_MARKED_FOR)[2]
        return node if node and not any(c.isspace() for c in node) else None

    @property
    def held(self) -> bool:
        """True if an operator put the node on hold (label or annotation)."""
        return HOLD_KEY in self.labels or HOLD_KEY in self.annotations


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenIdentity:
    """Who a ServiceAccount token belongs to, as TokenReview answered."""

    authenticated: bool
    username: str = ""
    namespace: str = ""
    service_account: str = ""
    pod_name: PodName | None = None
    pod_uid: str = ""
    error: str = ""
    audiences: tuple[str, ...] = ()
    """``status.audiences``: what the authenticator says the token is valid for."""
