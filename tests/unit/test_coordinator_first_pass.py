"""A leader's first pass comes soon after its informers list: what the lists cost, the read.

The node informer's first list emits one ADDED event per K8s node; the observer decides per
event whether the node carries a worker pod (a pass is due then). That check must not scan
the pod cache per node event: 5,000 nodes next to 5,000 pods would be 25 million steps
before the first pass (issue 21 item 2). The term's SLURM read runs beside the lists and the
first pass takes it. No service is needed: the caches are filled by hand, SLURM is a fake.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from slonkd.adapters.kube.informer import CacheEvent, EventType, Informer
from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.sources import coordinator_informers
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TransientError
from slonkd.core.kube_objects import KubeNodeName, Node, Pod
from slonkd.core.slurm_node import SlurmNode
from slonkd.runtime.coordinating.observing import Observer
from tests.unit.coordinator_fakes import (
    FakeNodeWriter,
    FakeSlurm,
    coordinator_with,
    slurm_node,
)
from tests.unit.coordinator_fakes import kube_node as _node_of
from tests.unit.pods import running_pod


def _pod(i: int, node: str) -> Pod:
    return running_pod(f"w-{i}", uid=f"u{i}", on=node)


def _node(name: str, rv: str = "1") -> Node:
    return Node(name=KubeNodeName(name), uid=f"n-{name}", resource_version=rv, unschedulable=False)


class _CountingPods:
    """Wraps the pod informer's ``items`` to count the snapshots taken of the pod cache."""

    def __init__(self, pods: Informer[Pod]) -> None:
        self.calls = 0
        self._items = pods.items

    def __call__(self) -> dict[str, Pod]:
        self.calls += 1
        return self._items()


def _observer(pods: dict[str, Pod]) -> tuple[Observer, _CountingPods]:
    transport = KubeTransport(ApiEndpoint(server="http://127.0.0.1:9"))  # never contacted
    nodes, pod_informer = coordinator_informers(transport, "slonk", pod_selector="app=w")
    pod_informer._cache = dict(pods)
    counting = _CountingPods(pod_informer)
    pod_informer.items = counting  # type: ignore[method-assign]
    return Observer(nodes, pod_informer), counting


def _added(node: Node) -> CacheEvent[Node]:
    return CacheEvent(type=EventType.ADDED, key=node.name, obj=node)


def test_a_first_node_list_reads_the_pod_cache_once_not_once_per_node() -> None:
    """1,000 ADDED node events (a first list) next to 1,000 pods snapshot the pods once."""
    n = 1000
    observer, counting = _observer({f"slonk/w-{i}": _pod(i, f"kn-{i}") for i in range(n)})
    for i in range(n):
        observer.on_node_change(_added(_node(f"kn-{i}")))
    assert observer.dirty.is_set()
    assert counting.calls <= 1


def test_only_a_node_with_a_worker_pod_starts_a_pass() -> None:
    """A change of a node without a worker pod sets nothing; one with a worker pod does."""
    observer, _ = _observer({"slonk/w-0": _pod(0, "kn-0")})
    observer.on_node_change(_added(_node("other")))
    assert not observer.dirty.is_set()
    observer.on_node_change(_added(_node("kn-0")))
    assert observer.dirty.is_set()


def test_a_pod_that_moved_makes_its_new_node_count() -> None:
    """After a pod event moves the worker to another node, that node's changes start passes."""
    old = _pod(0, "kn-0")
    observer, _ = _observer({"slonk/w-0": old})
    observer.on_node_change(_added(_node("kn-1")))  # the set is built: kn-1 has no worker
    assert not observer.dirty.is_set()
    moved = _pod(0, "kn-1")
    observer.pods._cache["slonk/w-0"] = moved
    event: CacheEvent[Any] = CacheEvent(
        type=EventType.MODIFIED, key="slonk/w-0", obj=moved, old=old
    )
    observer.on_change(event)
    observer.dirty.clear()
    changed = CacheEvent(
        type=EventType.MODIFIED, key="kn-1", obj=_node("kn-1", "2"), old=_node("kn-1")
    )
    observer.on_node_change(replace(changed, obj=replace(changed.obj, unschedulable=True)))
    assert observer.dirty.is_set()


class _CountingSlurm(FakeSlurm):
    """Counts the node-table reads; the first ``fail_first`` of them raise a transient error."""

    def __init__(self, nodes: list[SlurmNode], fail_first: int = 0) -> None:
        super().__init__(nodes, set())
        self.reads = 0
        self.fail_first = fail_first

    async def read_nodes(self, names: Sequence[str] = ()) -> list[SlurmNode]:
        """Every node, counted."""
        self.reads += 1
        if self.reads <= self.fail_first:
            raise TransientError("slurmctld is away")
        return list(self.nodes)


async def test_the_first_pass_takes_the_read_started_with_the_lists() -> None:
    """The term's SLURM read runs beside the lists; the first pass uses it, later ones read."""
    slurm = _CountingSlurm([slurm_node(i) for i in range(3)])
    c = coordinator_with(slurm, FakeNodeWriter(), [_node_of(i) for i in range(3)])
    c.read_slurm_ahead()
    await asyncio.sleep(0)  # the read runs while the informers would still be listing
    assert slurm.reads == 1
    await c.reconcile_all()
    assert slurm.reads == 1  # the pass did not read again
    assert c.passes == 1
    assert {"term_to_pass_ms", "slurm_read", "decide", "pass_ms"} <= set(c.first_pass_ms)
    await c.reconcile_all()
    assert slurm.reads == 2


async def test_a_failed_read_ahead_is_read_again_by_the_first_pass() -> None:
    """A read started ahead that failed does not fail the first pass: the pass reads anew."""
    slurm = _CountingSlurm([slurm_node(i) for i in range(3)], fail_first=1)
    c = coordinator_with(slurm, FakeNodeWriter(), [_node_of(i) for i in range(3)])
    c.read_slurm_ahead()
    await asyncio.sleep(0)
    await c.reconcile_all()
    assert slurm.reads == 2
    assert c.passes == 1


async def test_a_term_that_ends_before_its_first_pass_stops_the_read_ahead() -> None:
    """Cancelling the read started ahead leaves no task running and no error unretrieved."""
    slurm = _CountingSlurm([slurm_node(0)])
    c = coordinator_with(slurm, FakeNodeWriter(), [_node_of(0)])
    c.read_slurm_ahead()
    c.cancel_read_ahead()
    await asyncio.sleep(0)
    assert slurm.reads == 0
    await c.reconcile_all()  # a later pass reads for itself
    assert slurm.reads == 1
