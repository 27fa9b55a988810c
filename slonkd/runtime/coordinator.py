"""The coordinator: one leader that reconciles every worker node in bulk.

While it holds the Lease it watches every K8s node and the worker pods, reads all SLURM
nodes in one call per pass (on events, debounced, and on a resync period), builds a
:class:`~slonkd.core.decide.NodeView` per worker pod (SLURM node = pod name, K8s node =
the pod's node), calls ``decide`` and executes the coordinator's actions: SLURM drains,
downs and releases grouped by cause into hostlist calls; cordons, taints, the
``SlurmHealthy`` condition, Events and evictions per K8s node. It acts only after its
caches synced and a SLURM read succeeded, checks its lease right before each write batch
(a paused old leader writes nothing), and keeps a disruption budget: automated actions that
would take more than ``max_out`` nodes out at once are skipped and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from slonkd.adapters.bus.client import Bus, BusSettings
from slonkd.adapters.kube.events import EventRecorder
from slonkd.adapters.kube.informer import Informer
from slonkd.adapters.kube.lease import LeaderElector, LeaseSettings
from slonkd.adapters.kube.nodes import NodeWriter
from slonkd.adapters.kube.pods import PodWriter
from slonkd.adapters.kube.sources import coordinator_informers
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.adapters.slurm.scontrol import ScontrolBackend, UpdateResult
from slonkd.core.decide import (
    Action,
    Kind,
    NodeView,
    Plan,
    Policy,
    Remediations,
    Writer,
    decide,
    failure_fingerprint,
    merge_shared_nodes,
    suspect_common_causes,
)
from slonkd.core.errors import SlonkdError
from slonkd.core.health import CheckResult, decode_verdict
from slonkd.core.kube_changes import ObjectRef
from slonkd.core.kube_objects import Node, Pod, PodPhase, TaintEffect
from slonkd.core.messages import AgentStatus, SlurmEvent, slurm_events_topic
from slonkd.core.reasons import Cause
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.runtime.topology_sync import TopologySettings, TopologySync

log = structlog.get_logger("slonkd.coordinator")


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorSettings:
    """Where the workers are, how often to look, and how much may be taken out at once."""

    namespace: str
    pod_selector: str = "app.kubernetes.io/name=slurmd"
    identity: str
    kubeconfig: str | None = None
    lease_name: str = "slonkd-coordinator"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    policy: Policy = field(default_factory=Policy)
    resync_s: float = 10.0
    debounce_s: float = 0.05
    """A pass starts once no event arrived for this long ..."""
    max_batch_delay_s: float = 1.0
    """... or this long after the first event of a burst, whichever comes first."""
    max_out: int = 10
    """Most nodes slonkd may hold out of service for budgeted (automated) causes."""
    cluster: str = "lab"
    bus: BusSettings | None = None
    """MQTT, to read the agents' health verdicts; None: no health input."""
    suspect_min_nodes: int = 3
    suspect_fraction: float = 0.3
    topology: TopologySettings | None = None
    """Render topology.conf from node labels and reconfigure slurmctld; None: off."""


@dataclass(slots=True)
class _Seen:
    ready_since: float | None = None
    unready_since: float | None = None
    uid: str = ""


