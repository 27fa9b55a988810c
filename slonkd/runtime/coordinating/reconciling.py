"""The coordinator: one leader that reconciles every worker node in bulk.

While it holds the Lease it watches every K8s node and the worker pods, reads all SLURM
nodes in one call per pass (on events, debounced, and on a resync period), builds a
:class:`~slonkd.core.decide.NodeView` per worker pod (SLURM node = pod name, K8s node =
the pod's node), calls ``decide`` and executes the coordinator's actions: SLURM drains,
downs and releases grouped by cause into hostlist calls; cordons, taints, the
``SlurmHealthy`` condition, Events and evictions per K8s node. It acts only after its
caches synced and a SLURM read succeeded, checks its lease right before each write batch
(a paused old leader writes nothing), and keeps a disruption budget per pool
(:mod:`slonkd.core.budget`): automated actions past it are refused, the breaker opens and
stays open until ``slonkd budget reset``. Breaker, pause and remediation history live in the
state ConfigMap (:class:`~slonkd.adapters.kube.state.StateStore`), so a failover neither
resets nor repeats them. Every action goes to the audit log; ``dry_run`` logs the plans and
writes nothing. The last pass is kept as a :class:`Snapshot` for ``slonkd status`` and
``slonkd explain``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import defaultdict
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from slonkd.adapters.bus.client import Bus
from slonkd.adapters.kube.events import EventRecorder
from slonkd.adapters.kube.informer import CacheEvent, Informer
from slonkd.adapters.kube.lease import LeaderElector, Superseded
from slonkd.adapters.kube.nodes import NodeWriter
from slonkd.adapters.kube.pods import PodWriter
from slonkd.adapters.kube.sources import coordinator_informers
from slonkd.adapters.kube.state import FencedError, StateStore
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.adapters.slurm.scontrol import ScontrolBackend, UpdateResult
from slonkd.core.budget import (
    Admission,
    BudgetPolicy,
    Request,
    admit,
    budget_group,
)
from slonkd.core.coordinator_state import Attempts, CoordinatorState, StateCorrupt
from slonkd.core.decide import (
    MANUAL_TAINT,
    REBOOT_TAINT,
    Action,
    Kind,
    NodeView,
    Plan,
    Remediations,
    Writer,
    decide,
    failure_fingerprint,
    merge_shared_nodes,
    suspect_common_causes,
)
from slonkd.core.errors import SlonkdError, TransientError
from slonkd.core.health import CheckResult, decode_verdict
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult, ObjectRef
from slonkd.core.kube_objects import Node, Pod, PodPhase, TaintEffect
from slonkd.core.messages import (
    AgentStatus,
    CoordinatorStatus,
    SlurmEvent,
    coordinator_topic,
    slurm_events_topic,
)
from slonkd.core.reasons import Cause, ReasonOwner, reason_owner
from slonkd.core.slurm_node import NodeFlag, NodeName, SlurmNode
from slonkd.runtime.audit import AuditLog, DryRunSeen
from slonkd.runtime.commands import CommandSender
from slonkd.runtime.coordinating.settings import CoordinatorSettings
from slonkd.runtime.coordinator_api import CoordinatorAPI
from slonkd.runtime.credentials import (
    coordinator_bus_credentials,
    credential_issuer,
    credential_reaper,
)
from slonkd.runtime.metrics import Metrics
from slonkd.runtime.process import cancel_within, exit_now, stop_on_signals
from slonkd.runtime.rollout import RolloutController
from slonkd.runtime.settle import settle
from slonkd.runtime.slurm_watch import ReadLimiter, SlurmWatch
from slonkd.runtime.topology_sync import TopologySync

log = structlog.get_logger("slonkd.coordinator")


@dataclass(slots=True)
class _Seen:
    ready_since: float | None = None
    unready_since: float | None = None
    uid: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The views, plans and budget of the last pass (for status and explain)."""

    at: float
    views: tuple[NodeView, ...]
    plans: tuple[Plan, ...]
    admission: Admission
    state: CoordinatorState
    fencing_token: int
    duration_ms: float = 0.0
    phases_ms: dict[str, float] = field(default_factory=dict)


_MARKS = frozenset({Kind.CORDON, Kind.TAINT, Kind.SET_CONDITION, Kind.EVENT})
"""What the fast path may do: mark a K8s node (undone when healthy), never evict or drain."""
SLURM_REBOOT = "slurm-reboot"
"""Audit action of a reboot step's SLURM half (``scontrol reboot ASAP``), next to its K8s half."""


def _is_out(view: NodeView) -> bool:
    """Taken out by someone: drained in SLURM, its K8s node cordoned, or tainted by slonkd.

    slonkd's NoSchedule taints keep the worker pod from coming back, so a node carrying one
    is out even when it is not cordoned.

    A node that SLURM itself marks DOWN or FAIL is not counted until someone takes it out:
    marking it is what the budget must weigh (a slurmctld outage makes every node
    "Not responding" at once, and that must not cordon the fleet).
    """
    slurm_out = view.slurm is not None and NodeFlag.DRAIN in view.slurm.state.flags
    kube = view.kube_node
    kube_out = kube is not None and (
        kube.unschedulable or any(t.effect is TaintEffect.NO_SCHEDULE for t in kube.our_taints)
    )
    return slurm_out or kube_out


