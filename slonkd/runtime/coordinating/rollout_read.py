"""What one rollout pass reads: SLURM's node table and the workers, one view each.

:class:`~.rolling.RolloutController` plans each pass on what :class:`RolloutRead` gives it.
The table (:meth:`RolloutRead.table`) is, on the term's first look, the one the coordinator
has just read (its :class:`~.node_table.NodeTable`; issue 21), else the rollout's own read, a
turn of the coordinator's :class:`~slonkd.runtime.coordinating.slurm_watch.ReadLimiter` (the turn
:mod:`.replacing` takes for its job reads too). The views (:meth:`RolloutRead.views`) join
that table with the caches: each worker's pod, StatefulSet, K8s node (an operator's hold is
read there) and pool; a node the rollout holds, and a worker whose pod is gone a while, are
viewed too, in their pools. :meth:`RolloutRead.outdated` asks the caches alone whether any
pod is to be rolled. Whether the budget counts a view out, and whether a view shows what a
task reserved in the coordinator's gate (:mod:`.admitting`), are :func:`counts_out` and
:func:`shows_reserved`.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from slonkd.adapters.kube.informer import Informer
from slonkd.adapters.slurm.backend import SlurmReads
from slonkd.core.budget import WorkerGroups, out_of_service
from slonkd.core.kube_objects import Node, Pod
from slonkd.core.reservations import Reservation, shows
from slonkd.core.rollout_phase import (
    REVISION_LABEL,
    StatefulSetRevision,
    WorkerView,
    held_by_rollout,
)
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.coordinating.node_table import NodeTable
from slonkd.runtime.coordinating.slurm_watch import ReadLimiter


class RolloutRead:
    """SLURM's table and the workers' views, as one rollout pass reads them."""

    def __init__(
        self,
        *,
        namespace: str,
        slurm: SlurmReads,
        pods: Informer[Pod],
        statefulsets: Informer[StatefulSetRevision],
        kube_nodes: Informer[Node] | None,
        block_label: str,
        reads: ReadLimiter | None,
        table: NodeTable | None = None,
        table_age_s: float,
    ) -> None:
        self.namespace = namespace
        self.slurm = slurm
        self.pods = pods
        self.statefulsets = statefulsets
        self.kube_nodes = kube_nodes
        """The coordinator's K8s node cache: an operator's ``slonk.dev/hold`` is read there."""
        self.node_table = table
        """The node table the coordinator keeps (:mod:`.node_table`; None: none)."""
        self.table_age_s = table_age_s
        """A node table the coordinator read this long ago serves the rollout (0: never)."""
        self.reads = reads
        """The coordinator's slurmctld read limiter, shared by every reader."""
        self._groups = WorkerGroups(block_label)
        """Each worker's pool, kept while its pod is gone (as the gate keeps it)."""
        self.slurm_read = False
        """Whether a pass of this term has taken a table yet (set by the pass)."""
        self.read_at = 0.0
        """When the read behind the last table began (monotonic), for the gate."""

    async def turn(self) -> None:
        """Wait for a turn of the coordinator's slurmctld read limiter (none: at once)."""
        if self.reads is not None:
            await self.reads.acquire()

    async def table(self) -> list[SlurmNode]:
        """SLURM's node table: at the term's start the one the coordinator just read, else its own.

        A new term's first pass reads the whole table as the rollout starts; a read of the
        rollout's own took one more of that second's reads and made the poll's wait (issue
        21). Only the first: later the rollout looks again because a pod changed (its own
        eviction, a replacement's agent resuming its node), and a table from before that
        change would have it replace the same worker twice.
        """
        table = self.node_table if not self.slurm_read and self.table_age_s > 0 else None
        recent = table.recent(self.table_age_s) if table is not None else None
        if recent is not None:
            self.read_at = time.monotonic() - self.table_age_s  # read that long ago at most
            return recent
        await self.turn()
        self.read_at = time.monotonic()
        return await self.slurm.read_nodes()

    def outdated(self) -> bool:
        """Whether the caches show a worker pod not on its OnDelete StatefulSet's revision."""
        statefulsets = [s for s in self.statefulsets.items().values() if s.on_delete]
        for pod in self.pods.items().values():
            sts = next((s for s in statefulsets if s.owns(pod)), None)
            if sts is not None and pod.labels.get(REVISION_LABEL) != sts.update_revision:
                return True
        return False

    def views(
        self, slurm_nodes: dict[str, SlurmNode], settling: Collection[str]
    ) -> list[WorkerView]:
        """One view per worker (``settling``: the nodes released, not back in service yet)."""
        statefulsets = list(self.statefulsets.items().values())
        pods: dict[str, Pod] = {
            p.name: p for p in self.pods.items().values() if p.namespace == self.namespace
        }
        names = set(pods) | {n for n, s in slurm_nodes.items() if held_by_rollout(s)}
        # a worker whose pod is gone a while is still its pool's (and often out): counted
        wanted = (f"{s.name}-{i}" for s in statefulsets for i in range(s.replicas))
        names |= {n for n in wanted if n in slurm_nodes and n not in pods}
        rows = []
        for name in sorted(names):
            pod = pods.get(name)
            if pod is not None:
                sts = next((s for s in statefulsets if s.owns(pod)), None)
            else:
                sts = next((s for s in statefulsets if s.wants(name)), None)
            kube_node = None
            if pod is not None and pod.node_name and self.kube_nodes is not None:
                kube_node = self.kube_nodes.get(pod.node_name)
            rows.append((name, pod, sts, kube_node))
        pools = self._groups.resolve(
            (n, p.labels if p else None, k.labels if k else None) for n, p, _, k in rows
        )
        views = []
        for (name, pod, sts, kube_node), pool in zip(rows, pools, strict=True):
            views.append(
                WorkerView(
                    node=name,
                    pod=pod,
                    statefulset=sts,
                    slurm=slurm_nodes.get(name),
                    settling=name in settling,
                    pool=pool,
                    kube_node=kube_node,
                )
            )
        return views


def counts_out(view: WorkerView) -> bool:
    """Out of service in the rollout's read (the budget's rule)."""
    return out_of_service(view.slurm, view.kube_node)


def shows_reserved(reservation: Reservation, view: WorkerView | None) -> bool:
    """Whether the rollout's read shows what the reserving task did (see the ledger)."""
    return view is not None and shows(
        reservation, out=counts_out(view), pod=view.pod.uid if view.pod is not None else None
    )