def label_value(text: str) -> str:
    """``text`` as a valid label (and taint) value: ``[A-Za-z0-9._-]``, 63 chars, alnum ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", ".", text)[:63].strip("._-")
    return cleaned or "slonkd"


class Coordinator:
    """The leader's reconcile passes over all worker nodes."""

    def __init__(
        self, s: CoordinatorSettings, transport: KubeTransport, elector: LeaderElector
    ) -> None:
        self.s = s
        self.elector = elector
        self.slurm = ScontrolBackend(s.slurm)
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
        self.remediation: dict[str, Remediations] = {}
        self.handled: dict[str, str] = {}
        """SLURM node -> fingerprint of the failure already remediated (not blamed twice)."""
        """Attempts per K8s node (in memory for now: a failover forgets them)."""
        self.passes = 0
        self.health: dict[str, tuple[str, dict[str, CheckResult]]] = {}
        """Latest verdicts per SLURM node from its agent's retained status (absent: unknown)."""
        self.suspected: frozenset[Cause] = frozenset()
        self.bus: Bus | None = None
        if s.bus is not None:
            topic = f"slonk/v1/{s.cluster}/nodes/+/status"
            self.bus = Bus(s.bus, subscriptions=[topic, str(slurm_events_topic(s.cluster))])
        self.nodes.add_handler(lambda _e: self._dirty.set())
        self.pods.add_handler(lambda _e: self._dirty.set())
        self.topology: TopologySync | None = None
        if s.topology is not None:
            self.topology = TopologySync(
                s.topology, transport=transport, namespace=s.namespace, nodes=self.nodes,
                pods=self.pods, slurm=self.slurm, check_valid=elector.check_valid,
            )  # fmt: skip

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
                seen.ready_since, seen.unready_since = seen.ready_since or now, None
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
                    remediation=self.remediation.get(pod.node_name or "", Remediations()),
                    handled_failure=self.handled.get(pod.name, ""),
                    health=self._health_of(pod),
                )
            )
        return views

    # -- one pass ----------------------------------------------------------------------------

    async def reconcile_all(self) -> list[Plan]:
        """Read SLURM once, decide for every worker, apply the coordinator's actions in bulk."""
        began = time.monotonic()
        slurm_nodes = await self.slurm.read_nodes()
        views = self._views(slurm_nodes, time.time())
        plans = merge_shared_nodes(views, [decide(v, self.s.policy) for v in views])
        plans, suspected = suspect_common_causes(
            views, plans, min_nodes=self.s.suspect_min_nodes, fraction=self.s.suspect_fraction
        )
        if suspected != self.suspected:
            for cause in suspected - self.suspected:
                log.warning(
                    "health.cause_suspected",
                    cause=str(cause),
                    owner="coordinator",
                    detail="many nodes fail the same check at once: suspecting the check",
                )
            self.suspected = suspected
        out_now = sum(
            1 for v in views if v.slurm is not None and v.slurm.state.out_of_service
        ) + sum(1 for v in views if v.kube_node is not None and v.kube_node.cordoned_by_slonkd)
        budget = max(0, self.s.max_out - out_now)
        slurm_groups: dict[tuple[Kind, Cause], list[str]] = defaultdict(list)
        kube_actions: list[tuple[NodeView, Action]] = []
        taken: set[str] = set()
        for view, plan in zip(views, plans, strict=True):
            for action in plan.for_writer(Writer.COORDINATOR):
                if action.budgeted and view.node not in taken:
                    if budget <= 0:
                        log.warning(
                            "budget.exhausted",
                            node=view.node,
                            action=action.kind.value,
                            cause=str(action.cause),
                            max_out=self.s.max_out,
                            out_now=out_now,
                        )
                        continue
                    budget -= 1
                    taken.add(view.node)
                if action.kind in (Kind.DRAIN, Kind.DOWN, Kind.RELEASE, Kind.REQUEUE):
                    slurm_groups[(action.kind, action.cause)].append(view.node)
                else:
                    kube_actions.append((view, action))
        token = self.elector.check_valid()  # a paused old leader stops here
        for (kind, cause), names in sorted(
            slurm_groups.items(), key=lambda kv: (kv[0][0] != Kind.REQUEUE, str(kv[0]))
        ):
            await self._apply_slurm(kind, cause, names, token)
        for view, action in kube_actions:
            self.elector.check_valid()
            await self._apply_kube(view, action, token)
        self.passes += 1
        log.debug(
            "coordinator.pass",
            nodes=len(views),
            slurm_calls=len(slurm_groups),
            kube_actions=len(kube_actions),
            duration_ms=round((time.monotonic() - began) * 1000, 1),
        )
        return plans

    async def _apply_slurm(self, kind: Kind, cause: Cause, names: list[str], token: int) -> None:
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
                log.info(
                    "slurm.jobs_requeued",
                    node=name,
                    cause=str(cause),
                    jobs=list(requeued.requeued),
                    not_requeueable=list(requeued.not_requeueable),
                    fencing_token=token,
                )
            return
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
                self._remediated(kube.name)
                if view.slurm is not None:
                    self.handled[view.node] = failure_fingerprint(view.slurm)
        else:
            if action.kind in (Kind.REQUEST_REBOOT, Kind.MARK_MANUAL):
                self._remediated(kube.name)
            log.info(
                "coordinator.action_not_implemented",
                node=view.node,
                action=action.kind.value,
                cause=cause,
            )
            return
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

    def _remediated(self, kube_node: str) -> None:
        before = self.remediation.get(kube_node, Remediations())
        self.remediation[kube_node] = Remediations(
            attempts=before.attempts + 1, last_at=time.time()
        )

    # -- leading -----------------------------------------------------------------------------

    async def lead(self, token: int) -> None:
        """The leader's work: run the informers, then reconcile on events and on resync."""
        log.info("coordinator.leading", identity=self.s.identity, fencing_token=token)
        async with asyncio.TaskGroup() as group:
            group.create_task(self.nodes.run())
            group.create_task(self.pods.run())
            if self.bus is not None:
                group.create_task(self.bus.run())
                group.create_task(self._read_statuses())
            if self.topology is not None:
                group.create_task(self.topology.run())
            await self.nodes.synced.wait()
            await self.pods.synced.wait()
            log.info("coordinator.synced", nodes=len(self.nodes), pods=len(self.pods))
            while True:
                self._dirty.clear()
                try:
                    await self.reconcile_all()
                except SlonkdError as exc:
                    log.warning("coordinator.pass_failed", error=str(exc)[:300])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.s.resync_s):
                        await self._dirty.wait()
                await self._quiet()

    async def _quiet(self) -> None:
        """Let a burst of events settle (debounce), so one pass handles it in bulk."""
        began = time.monotonic()
        while time.monotonic() - began < self.s.max_batch_delay_s:
            self._dirty.clear()
            try:
                async with asyncio.timeout(self.s.debounce_s):
                    await self._dirty.wait()
            except TimeoutError:
                return


async def run_coordinator(s: CoordinatorSettings) -> int:
    """Campaign for the Lease and lead while holding it, until SIGTERM/SIGINT."""
    if s.kubeconfig:
        transport = await KubeTransport.from_kubeconfig(s.kubeconfig)
    else:
        transport = KubeTransport.in_cluster()
    lease = LeaseSettings(
        name=s.lease_name,
        namespace=s.namespace,
        identity=s.identity,
        lease_duration_s=s.lease_duration_s,
        renew_deadline_s=s.renew_deadline_s,
        retry_period_s=s.retry_period_s,
    )
    elector = LeaderElector(transport, lease)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def campaign() -> None:
        await elector.run(lambda token: Coordinator(s, transport, elector).lead(token))

    try:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(campaign())
            await stop.wait()
            task.cancel()
    finally:
        with contextlib.suppress(SlonkdError, TimeoutError):
            async with asyncio.timeout(3):
                await elector.release()
        await transport.close()
    log.info("coordinator.stopped", identity=s.identity)
    return 0
