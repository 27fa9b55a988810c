"""The coordinator's topology task: node labels -> ``topology.conf`` -> ``scontrol reconfigure``.

While leading, the coordinator runs :meth:`TopologySync.run` as one extra task. It reuses the
coordinator's node and pod informers: a worker pod's SLURM node is the pod's name and its
labels are those of the K8s node the pod runs on (``pod.spec.nodeName``), so a pod that moves
moves its SLURM node in the topology. Only a Running pod places its node: one whose pod is
absent or not Running (deleted and not yet made again, Pending, scheduled or not) keeps its
place in the last rendering, so replacing a worker pod reconfigures nothing unless its
successor runs elsewhere. Every SLURM node slurmctld knows is rendered (one never placed by a
pod, or whose K8s node lacks the labels, goes to the documented default of
:mod:`slonkd.core.topology`); pods that are not SLURM nodes are left out, since slurmctld
refuses a file naming unknown nodes.

On changes (debounced) and on a resync period it reads the labels from the caches and hands
them to :class:`~slonkd.runtime.coordinating.topology_apply.TopologyApplier`
(:mod:`slonkd.runtime.coordinating.topology_apply`: publish, wait for slurmctld's copy,
reconfigure, refuse
a rendering slurmctld would die on). The loop runs at most one reconfigure in
``min_reconfigure_interval_s`` (24.11 restarts slurmctld on each): a change within it waits,
unpublished, and the labels as they are when it ends are applied. Its settings are
:mod:`slonkd.runtime.coordinating.topology_settings`'s, the rendering rules
:mod:`slonkd.core.topology`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

import structlog

from slonkd.adapters.kube.configmaps import OwnedConfigMap
from slonkd.adapters.kube.informer import CacheEvent, EventType, Informer
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.backend import SlurmBackend
from slonkd.core.errors import SlonkdError
from slonkd.core.kube_objects import Node, Pod, PodPhase
from slonkd.runtime.coordinating.topology_apply import TopologyApplier
from slonkd.runtime.coordinating.topology_settings import TopologySettings
from slonkd.runtime.kit.level_loop import Cause, Debounce, run_level_triggered

log = structlog.get_logger("slonkd.topology")

_CAUSES = {Cause.START: "start", Cause.CHANGE: "labels", Cause.RESYNC: "resync"}
"""The cause a sync logs and publishes, by why the loop ran it."""


def labels_by_slurm_node(
    slurm_names: Sequence[str],
    pods: Mapping[str, Pod],
    nodes: Callable[[str], Node | None],
    last: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Mapping[str, str]]:
    """``{SLURM node: labels of the K8s node its pod runs on}``.

    A Running pod places its SLURM node on its K8s node (no labels when that node is not
    known: deleted). A SLURM node whose pod is absent or not Running keeps its labels in
    ``last`` (the previous rendering's): a pod merely pending or being replaced moves
    nothing. One not in ``last`` gets the labels of the K8s node its pod is scheduled to, or
    none.
    """
    by_name: dict[str, Pod] = {p.name: p for p in pods.values()}
    out: dict[str, Mapping[str, str]] = {}
    for name in slurm_names:
        pod = by_name.get(name)
        running = pod is not None and pod.phase is PodPhase.RUNNING and bool(pod.node_name)
        if not running and last is not None and name in last:
            out[name] = last[name]
            continue
        kube_name = pod.node_name if pod is not None else None
        kube = nodes(kube_name) if kube_name else None
        out[name] = kube.labels if kube is not None else {}
    return out


class TopologySync(TopologyApplier):
    """Keeps slurmctld's topology in step with the node labels (one leader's task)."""

    def __init__(
        self,
        s: TopologySettings,
        *,
        transport: KubeTransport,
        namespace: str,
        nodes: Informer[Node],
        pods: Informer[Pod],
        slurm: SlurmBackend,
        check_valid: Callable[[], int] = lambda: 0,
    ) -> None:
        configmap = (
            OwnedConfigMap(transport, namespace, s.configmap) if s.configmap is not None else None
        )
        super().__init__(s, configmap=configmap, slurm=slurm, check_valid=check_valid)
        self.nodes = nodes
        self.pods = pods
        self._placed: dict[str, Mapping[str, str]] = {}
        """The labels each SLURM node was last rendered with (its place while it has no pod)."""
        self._dirty = asyncio.Event()
        nodes.add_handler(self._on_node)
        pods.add_handler(lambda _e: self._dirty.set())

    def _on_node(self, event: CacheEvent[Node]) -> None:
        """Mark dirty on a node added, deleted or relabelled (status heartbeats do not matter).

        Only a mark: the loop renders from the caches, which already hold the change (the
        informer updates its cache before it calls handlers), so any later render sees it.
        A deleted node is a change: the pods still naming it lose its labels.
        """
        old = event.old
        if event.type is not EventType.MODIFIED or old is None or old.labels != event.obj.labels:
            self._dirty.set()

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Sync now, then on (debounced) changes and on every resync, until cancelled."""
        await self.nodes.synced.wait()
        await self.pods.synced.wait()
        log.info("topology.started", plugin=self.s.spec.plugin, configmap=self.s.configmap)
        await run_level_triggered(
            self._dirty,
            self._pass,
            debounce=Debounce(quiet_s=self.s.debounce_s, max_wait_s=self.s.max_delay_s),
        )

    async def _pass(self, cause: Cause) -> float:
        """One sync; a failure is kept in the state and retried at the next wake."""
        why = _CAUSES[cause]
        try:
            await self.sync_once(cause=why)
            self.state.error = ""
        except (SlonkdError, OSError) as exc:
            self.state.error = str(exc)[:300]
            log.warning("topology.sync_failed", error=self.state.error, cause=why)
        until = self.state.deferred_until
        if until is not None:  # look again when the interval is over, not a resync later
            return min(self.s.resync_s, max(0.01, until - time.monotonic()))
        return self.s.resync_s

    def not_before(self) -> float:
        """When the next reconfigure may begin (monotonic): the interval after the last."""
        began = self.state.reconfigure_began
        return 0.0 if began is None else began + self.s.min_reconfigure_interval_s

    async def sync_once(self, *, cause: str) -> bool:
        """Render from the caches; publish and reconfigure if it changed. True: reconfigured."""
        names = [n.name for n in await self.slurm.read_nodes()]
        labels = labels_by_slurm_node(names, self.pods.items(), self.nodes.get, self._placed)
        self._placed = labels
        return await self.apply(labels, cause=cause, not_before=self.not_before())
