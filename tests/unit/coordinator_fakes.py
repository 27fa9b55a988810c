"""Fakes of a coordinator's parts for unit tests of its passes and terms; one shared module.

SLURM, the state store, the K8s writers and Events as recording fakes typed against the
ports (``slonkd.adapters.kube.ports``, the SLURM port of ``slonkd.adapters.slurm.backend``),
the elector, and :func:`coordinator_with`, a :class:`~slonkd.runtime.coordinating.Coordinator`
built on them with its informers' caches filled by hand. Used by ``test_coordinator_pass``,
``test_coordinator_term_start`` and ``_end``, ``test_coordinator_first_pass``,
``test_budget_gate``, ``test_rollout_pause``, ``test_log_context``, ``test_slurm_port`` and
others. Below them, the views :func:`~slonkd.core.decide.decide` is given (:func:`view` of
worker w-0 with its :func:`slurm` node, :func:`pod` and :func:`knode`, :data:`POLICY` at
:data:`NOW`), used by ``test_decide*``, ``test_status``, ``test_job_outcomes``,
``test_job_places``, ``test_revalidation`` and two contract tests. No test lives here, and
no test imports another test file for a fake. Neighbours: :mod:`tests.unit.pods`
(:func:`~tests.unit.pods.running_pod`), :mod:`slonkd_sandbox.fleet` (the fleets of the
end-to-end tests and benchmarks).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from slonkd.adapters.kube.informer import Informer
from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.lease import LeaderElector
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.parsing_sdiag import SlurmctldStats
from slonkd.adapters.slurm.results import UpdateResult
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.errors import ParseError, TerminalError, TransientError
from slonkd.core.health import ok
from slonkd.core.kube_actions import FAILURE_TAINT
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult, ObjectRef
from slonkd.core.kube_objects import (
    CORDONED_BY_ANNOTATION,
    HOLD_KEY,
    SLURM_HEALTHY,
    TAINTS_BY_ANNOTATION,
    KubeNodeName,
    Node,
    NodeCondition,
    Pod,
    PodName,
    PodPhase,
    Taint,
    TaintEffect,
    encode_taint_record,
)
from slonkd.core.plan import NodeView, Plan, Policy, Writer
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName, NodeState, SlurmNode
from slonkd.runtime.coordinating import Coordinator, CoordinatorSettings, Parts
from slonkd.runtime.coordinating.slurm_watch import SlurmChange
from tests.unit.pods import running_pod

TOKEN = 7


class FakeElector:
    """Holds the lease with token 7 (or not, when ``valid`` is False)."""

    holder = "c-0"

    def __init__(self) -> None:
        self.valid = True

    def is_valid(self) -> bool:
        """Whether the lease is held."""
        return self.valid

    def check_valid(self) -> int:
        """The fencing token, or TerminalError."""
        if not self.valid:
            raise TerminalError("lease not held")
        return TOKEN


class FakeSlurm:
    """Nodes as given; drains for causes in ``failing`` raise a transient error."""

    def __init__(self, nodes: list[SlurmNode], failing: set[str]) -> None:
        self.nodes = nodes
        self.failing = failing
        self.drained: list[tuple[str, list[str]]] = []
        self.resumed: list[tuple[str, list[str]]] = []
        self.reads = 0

    async def read_nodes(self, names: Sequence[str] = ()) -> list[SlurmNode]:
        """Every node, counted."""
        self.reads += 1
        return list(self.nodes)

    async def drain(self, names: Sequence[str], cause: Cause, text: str = "") -> UpdateResult:
        """Drain, or fail for a cause in ``failing``."""
        if str(cause) in self.failing:
            raise TransientError(f"scontrol update failed for {cause}")
        self.drained.append((str(cause), list(names)))
        return UpdateResult(changed=tuple(NodeName(n) for n in names), calls=1)

    async def resume(self, names: Sequence[str], cause: Cause) -> UpdateResult:
        """Release ``cause`` (recorded; the nodes' reasons are left as given)."""
        self.resumed.append((str(cause), list(names)))
        return UpdateResult(changed=tuple(NodeName(n) for n in names), calls=1)

    async def diag(self) -> SlurmctldStats:
        """slurmctld's statistics: none (the fleet's sdiag poll counts a failed read)."""
        raise ParseError("fake SLURM: no sdiag")


class FakeStore:
    """The state ConfigMap: an empty state, writes applied in memory."""

    def __init__(self) -> None:
        self.state = CoordinatorState()

    async def load(self) -> CoordinatorState:
        """The state."""
        return self.state

    async def update(
        self, token: int, change: Callable[[CoordinatorState], CoordinatorState]
    ) -> CoordinatorState:
        """Apply ``change``."""
        self.state = change(self.state)
        return self.state


class FakeNodeWriter:
    """Records K8s node writes; cordons of nodes in ``failing`` raise."""

    def __init__(self, failing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.calls: list[tuple[str, str]] = []
        self.failing = set(failing)
        self.joined: list[str] = []
        """Nodes cordoned and tainted in one write."""
        self.cache: dict[str, Node] = {}
        """The coordinator's node informer cache: a cordon shows there, as a watch would."""

    async def _do(self, what: str, name: str) -> ChangeResult:
        if name in self.failing:
            raise TransientError(f"{what} {name}: apiserver said no")
        self.calls.append((what, name))
        return ChangeResult(outcome=ChangeOutcome.CHANGED)

    async def cordon(self, name: str, *, cause: str) -> ChangeResult:
        """Cordon."""
        result = await self._do("cordon", name)
        node = self.cache[name]
        annotations = {**node.annotations, CORDONED_BY_ANNOTATION: cause}
        self.cache[name] = replace(node, unschedulable=True, annotations=annotations)
        return result

    async def uncordon(self, name: str) -> ChangeResult:
        """Uncordon."""
        return await self._do("uncordon", name)

    async def cordon_and_taint(
        self, name: str, *, cause: str, key: str, effect: TaintEffect, value: str = ""
    ) -> tuple[ChangeResult, ChangeResult]:
        """Cordon and taint in one write (recorded as both, and as the joined write)."""
        self.joined.append(name)
        return await self.cordon(name, cause=cause), await self.set_taint(name, key, effect, value)

    async def set_taint(
        self, name: str, key: str, effect: TaintEffect, value: str = ""
    ) -> ChangeResult:
        """Taint."""
        return await self._do(f"taint {key}", name)

    async def remove_taint(
        self, name: str, key: str, effect: TaintEffect | None = None
    ) -> ChangeResult:
        """Untaint."""
        return await self._do(f"untaint {key}", name)

    async def set_annotations(
        self, name: str, annotations: Mapping[str, str | None]
    ) -> ChangeResult:
        """Annotations."""
        return await self._do("annotate", name)

    async def set_slurm_healthy(
        self, name: str, *, healthy: bool, reason: str, message: str = ""
    ) -> ChangeResult:
        """The SlurmHealthy condition."""
        return await self._do("condition", name)


class FakePodWriter:
    """Records evictions."""

    def __init__(self) -> None:
        self.evicted: list[str] = []

    async def evict(
        self, namespace: str, name: str, *, uid: str = "", grace_s: int | None = None
    ) -> ChangeResult:
        """Evict."""
        self.evicted.append(name)
        return ChangeResult(outcome=ChangeOutcome.CHANGED)


class FakeEvents:
    """Records Events."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def record(
        self, target: ObjectRef, *, type_: str, reason: str, message: str
    ) -> ChangeResult:
        """One Event."""
        self.reasons.append(reason)
        return ChangeResult(outcome=ChangeOutcome.CHANGED)


def worker_pod(i: int) -> Pod:
    """Worker w-i's pod, Running and Ready on kn-i."""
    return running_pod(f"w-{i}", uid=f"u{i}", on=f"kn-{i}", ready_since="2026-01-01T00:00:00Z")


def slurm_node(i: int, state: str = "IDLE", reason: str = "") -> SlurmNode:
    """SLURM node w-i in ``state`` (tokens joined by +) with ``reason``."""
    base, *flags = state.split("+")
    return SlurmNode(
        name=NodeName(f"w-{i}"), state=NodeState.from_tokens(base, flags), reason=reason
    )


def leader_on(
    settings: CoordinatorSettings,
    slurm: FakeSlurm,
    writer: FakeNodeWriter | None = None,
    *,
    pods: FakePodWriter | None = None,
    store: FakeStore | None = None,
) -> Coordinator:
    """A coordinator of ``settings`` on these fakes (new ones where None); caches empty."""
    transport = KubeTransport(ApiEndpoint(server="http://127.0.0.1:9"))  # never contacted
    parts = Parts(
        slurm=cast(SlurmBackend, slurm),  # reads and the writes a pass makes, no more
        nodes=writer or FakeNodeWriter(),
        pods=pods or FakePodWriter(),
        events=FakeEvents(),
        store=store or FakeStore(),
    )
    return Coordinator(settings, transport, cast(LeaderElector, FakeElector()), parts=parts)


def coordinator_with(
    slurm: FakeSlurm,
    writer: FakeNodeWriter,
    nodes: list[Node],
    *,
    pods: FakePodWriter | None = None,
    store: FakeStore | None = None,
    **budget: Any,
) -> Coordinator:
    """A coordinator on these fakes, its informers' caches filled with the nodes' pods."""
    limits: dict[str, Any] = {
        "max_out": 10, "max_out_percent": 100, "mass_percent": 100, "poll_s": 0, **budget
    }  # fmt: skip
    settings = CoordinatorSettings(namespace="slonk", identity="c-0", rollout=None, **limits)
    c = leader_on(settings, slurm, writer, pods=pods, store=store)
    c.pods._cache = {f"slonk/w-{i}": worker_pod(i) for i in range(len(nodes))}
    c.nodes._cache = {n.name: n for n in nodes}
    writer.cache = c.nodes._cache
    return c


def saw(c: Coordinator, nodes: Sequence[SlurmNode]) -> None:
    """The poll saw these nodes change, now: their change on the term's queue, the loop woken."""
    c.changes.put_nowait(SlurmChange(tuple(nodes), time.monotonic()))
    c.observer.dirty.set()


def kube_node(i: int, *, cordoned: bool = False, taint: str = "") -> Node:
    """K8s node kn-i, maybe cordoned by slonkd or carrying a NoSchedule ``taint``."""
    taints = (Taint(key=taint, effect=TaintEffect.NO_SCHEDULE),) if taint else ()
    return Node(
        name=KubeNodeName(f"kn-{i}"),
        uid=f"n{i}",
        resource_version="1",
        unschedulable=cordoned,
        taints=taints,
    )


class AuditRecorder:
    """Keeps the audit records of a pass."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def record(self, **entry: Any) -> None:
        """One record."""
        self.records.append(entry)


def listed_at_once(informer: Informer[Any]) -> Callable[[], Coroutine[Any, Any, None]]:
    """An informer run that has listed at once and then watches until cancelled."""

    async def run() -> None:
        informer.synced.set()
        await asyncio.Event().wait()

    return run


# -- the views decide() and its users are given: one worker w-0 on K8s node kn-0 --------------

NOW = 10_000.0
POLICY = Policy(failure_grace_s=120, unready_grace_s=60)


def slurm(state: str = "IDLE", reason: str = "", causes: tuple[str, ...] = ()) -> SlurmNode:
    """A SLURM node w-0 in ``state`` with ``reason`` and slonkd causes in extra."""
    base, *flags = state.split("+")
    extra = json.dumps({"slonkd": list(causes)}) if causes else ""
    return SlurmNode(
        name=NodeName("w-0"), state=NodeState.from_tokens(base, flags), reason=reason, extra=extra
    )


def pod(
    *,
    ready: bool = True,
    terminating: bool = False,
    phase: PodPhase = PodPhase.RUNNING,
    name: str = "w-0",
    on: str = "kn-0",
) -> Pod:
    """Worker pod ``name`` (w-0) on K8s node ``on`` (kn-0)."""
    return Pod(
        name=PodName(name),
        namespace="slonk",
        uid="u1",
        resource_version="1",
        node_name=KubeNodeName(on),
        phase=phase,
        ready=ready,
        deletion_timestamp="2026-11-30T00:00:00Z" if terminating else None,
    )


def knode(
    *,
    cordoned: bool = False,
    by_slonkd: bool = False,
    taints: tuple[Taint, ...] = (),
    ready: bool = True,
    held: bool = False,
    healthy: bool | None = None,
    deleting: bool = False,
    added: tuple[Taint, ...] | None = None,
    name: str = "kn-0",
) -> Node:
    """K8s node ``name`` (kn-0) with the given marks.

    ``added``: the taints slonkd's record lists (None: every ``slonk.dev/`` one in ``taints``).
    """
    conditions = [NodeCondition(type="Ready", status="True" if ready else "False")]
    if healthy is not None:
        conditions.append(NodeCondition(type=SLURM_HEALTHY, status="True" if healthy else "False"))
    annotations = {CORDONED_BY_ANNOTATION: "slonkd"} if by_slonkd else {}
    record = encode_taint_record(
        t.identity for t in (added if added is not None else taints) if t.slonk_key
    )
    if record is not None:
        annotations[TAINTS_BY_ANNOTATION] = record
    return Node(
        name=KubeNodeName(name),
        uid="n1",
        resource_version="1",
        unschedulable=cordoned,
        taints=taints,
        conditions=tuple(conditions),
        annotations=annotations,
        labels={HOLD_KEY: "true"} if held else {},
        deletion_timestamp="2026-11-30T00:00:00Z" if deleting else None,
    )


def view(**kw: Any) -> NodeView:
    """A settled healthy view, with ``kw`` overriding fields."""
    base: dict[str, Any] = {
        "node": NodeName("w-0"),
        "now": NOW,
        "slurm": slurm(),
        "pod": pod(),
        "kube_node": knode(),
        "pod_ready_since": NOW - 3600,
        "health": {"gpu": ok("gpu")},
    }
    base.update(kw)
    return NodeView(**base)


def kinds(plan: Plan, writer: Writer | None = None) -> list[tuple[str, str]]:
    """(kind, cause) of a plan's actions, optionally of one writer."""
    return [
        (a.kind.value, str(a.cause)) for a in plan.actions if writer is None or a.writer is writer
    ]


# -- quarantined hardware: a K8s node slonkd marked, for test_quarantine and its users --------


def quarantine_taint(key: str, value: str = "health.gpu-xid-79") -> Taint:
    """A NoSchedule taint ``key`` with slonkd's kind of value."""
    return Taint(key=key, effect=TaintEffect.NO_SCHEDULE, value=value)


def marked_node(
    name: str = "kn-0",
    *,
    ours: tuple[str, ...] = (FAILURE_TAINT,),
    foreign: tuple[Taint, ...] = (),
    cordon: str | None = "health:gpu-xid-79 node=w-0",
    unschedulable: bool = True,
    condition: bool = True,
    annotations: dict[str, str] | None = None,
) -> Node:
    """A K8s node with slonkd's marks (``ours`` taints, its cordon, the condition)."""
    added = tuple(quarantine_taint(k) for k in ours)
    node = knode(name=name, cordoned=unschedulable, taints=added + foreign, added=added)
    notes = {**node.annotations, **(annotations or {})}
    if cordon is not None:
        notes[CORDONED_BY_ANNOTATION] = cordon
    failing = NodeCondition(
        type=SLURM_HEALTHY,
        status="False",
        message="health:gpu-xid-79",
        last_transition_time="2026-12-01T09:00:00Z",
    )
    conditions = (*node.conditions, failing) if condition else node.conditions
    return replace(node, uid="u", annotations=notes, conditions=conditions)
