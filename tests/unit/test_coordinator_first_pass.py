"""A leader's first pass comes soon after its informers list: what the lists cost the observer.

The node informer's first list emits one ADDED event per K8s node; the observer decides per
event whether the node carries a worker pod (a pass is due then). That check must not scan
the pod cache per node event: 5,000 nodes next to 5,000 pods would be 25 million steps
before the first pass (issue 21 item 2). No service is needed: the caches are filled by hand.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slonkd.adapters.kube.informer import CacheEvent, EventType, Informer
from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.sources import coordinator_informers
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_objects import KubeNodeName, Node, Pod, PodName, PodPhase
from slonkd.runtime.coordinating.observing import Observer


def _pod(i: int, node: str) -> Pod:
    return Pod(
        name=PodName(f"w-{i}"),
        namespace="slonk",
        uid=f"u{i}",
        resource_version="1",
        node_name=KubeNodeName(node),
        phase=PodPhase.RUNNING,
        ready=True,
    )


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