def _same(old: Any, new: Any) -> bool:
    """Equal but for the resourceVersion (a heartbeat changes nothing slonkd looks at)."""
    return bool(replace(old, resource_version="") == replace(new, resource_version=""))


def _epoch(stamp: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time from the apiserver (None if unreadable)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _slurm_text(node: SlurmNode | None) -> str:
    if node is None:
        return "unread"
    return f"{node.state} reason={node.live_reason!r}"


def _kube_text(node: Node) -> str:
    taints = ",".join(sorted(t.key for t in node.taints))
    return f"unschedulable={node.unschedulable} taints=[{taints}] ready={node.ready}"


def label_value(text: str) -> str:
    """``text`` as a valid label (and taint) value: ``[A-Za-z0-9._-]``, 63 chars, alnum ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", ".", text)[:63].strip("._-")
    return cleaned or "slonkd"


class Coordinator:
    """The leader's reconcile passes over all worker nodes."""

    def __init__(
        self,
        s: CoordinatorSettings,
        transport: KubeTransport,
        elector: LeaderElector,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self.s = s
        self.elector = elector
        self.metrics = metrics or Metrics(role="coordinator")
        self.slurm: SlurmBackend = ScontrolBackend(s.slurm)
        self.node_writer = NodeWriter(transport)
        self.pod_writer = PodWriter(transport)
        self.events = EventRecorder(transport)
        self.nodes: Informer[Node]
        self.pods: Informer[Pod]
        self.nodes, self.pods = coordinator_informers(
            transport, s.namespace, pod_selector=s.pod_selector
        )
        self._dirty = asyncio.Event()
        self._seen: dict[str, _Seen] = defaultdict(_Seen)
        self.store = StateStore(transport, s.namespace, s.state_name)
        self.state = CoordinatorState()
        """Breaker, pause, remediation history and handled failures, as last read/written."""
        self._state_error = ""
        """Why the state ConfigMap is unreadable ("": it is readable); see _state_unreadable."""
        self.budget = BudgetPolicy(
            max_out=s.max_out, max_out_percent=s.max_out_percent, mass_percent=s.mass_percent
        )
        self.audit = AuditLog(
            Path(s.audit_path) if s.audit_path else None,
            identity=s.identity,
            max_bytes=s.audit_max_bytes,
            keep=s.audit_keep,
        )
        self.dry_run_seen = DryRunSeen()
        self.snapshot: Snapshot | None = None
        self.reads = ReadLimiter(s.max_reads_per_s, on_read=self.metrics.slurm_reads.inc)
        self.watch = (
            SlurmWatch(self.slurm, self.reads, self._on_slurm_change, poll_s=s.poll_s)
            if s.poll_s > 0
            else None
        )
        self._refused: dict[str, str] = {}
        self._standing: frozenset[str] = frozenset()
        """Candidates held back by the breaker when a human reset it (see ``admit``)."""
        self._fresh: list[SlurmNode] = []
        """Nodes whose reason or state the poll saw change since the last pass (fast path)."""
        self._last_slurm: list[SlurmNode] | None = None
        self.passes = 0
        self.health: dict[str, tuple[str, dict[str, CheckResult]]] = {}
        """Latest verdicts per SLURM node from its agent's retained status (absent: unknown)."""
        self.suspected: frozenset[Cause] = frozenset()
        self.bus: Bus | None = None
        if s.bus is not None:
            topic = f"slonk/v1/{s.cluster}/nodes/+/status"
            own = None  # no MQTT user but a dynsec admin: this replica makes its own client
            if s.credentials is not None and not s.bus.username:
                own = coordinator_bus_credentials(
                    s.credentials, cluster=s.cluster, identity=s.identity,
                    client_id=s.bus.client_id,
                )  # fmt: skip
            subscriptions = [topic, str(slurm_events_topic(s.cluster))]
            gone = CoordinatorStatus(online=False, leader=s.identity, at=time.time())
            self.bus = Bus(
                s.bus,
                subscriptions=subscriptions,
                credentials=own,
                will=(coordinator_topic(s.cluster), gone),  # the leader died: agents see it
            )
        self.commands = (  # fenced commands to agents (recheck); see slonkd.runtime.commands
            CommandSender(
                self.bus, cluster=s.cluster, identity=s.identity, check_valid=elector.check_valid
            )
            if self.bus is not None
            else None
        )
        self.nodes.add_handler(self._on_node_change)
        self.pods.add_handler(self._on_change)
        self.reaper = (  # revokes gone pods' MQTT clients; see slonkd.runtime.credential_reaper
            credential_reaper(s.credentials, transport, s.namespace, s.pod_selector, self.pods,
                              s.identity)
            if s.credentials is not None
            else None
        )  # fmt: skip
        if self.reaper is not None:
            self.pods.add_handler(self.reaper.on_pod_event)
        self.topology: TopologySync | None = None
        if s.topology is not None:
            self.topology = TopologySync(
                s.topology, transport=transport, namespace=s.namespace, nodes=self.nodes,
                pods=self.pods, slurm=self.slurm, check_valid=elector.check_valid,
            )  # fmt: skip
        self.rollout: RolloutController | None = None
        if s.rollout is not None:
            self.rollout = RolloutController(
                s.rollout, namespace=s.namespace, transport=transport, pods=self.pods,
                slurm=self.slurm, elector=elector, budget=self.budget, reads=self.reads,
                hold=self._rollout_hold, kube_nodes=self.nodes, dry_run=s.dry_run,
            )  # fmt: skip

    def _on_slurm_change(self, new: Sequence[SlurmNode]) -> None:
        self._fresh.extend(new)
        self._dirty.set()

    async def _fast_marks(self) -> None:
        """Mark K8s nodes for SLURM failures the poll just saw, before the next full read.

        The poll read those nodes exactly (state, reason, who and when); for a reason that is
        SLURM's own (a failure), the last full read with those nodes replaced is all
        ``decide`` needs to mark their K8s nodes (cordon, taint, condition, Event). Only those
        marking actions are taken, inside the budget; the full pass that follows (as soon as
        the read limiter allows) does everything else.
        """
        fresh, self._fresh = self._fresh, []
        if not fresh or self._last_slurm is None:
            return
        failing = {n.name: n for n in fresh if reason_owner(n.live_reason) is ReasonOwner.SLURM}
        if not failing:
            return
        patched = [failing.get(n.name, n) for n in self._last_slurm]
        try:
            await self._apply_marks(patched, set(failing))
        except SlonkdError as exc:
            log.warning("coordinator.fast_marks_failed", error=str(exc)[:300])

    async def _apply_marks(self, slurm_nodes: list[SlurmNode], failing: set[str]) -> None:
        views = self._views(slurm_nodes, time.time())
        plans = merge_shared_nodes(views, [decide(v, self.s.policy) for v in views])
        plans, _ = suspect_common_causes(
            views, plans, min_nodes=self.s.suspect_min_nodes, fraction=self.s.suspect_fraction
        )
        admission = self._admit(views, plans)
        token = self.elector.check_valid()
        marked = []
        for view, plan in zip(views, plans, strict=True):
            if view.node not in failing:
                continue
            for action in plan.for_writer(Writer.COORDINATOR):
                if action.kind not in _MARKS or (
                    action.budgeted and view.node in admission.refused
                ):
                    continue
                self.elector.check_valid()
                if not await self._isolated(
                    self._apply_kube(view, action, token),
                    action=action.kind, cause=action.cause, nodes=[view.node], token=token,
                ):  # fmt: skip
                    marked.append(view.node)
        if marked:
            log.info("coordinator.fast_marks", nodes=sorted(set(marked)), fencing_token=token)

    async def _watch_state(self) -> None:
        """Start a pass when an operator pauses, unpauses or resets the breaker."""
        while True:
            await asyncio.sleep(self.s.state_poll_s)
            try:
                stored = await self.store.load()
            except SlonkdError as exc:
                log.debug("coordinator.state_read_failed", error=str(exc)[:200])
                continue
            seen = (self.state.paused, self.state.breaker_open)
            if (stored.paused, stored.breaker_open) != seen:
                log.info(
                    "coordinator.operator_change",
                    paused=stored.paused,
                    breaker_open=stored.breaker_open,
                    by=stored.paused_by or stored.breaker_reason[:100],
                )
                self._dirty.set()

    async def _state_unreadable(self, exc: StateCorrupt) -> None:
        """A corrupt state ConfigMap: act as paused (no automated action) until it is repaired.

        Logged and recorded as an Event once per distinct error, not every pass.
        """
        ref = f"{self.s.namespace}/{self.s.state_name}"
        why = (
            f"state ConfigMap {ref} is unreadable ({str(exc)[:200]}): automated actions refused "
            "until it is repaired or `slonkd state reset --yes-discard-state`"
        )
        self.state = replace(self.state, paused=True, paused_by="slonkd", paused_reason=why)
        if self._state_error == str(exc):
            return
        self._state_error = str(exc)
        log.error("coordinator.state_corrupt", state=ref, error=str(exc)[:300], owner="coordinator")
        with contextlib.suppress(SlonkdError):
            await self.events.record(
                ObjectRef(kind="ConfigMap", name=self.s.state_name, namespace=self.s.namespace),
                type_="Warning",
                reason="StateCorrupt",
                message=f"slonkd: {why}",
            )

    def _state_readable(self) -> None:
        if self._state_error:
            log.warning(
                "coordinator.state_readable", state=self.s.state_name, was=self._state_error
            )
            self._state_error = ""

    def _on_change(self, event: CacheEvent[Any]) -> None:
        """Start a pass for a change that matters (not a kubelet heartbeat)."""
        if event.old is not None and _same(event.old, event.obj):
            return
        self._dirty.set()

    def _on_node_change(self, event: CacheEvent[Node]) -> None:
        """Start a pass for a K8s node's change that matters, on a node with a worker pod.

        The cluster's other nodes come and go with other workloads and cannot change a view.
        """
        if event.old is not None and _same(event.old, event.obj):
            return  # heartbeat: checked first, it is the common case and costs nothing
        name = event.obj.name
        if any(p.node_name == name for p in self.pods.items().values()):
            self._dirty.set()

    def status_sections(self) -> dict[str, Any]:
        """Extra sections of ``slonkd status`` (topology, rollout) from the leader's tasks."""
        sections: dict[str, Any] = {
            "passes": {
                "count": self.passes,
                "last_ms": self.snapshot.duration_ms if self.snapshot else None,
                "last_phases_ms": self.snapshot.phases_ms if self.snapshot else {},
                "slurm_reads": self.reads.reads,
                "slurm_polls": self.watch.polls if self.watch else 0,
            }
        }
        if self.topology is not None:
            sections["topology"] = self.topology.status()
        if self.rollout is not None:
            sections["rollout"] = self.rollout.status()
        return sections

    def _rollout_hold(self) -> str:
        """Why rollouts may not take another node now ("" when they may)."""
        if self.state.paused:
            return f"slonkd is paused: {self.state.paused_reason}"
        if self.state.breaker_open:
            return f"breaker open: {self.state.breaker_reason}"
        return ""

    # -- views -----------------------------------------------------------------------------

    def _views(self, slurm_nodes: Sequence[SlurmNode], now: float) -> list[NodeView]:
        by_name = {n.name: n for n in slurm_nodes}
        views = []
        for pod in self.pods.items().values():
            seen = self._seen[pod.name]
            ready = pod.ready and pod.phase is PodPhase.RUNNING and not pod.terminating
            if seen.uid != pod.uid:
                seen.uid, seen.ready_since, seen.unready_since = pod.uid, None, None
            if ready:
                # the kubelet's time, so a new leader does not mistake an old failure for history
                since = seen.ready_since or _epoch(pod.ready_since) or now
                seen.ready_since, seen.unready_since = min(since, now), None
            else:
                seen.ready_since, seen.unready_since = None, seen.unready_since or now
            kube = self.nodes.get(pod.node_name) if pod.node_name else None
            views.append(
                NodeView(
                    node=NodeName(pod.name),
                    now=now,
                    slurm=by_name.get(NodeName(pod.name)),
                    pod=pod,
                    kube_node=kube,
                    pod_ready_since=seen.ready_since,
                    pod_unready_since=seen.unready_since,
                    remediation=self._remediations(pod.node_name or ""),
                    handled_failure=self.state.handled.get(pod.name, ""),
                    health=self._health_of(pod),
                    paused=self.state.paused,
                )
            )
        return views

    # -- one pass ----------------------------------------------------------------------------

    async def reconcile_all(self) -> list[Plan]:
        """Read SLURM and the state once, decide for every worker, apply in bulk."""
        await self.reads.acquire()
        began = time.monotonic()
        slurm_nodes = await self.slurm.read_nodes()
        self._last_slurm = slurm_nodes
        self._fresh = []  # this read has them all
        read_at = time.monotonic()
        was_open = self.state.breaker_open
        try:
            self.state = await self.store.load()  # an operator's pause or reset is seen here
            self._state_readable()
        except StateCorrupt as exc:
            await self._state_unreadable(exc)  # a paused pass: status served, nothing done
        if was_open and not self.state.breaker_open:
            self._standing = frozenset(self._refused)
            log.info(
                "budget.reset_seen",
                standing=sorted(self._standing)[:50],
                detail="standing candidates are admitted within the budget, never a mass event",
            )
        state_at = time.monotonic()
        views = self._views(slurm_nodes, time.time())
        plans = merge_shared_nodes(views, [decide(v, self.s.policy) for v in views])
        plans, suspected = suspect_common_causes(
            views, plans, min_nodes=self.s.suspect_min_nodes, fraction=self.s.suspect_fraction
        )
        newly = sorted(str(c) for c in suspected - self.suspected)
        for suspect in newly:
            log.warning(
                "health.cause_suspected",
                cause=suspect,
                owner="coordinator",
                detail="many nodes fail the same check at once: suspecting the check",
            )
        self.suspected = suspected
        admission = self._admit(views, plans)
        self._standing &= admission.admitted | frozenset(admission.refused)  # still wanted
        token = self.elector.check_valid()  # a paused old leader stops here
        why = admission.open_breaker or (
            f"suspected check(s) {', '.join(newly)}: the same failure on many nodes at once"
            if newly
            else ""
        )
        if why and not self.state.breaker_open and not self._state_error:
            await self._open_breaker(why, token)
        self._log_refusals(admission)
        slurm_groups: dict[tuple[Kind, Cause], list[str]] = defaultdict(list)
        kube_actions: list[tuple[NodeView, Action]] = []
        for view, plan in zip(views, plans, strict=True):
            for action in plan.for_writer(Writer.COORDINATOR):
                if action.budgeted and view.node in admission.refused:
                    continue
                if action.kind in (Kind.DRAIN, Kind.DOWN, Kind.RELEASE, Kind.REQUEUE):
                    slurm_groups[(action.kind, action.cause)].append(view.node)
                else:
                    kube_actions.append((view, action))
        before: dict[str, str] = {str(v.node): _slurm_text(v.slurm) for v in views}
        decided_at = time.monotonic()
        failed = 0
        for (kind, cause), names in sorted(
            slurm_groups.items(), key=lambda kv: (kv[0][0] != Kind.REQUEUE, str(kv[0]))
        ):
            self.elector.check_valid()
            failed += await self._isolated(
                self._apply_slurm(kind, cause, names, token, before),
                action=kind, cause=cause, nodes=names, token=token,
            )  # fmt: skip
        for view, action in kube_actions:
            self.elector.check_valid()
            failed += await self._isolated(
                self._apply_kube(view, action, token),
                action=action.kind, cause=action.cause, nodes=[view.node], token=token,
            )  # fmt: skip
        self.metrics.reconciled("ok", time.monotonic() - began)
        self.metrics.breaker_open.set(1 if self.state.breaker_open else 0)
        self.metrics.paused.set(1 if self.state.paused else 0)
        self.metrics.budget_refused.set(len(admission.refused))
        self.metrics.suspected.set(len(suspected))
        self.snapshot = Snapshot(
            at=time.time(),
            views=tuple(views),
            plans=tuple(plans),
            admission=admission,
            state=self.state,
            fencing_token=token,
            duration_ms=round((time.monotonic() - began) * 1000, 1),
            phases_ms={
                "slurm_read": round((read_at - began) * 1000, 1),
                "state_read": round((state_at - read_at) * 1000, 1),
                "decide": round((decided_at - state_at) * 1000, 1),
                "apply": round((time.monotonic() - decided_at) * 1000, 1),
            },
        )
        self.passes += 1
        (log.info if slurm_groups or kube_actions else log.debug)(
            "coordinator.pass",
            nodes=len(views),
            slurm_calls=len(slurm_groups),
            kube_actions=len(kube_actions),
            failed_actions=failed,
            duration_ms=round((time.monotonic() - began) * 1000, 1),
        )
        return plans

    async def _isolated(
        self,
        work: Coroutine[Any, Any, None],
        *,
        action: Kind,
        cause: Cause,
        nodes: Sequence[str],
        token: int,
    ) -> int:
        """Run one action of a pass; its failure is logged and audited, the pass goes on.

        Returns 1 when it failed. A lost lease is never swallowed: the error is raised again
        when the lease is no longer valid, or when a newer leader's token was met
        (``Superseded``), so a deposed leader writes nothing more. The next
        pass (an event, a poll change or the resync) tries the failed action again.
        """
        try:
            await work
        except Superseded:
            raise  # a newer leader wrote: this term ends, whatever the Lease says
        except SlonkdError as exc:
            if not self.elector.is_valid():
                raise
            self.metrics.applied(action.value, cause.name, changed=False, skipped=["failed"])
            for node in nodes:
                self._audit(action.value, node, cause, token, f"failed: {str(exc)[:200]}", None)
            log.warning(
                "coordinator.action_failed",
                action=action.value,
                cause=str(cause),
                nodes=list(nodes)[:20],
                error=str(exc)[:300],
                fencing_token=token,
            )
            return 1
        return 0

    def _admit(self, views: Sequence[NodeView], plans: Sequence[Plan]) -> Admission:
        """The budget's answer for every node an automated cause wants out now.

        A budgeted action on a K8s node (cordon, taint, reboot) takes every SLURM node of its
        pods out: they are one request unit, admitted together (after ``merge_shared_nodes``
        only one of them carries the action).
        """
        sizes: dict[str, int] = defaultdict(int)
        out: dict[str, set[str]] = defaultdict(set)
        restarting: dict[str, set[str]] = defaultdict(set)
        wanting: set[str] = set()  # K8s nodes a budgeted action takes out
        for view, plan in zip(views, plans, strict=True):
            pool = self._budget_group(view)
            sizes[pool] += 1
            if _is_out(view):
                out[pool].add(view.node)
                if view.pod is None or view.pod.terminating or view.pod_ready_since is None:
                    restarting[pool].add(view.node)
            if view.kube_node is not None and any(
                a.budgeted for a in plan.for_writer(Writer.COORDINATOR)
            ):
                wanting.add(view.kube_node.name)
        requests = []
        for view, plan in zip(views, plans, strict=True):
            kube = view.kube_node.name if view.kube_node is not None else ""
            if kube in wanting:
                requests.append(
                    Request(node=view.node, pool=self._budget_group(view), unit=f"k8s-node/{kube}")
                )
            elif any(a.budgeted for a in plan.for_writer(Writer.COORDINATOR)):
                requests.append(Request(node=view.node, pool=self._budget_group(view)))
        return admit(
            requests,
            out_now={k: frozenset(v) for k, v in out.items()},
            pool_sizes=sizes,
            restarting={k: frozenset(v) for k, v in restarting.items()},
            policy=self.budget,
            breaker_open=self.state.breaker_open,
            standing=self._standing,
        )

    def _budget_group(self, view: NodeView) -> str:
        """The pool of the node, or its pool and topology block when so configured."""
        return budget_group(
            view.pod.labels if view.pod is not None else None,
            view.kube_node.labels if view.kube_node is not None else None,
            block_label=self.s.budget_block_label,
        )

    def _log_refusals(self, admission: Admission) -> None:
        """One log line per node and reason when the budget keeps it in (not every pass)."""
        for node, why in sorted(admission.refused.items()):
            if self._refused.get(node) != why:
                log.warning("budget.refused", node=node, reason=why, owner="coordinator")
        self._refused = dict(admission.refused)

    async def _open_breaker(self, why: str, token: int) -> None:
        """Open the breaker: persisted, logged, an Event; only a human closes it."""
        if self.s.dry_run and not self.dry_run_seen.is_new("*", ("open-breaker",), why):
            return  # a dry run never persists it: said once per reason, not every pass
        log.error("budget.breaker_opened", reason=why, owner="coordinator", fencing_token=token)
        self.audit.record(
            action="open-breaker",
            node="*",
            cause=why,
            fencing_token=token,
            outcome="dry-run" if self.s.dry_run else "opened",
            dry_run=self.s.dry_run,
        )
        if self.s.dry_run:
            return
        self.state = await self.store.update(
            token,
            lambda st: replace(
                st, breaker_open=True, breaker_reason=why, breaker_opened_at=time.time()
            ),
        )
        with contextlib.suppress(SlonkdError):
            await self.events.record(
                ObjectRef(kind="ConfigMap", name=self.s.state_name, namespace=self.s.namespace),
                type_="Warning",
                reason="BreakerOpen",
                message=f"slonkd: automated actions stopped until `slonkd budget reset`: {why}",
            )

    async def _apply_slurm(
        self, kind: Kind, cause: Cause, names: list[str], token: int, before: dict[str, str]
    ) -> None:
        if self.s.dry_run:  # audited (and logged at info) when new for the node
            planned = (kind.value, str(cause))
            new = [n for n in names if self.dry_run_seen.is_new(n, planned, before.get(n))]
            for name in new:
                self._audit(kind.value, name, cause, token, "dry-run", before.get(name))
            (log.info if new else log.debug)(
                "coordinator.dry_run", action=kind.value, cause=str(cause), nodes=names
            )
            return
        result: UpdateResult
        if kind is Kind.DRAIN:
            result = await self.slurm.drain(names, cause, "by slonkd coordinator")
        elif kind is Kind.DOWN:
            result = await self.slurm.down(names, cause, "by slonkd coordinator")
        elif kind is Kind.RELEASE:
            result = await self.slurm.resume(names, cause)
        else:  # REQUEUE
            for name in names:
                requeued = await self.slurm.requeue_jobs(name)
                self._audit(
                    "requeue",
                    name,
                    cause,
                    token,
                    "requeued",
                    before.get(name),
                    jobs=[str(j) for j in requeued.requeued],
                    not_requeueable=[str(j) for j in requeued.not_requeueable],
                )
                log.info(
                    "slurm.jobs_requeued",
                    node=name,
                    cause=str(cause),
                    jobs=list(requeued.requeued),
                    not_requeueable=list(requeued.not_requeueable),
                    fencing_token=token,
                )
            return
        self.metrics.applied(
            kind.value,
            cause.name,
            changed=bool(result.changed),
            skipped=[skip.why.value for skip in result.skipped],
        )
        for name in sorted(result.changed):
            self._audit(kind.value, name, cause, token, "changed", before.get(name))
        for skip in result.skipped:
            self._audit(
                kind.value,
                skip.node,
                cause,
                token,
                f"skipped: {skip.why.value}",
                before.get(skip.node),
            )
        log.info(
            f"slurm.nodes_{kind.value}",
            action=kind.value,
            cause=str(cause),
            owner="coordinator",
            nodes=sorted(result.changed),
            skipped={s.node: s.why.value for s in result.skipped},
            calls=result.calls,
            fencing_token=token,
        )

    async def _apply_kube(self, view: NodeView, action: Action, token: int) -> None:
        kube = view.kube_node
        if kube is None:
            return
        cause = str(action.cause)
        before = _kube_text(kube)
        if self.s.dry_run:  # audited (and logged at info) when new for the node
            planned = (action.kind.value, cause, action.key, kube.name)
            new = self.dry_run_seen.is_new(view.node, planned, before)
            if new:
                self._audit(
                    action.kind.value,
                    view.node,
                    action.cause,
                    token,
                    "dry-run",
                    before,
                    kube_node=kube.name,
                    key=action.key,
                )
            (log.info if new else log.debug)(
                "coordinator.dry_run",
                action=action.kind.value,
                node=view.node,
                kube_node=kube.name,
                cause=cause,
            )
            return
        if action.kind is Kind.CORDON:
            result = await self.node_writer.cordon(kube.name, cause=cause)
        elif action.kind is Kind.UNCORDON:
            result = await self.node_writer.uncordon(kube.name)
        elif action.kind is Kind.TAINT:
            result = await self.node_writer.set_taint(
                kube.name, action.key, TaintEffect.NO_SCHEDULE, label_value(cause)
            )
        elif action.kind is Kind.UNTAINT:
            result = await self.node_writer.remove_taint(kube.name, action.key)
            if action.key in (REBOOT_TAINT, MANUAL_TAINT):
                await self.node_writer.set_annotations(kube.name, {action.key: None})
        elif action.kind is Kind.SET_CONDITION:
            healthy = action.key == "True"
            result = await self.node_writer.set_slurm_healthy(
                kube.name,
                healthy=healthy,
                reason="SlurmHealthy" if healthy else "SlurmFailure",
                message=cause,
            )
        elif action.kind is Kind.EVENT:
            result = await self.events.record(
                ObjectRef(kind="Node", name=kube.name, uid=kube.uid),
                type_="Warning",
                reason=action.key,
                message=f"slonkd: {cause}",
            )
        elif action.kind is Kind.EVICT and view.pod is not None:
            result = await self.pod_writer.evict(
                view.pod.namespace, view.pod.name, uid=view.pod.uid
            )
            if result.done:
                handled = failure_fingerprint(view.slurm) if view.slurm is not None else ""
                await self._remediated(kube.name, view.node, handled, token)
        elif action.kind in (Kind.REQUEST_REBOOT, Kind.MARK_MANUAL):
            result = await self._escalate(view, kube, action, token)
        else:
            self._audit(
                action.kind.value,
                view.node,
                action.cause,
                token,
                "not implemented",
                before,
                kube_node=kube.name,
            )
            log.info(
                "coordinator.action_not_implemented",
                node=view.node,
                action=action.kind.value,
                cause=cause,
            )
            return
        self.metrics.applied(
            action.kind.value, action.cause.name, changed=result.outcome.value == "changed"
        )
        self._audit(
            action.kind.value,
            view.node,
            action.cause,
            token,
            result.outcome.value,
            before,
            kube_node=kube.name,
            key=action.key,
        )
        log.info(
            f"kube.{action.kind.value.replace('-', '_')}",
            node=view.node,
            kube_node=kube.name,
            cause=cause,
            owner="coordinator",
            outcome=result.outcome.value,
            fencing_token=token,
        )

    def _health_of(self, pod: Pod) -> dict[str, CheckResult]:
        """The pod's node's verdicts, if they were measured on the K8s node it runs on now."""
        measured_on, verdicts = self.health.get(pod.name, ("", {}))
        if measured_on and measured_on != pod.node_name:
            return {}  # measured on the hardware the pod left: unknown here, not healthy
        return verdicts

    async def _read_statuses(self) -> None:
        assert self.bus is not None  # noqa: S101 - only started with a bus
        async for message in self.bus.messages():
            payload, node = message.payload, message.topic.node
            if isinstance(payload, SlurmEvent):
                log.info("coordinator.nudged", slurm_event=payload.event, nodes=payload.nodes)
                self._dirty.set()  # read SLURM now rather than at the next resync
                continue
            if not isinstance(payload, AgentStatus) or node is None:
                continue
            if payload.online:
                verdicts = {k: decode_verdict(k, v) for k, v in payload.health.items()}
                self.health[node] = (payload.kube_node, verdicts)
            else:
                self.health.pop(node, None)  # agent gone: its verdicts are unknown, not ok
            self._dirty.set()

    async def _escalate(
        self, view: NodeView, kube: Node, action: Action, token: int
    ) -> ChangeResult:
        """The remediation ladder's later steps: a reboot request, then manual repair.

        A reboot request is ``scontrol reboot ASAP`` (when slonkd may hold the SLURM node)
        plus the ``slonk.dev/reboot-requested`` taint and annotation that the site's reboot
        tooling acts on; slonkd never reboots a machine. Manual repair is a taint and an
        annotation for people. Both are recorded as attempts (with the time) in the state.
        """
        cause = str(action.cause)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if action.kind is Kind.REQUEST_REBOOT:
            taint, reason = REBOOT_TAINT, "SlurmRebootRequested"
            before = str(view.slurm.state) if view.slurm is not None else None
            try:
                rebooted = await self.slurm.request_reboot([view.node], action.cause, "by slonkd")
            except SlonkdError as exc:
                # SLURM's half (e.g. no RebootProgram) must not keep the site's tooling from
                # seeing the request on the K8s node
                self.elector.check_valid()
                self._audit(
                    SLURM_REBOOT, view.node, action.cause, token, f"failed: {exc}"[:200], before
                )
                log.warning(
                    "slurm.reboot_failed", node=view.node, cause=cause, error=str(exc)[:300]
                )
            else:
                skips = {k.node: k.why.value for k in rebooted.skipped}
                done = (
                    "changed"
                    if view.node in rebooted.changed
                    else f"skipped: {skips.get(view.node, '')}"
                )
                self._audit(SLURM_REBOOT, view.node, action.cause, token, done, before)
                log.info(
                    "slurm.reboot_requested",
                    node=view.node,
                    cause=cause,
                    requested=bool(rebooted.changed),
                    skipped=skips,
                    fencing_token=token,
                )
        else:
            taint, reason = MANUAL_TAINT, "SlurmManualRepair"
        result = await self.node_writer.set_taint(
            kube.name, taint, TaintEffect.NO_SCHEDULE, label_value(cause)
        )
        attempts = self.state.remediation.get(kube.name, Attempts()).attempts + 1
        await self.node_writer.set_annotations(
            kube.name, {taint: f"{stamp} {cause[:200]} (attempt {attempts})"}
        )
        if result.outcome is ChangeOutcome.CHANGED:
            await self.events.record(
                ObjectRef(kind="Node", name=kube.name, uid=kube.uid),
                type_="Warning",
                reason=reason,
                message=f"slonkd: {cause} (remediation attempt {attempts})",
            )
            await self._remediated(kube.name, view.node, "", token)
        return result

    def _remediations(self, kube_node: str) -> Remediations:
        done = self.state.remediation.get(kube_node)
        if done is None:
            return Remediations()
        return Remediations(attempts=done.attempts, last_at=done.last_at)

    async def _remediated(self, kube_node: str, node: str, handled: str, token: int) -> None:
        """Record one remediation step (and the failure it handled) in the state ConfigMap."""

        def change(st: CoordinatorState) -> CoordinatorState:
            was = st.remediation.get(kube_node, Attempts())
            remediation = {
                **st.remediation,
                kube_node: Attempts(attempts=was.attempts + 1, last_at=time.time()),
            }
            done = {**st.handled, node: handled} if handled else st.handled
            return replace(st, remediation=remediation, handled=done)

        self.state = await self.store.update(token, change)

    def _audit(
        self,
        action: str,
        node: str,
        cause: Cause,
        token: int,
        outcome: str,
        before: str | None,
        **extra: str | list[str],
    ) -> None:
        self.audit.record(
            action=action,
            node=node,
            cause=str(cause),
            fencing_token=token,
            outcome=outcome,
            before=before,
            after=None if outcome in ("dry-run", "not implemented") else f"{action} {cause}",
            dry_run=self.s.dry_run,
            **extra,
        )

    # -- leading -----------------------------------------------------------------------------

    async def lead(self, token: int) -> None:
        """The leader's work: run the informers, then reconcile on events and on resync."""
        log.info("coordinator.leading", identity=self.s.identity, fencing_token=token)
        try:
            await self._lead(token)
        except* _NotLeading:
            log.warning("coordinator.not_leading", identity=self.s.identity, fencing_token=token)

    async def _lead(self, token: int) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.nodes.run())
            group.create_task(self.pods.run())
            if self.bus is not None:
                group.create_task(self.bus.run())
                group.create_task(self._read_statuses())
            if self.commands is not None:
                group.create_task(self.commands.announce_when_connected())
            if self.topology is not None:
                group.create_task(self.topology.run())
            if self.rollout is not None:
                group.create_task(self.rollout.run())
            await self.nodes.synced.wait()
            await self.pods.synced.wait()
            log.info("coordinator.synced", nodes=len(self.nodes), pods=len(self.pods))
            if self.reaper is not None:
                group.create_task(self.reaper.run())  # sweeps first: the leader-start sweep
            if self.watch is not None:
                group.create_task(self.watch.run())
            group.create_task(self._watch_state())
            while True:
                self._dirty.clear()
                await self._fast_marks()
                try:
                    await self.reconcile_all()
                except FencedError:
                    raise  # a newer token in the state: the elector ends this term
                except SlonkdError as exc:
                    self.metrics.reconciled(
                        "retry" if isinstance(exc, TransientError) else "terminal", 0.0
                    )
                    log.warning("coordinator.pass_failed", error=str(exc)[:300])
                if not self.elector.is_valid():
                    raise _NotLeading  # stop every task of this term, whatever the elector does
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.s.resync_s):
                        await self._dirty.wait()
                await self._fast_marks()  # before the debounce: a failure is marked at once
                await settle(
                    self._dirty, quiet_s=self.s.debounce_s, max_wait_s=self.s.max_batch_delay_s
                )


