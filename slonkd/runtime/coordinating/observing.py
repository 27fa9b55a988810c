"""What the leader sees: the informer caches, the agents' verdicts, and a view per worker.

Changes that matter (not a kubelet heartbeat; a K8s node only when a worker pod runs on it),
a poll that saw SLURM change (:mod:`.slurm_changes`), and an agent's status or a SLURM nudge
on MQTT set ``dirty``, which starts a pass (:mod:`.term`). A pass (:mod:`.reconciling`) turns
the caches, a SLURM read and the state (:mod:`.remembering`) into one
:class:`~slonkd.core.plan.NodeView` per worker pod: SLURM node = pod name, K8s node = the
pod's node.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import structlog

from slonkd.adapters.bus.client import Bus
from slonkd.adapters.kube.informer import CacheEvent, Informer
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.health import CheckResult, decode_verdict
from slonkd.core.kube_objects import Node, Pod
from slonkd.core.messages import (
    AgentStatus,
    CoordinatorStatus,
    SlurmEvent,
    coordinator_topic,
    slurm_events_topic,
)
from slonkd.core.plan import NodeView, Remediations
from slonkd.core.pod_ready import ReadyTracker
from slonkd.core.revalidation import Answer
from slonkd.core.slurm_node import NodeName, SlurmNode
from slonkd.runtime.coordinating.credentials import coordinator_bus_credentials
from slonkd.runtime.coordinating.settings import CoordinatorSettings

log = structlog.get_logger("slonkd.coordinator")


def _same(old: Any, new: Any) -> bool:
    """Equal but for the resourceVersion (a heartbeat changes nothing slonkd looks at)."""
    return bool(replace(old, resource_version="") == replace(new, resource_version=""))


def remediations(state: CoordinatorState, kube_node: str) -> Remediations:
    """The remediation history of a K8s node, as ``decide`` reads it."""
    return state.remediation.get(kube_node, Remediations())


def coordinator_bus(s: CoordinatorSettings) -> Bus | None:
    """The MQTT client reading agents' statuses and SLURM nudges (None: no bus configured).

    Its will says the leader is gone; with a dynsec admin and no MQTT user, this replica
    makes its own client.
    """
    if s.bus is None:
        return None
    topic = f"slonk/v1/{s.cluster}/nodes/+/status"
    own = None
    if s.credentials is not None and not s.bus.username:
        own = coordinator_bus_credentials(
            s.credentials, cluster=s.cluster, identity=s.identity, client_id=s.bus.client_id
        )
    subscriptions = [topic, str(slurm_events_topic(s.cluster))]
    gone = CoordinatorStatus(online=False, leader=s.identity, at=time.time())
    return Bus(
        s.bus,
        subscriptions=subscriptions,
        credentials=own,
        will=(coordinator_topic(s.cluster), gone),  # the leader died: agents see it
    )


class Observer:
    """The caches and inputs of one leader's term, and the views built from them."""

    def __init__(self, nodes: Informer[Node], pods: Informer[Pod]) -> None:
        self.nodes = nodes
        self.pods = pods
        self.dirty = asyncio.Event()
        """Set when something changed that a pass should look at."""
        self._seen: dict[str, ReadyTracker] = defaultdict(lambda: ReadyTracker(kubelet_time=True))
        self.health: dict[str, tuple[str, dict[str, CheckResult]]] = {}
        """Latest verdicts per SLURM node from its agent's retained status (absent: unknown)."""
        self.answers: dict[str, Answer] = {}
        """Per SLURM node, the latest status that answered a recheck (revalidation)."""
        self._worker_nodes: frozenset[str] | None = None
        """K8s nodes with a worker pod, rebuilt after a pod changed (None: to rebuild)."""
        nodes.add_handler(self.on_node_change)
        pods.add_handler(self.on_change)

    def on_change(self, event: CacheEvent[Any]) -> None:
        """Start a pass for a change that matters (not a kubelet heartbeat)."""
        if event.old is not None and _same(event.old, event.obj):
            return
        self._worker_nodes = None  # a pod came, went or moved: rebuilt when a node asks
        self.dirty.set()

    def on_node_change(self, event: CacheEvent[Node]) -> None:
        """Start a pass for a K8s node's change that matters, on a node with a worker pod.

        The cluster's other nodes come and go with other workloads and cannot change a view.
        The K8s nodes with a worker pod are a set rebuilt only after a pod event, not a scan
        of the pods per node event: a first list of N nodes next to N pods costs O(N), not
        O(N²) (5,000 nodes: seconds of a failover's time to first action).
        """
        if event.old is not None and _same(event.old, event.obj):
            return  # heartbeat: checked first, it is the common case and costs nothing
        if self._worker_nodes is None:
            self._worker_nodes = frozenset(
                p.node_name for p in self.pods.items().values() if p.node_name
            )
        if event.obj.name in self._worker_nodes:
            self.dirty.set()

    async def read_statuses(self, bus: Bus) -> None:
        """The agents' health verdicts and SLURM's nudges, from MQTT, until cancelled."""
        async for message in bus.messages():
            payload, node = message.payload, message.topic.node
            if isinstance(payload, SlurmEvent):
                log.info("coordinator.nudged", slurm_event=payload.event, nodes=payload.nodes)
                self.dirty.set()  # read SLURM now rather than at the next resync
                continue
            if not isinstance(payload, AgentStatus) or node is None:
                continue
            if payload.online:
                verdicts = {k: decode_verdict(k, v) for k, v in payload.health.items()}
                self.health[node] = (payload.kube_node, verdicts)
                if payload.answers:
                    self.answers[node] = Answer(
                        command=payload.answers, kube_node=payload.kube_node, verdicts=verdicts
                    )
            else:
                self.health.pop(node, None)  # agent gone: its verdicts are unknown, not ok
            self.dirty.set()

    def health_of(self, pod: Pod) -> dict[str, CheckResult]:
        """The pod's node's verdicts, if they were measured on the K8s node it runs on now."""
        measured_on, verdicts = self.health.get(pod.name, ("", {}))
        if measured_on and measured_on != pod.node_name:
            return {}  # measured on the hardware the pod left: unknown here, not healthy
        return verdicts

    def views(
        self, slurm_nodes: Sequence[SlurmNode], now: float, state: CoordinatorState
    ) -> list[NodeView]:
        """One view per worker pod, from this SLURM read, the caches and the state."""
        by_name = {n.name: n for n in slurm_nodes}
        views = []
        for pod in self.pods.items().values():
            seen = self._seen[pod.name]
            seen.observe(pod, now)
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
                    remediation=remediations(state, pod.node_name or ""),
                    handled_failure=state.handled.get(pod.name, ""),
                    health=self.health_of(pod),
                    paused=state.paused,
                    revalidation=state.revalidating.get(pod.name),
                    recheck=self.answers.get(pod.name),
                )
            )
        return views