def api_readiness(silent_s: float | None, limit_s: float) -> tuple[bool, str]:
    """Ready while the apiserver answered a Lease call within ``limit_s`` (one lease duration).

    A standby asks every retry period and a leader renews as often, so a silence past a whole
    lease duration means this replica cannot reach the API (a wrong address, a network
    policy, the apiserver down): it would never act, whatever its process looks like.
    """
    if silent_s is None:
        return False, "the Kubernetes API has not answered yet"
    if silent_s > limit_s:
        return False, f"the Kubernetes API has not answered for {silent_s:.0f} s"
    return True, "ready"


class _NotLeading(Exception):
    """The lease ran out under this term's work."""


SHUTDOWN_DEADLINE_S = 8.0
"""After SIGTERM the campaign has this long to stop before the process exits anyway."""


async def run_coordinator(s: CoordinatorSettings) -> int:
    """Campaign for the Lease and lead while holding it, until SIGTERM/SIGINT."""
    if s.kubeconfig:
        transport = await KubeTransport.from_kubeconfig(s.kubeconfig)
    else:
        transport = KubeTransport.in_cluster()
    lease = s.lease_settings()
    # a new term's token is above the state's last writer's, even if the Lease was recreated
    elector = LeaderElector(
        transport, lease, floor=StateStore(transport, s.namespace, s.state_name).last_token
    )
    api = CoordinatorAPI(
        identity=s.identity,
        holder=lambda: elector.holder,
        ready=lambda: api_readiness(elector.api_silent_s(), lease.lease_duration_s),
    )
    metrics = Metrics(role="coordinator")
    api.metrics = metrics
    if s.credentials is not None:
        api.credentials = credential_issuer(
            s.credentials, transport, s.namespace, s.cluster, s.pod_selector
        )
    await api.start(s.api_host, s.api_port, tls=s.api_tls)
    log.info("coordinator.api_listening", host=s.api_host, port=api.port, tls=bool(s.api_tls))
    stop = stop_on_signals()

    async def lead(token: int) -> None:
        coordinator = Coordinator(s, transport, elector, metrics=metrics)
        api.leader = coordinator
        try:
            await coordinator.lead(token)
        finally:
            api.leader = None
            coordinator.audit.close()

    async def campaign() -> None:
        await elector.run(lead)

    task = asyncio.create_task(campaign(), name="campaign")
    stopping = asyncio.create_task(stop.wait(), name="stop")
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # the campaign ended by itself: a bug, raised
        # something that swallows its cancellation must not hang the pod's termination
        await cancel_within(task, SHUTDOWN_DEADLINE_S, event="coordinator.shutdown_deadline")
    finally:
        stopping.cancel()
        with contextlib.suppress(SlonkdError, TimeoutError):
            async with asyncio.timeout(3):
                await elector.release()
        await api.stop()
        await transport.close()
    log.info("coordinator.stopped", identity=s.identity)
    if not task.done():
        exit_now()  # the stuck task would also hang asyncio.run's final cancellation
    return 0
