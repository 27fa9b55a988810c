"""The informer against the real apiserver: order, resume, 410 relist, selectors."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slonkd.adapters.kube.informer import EventType, Informer, InformerSettings
from slonkd.adapters.kube.sources import agent_informers, node_source, pod_source
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_objects import Pod
from slonkd_sandbox.kube.cluster import KubeCluster
from tests.contract.kube_helpers import pending_pod, recorder, running, until

pytestmark = pytest.mark.kube

FAST = InformerSettings(backoff_initial_s=0.1, backoff_max_s=1.0, page_size=2)


def _pods_path(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def _workers(transport: KubeTransport, ns: str) -> Informer[Pod]:
    """An informer of the ``app=w`` pods of ``ns``, with quick retries and pages of two."""
    return Informer(transport, pod_source(ns, label_selector="app=w"), FAST)


async def test_watch_delivers_create_update_delete_in_order(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """A pod's creation, label change and deletion arrive as ADDED, MODIFIED, DELETED in order."""
    informer = _workers(kube_transport, namespace)
    events = recorder(informer)
    async with running(informer):
        assert len(informer) == 0
        kube.api.request("POST", _pods_path(namespace), pending_pod("p1"))
        await until("p1 cached", lambda: informer.get(f"{namespace}/p1") is not None)
        kube.api.request(
            "PATCH",
            f"{_pods_path(namespace)}/p1",
            {"metadata": {"labels": {"step": "two"}}},
            content_type="application/merge-patch+json",
        )
        await until(
            "label seen",
            lambda: (
                (p := informer.get(f"{namespace}/p1")) is not None and p.labels.get("step") == "two"
            ),
        )
        kube.api.request("DELETE", f"{_pods_path(namespace)}/p1")
        await until("p1 gone", lambda: informer.get(f"{namespace}/p1") is None)
    kinds = [e.type for e in events]
    assert kinds[0] is EventType.ADDED
    assert kinds[-1] is EventType.DELETED
    assert EventType.MODIFIED in kinds[1:-1]
    first_labelled = next(i for i, e in enumerate(events) if e.obj.labels.get("step") == "two")
    assert 0 < first_labelled < len(events) - 1
    assert events[-1].obj.name == "p1"


async def test_paged_list_fills_the_cache_with_every_object(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """A list in pages of two brings all five pods into the cache before synced is set."""
    for i in range(5):
        kube.api.request("POST", _pods_path(namespace), pending_pod(f"p{i}"))
    informer = _workers(kube_transport, namespace)
    async with running(informer):
        assert sorted(p.name for p in informer.items().values()) == [f"p{i}" for i in range(5)]
        assert all(p.phase == "Pending" and not p.ready for p in informer.items().values())


async def test_watch_resumes_after_the_apiserver_is_killed_and_restarted(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """After SIGKILL and restart of the apiserver the cache keeps following the server."""
    informer = _workers(kube_transport, namespace)
    events = recorder(informer)
    async with running(informer):
        kube.api.request("POST", _pods_path(namespace), pending_pod("before"))
        await until("watch established", lambda: informer.get(f"{namespace}/before") is not None)
        watches = informer.stats.watches
        del events[:]
        # Blocking calls on purpose: the harness's children die with the thread that
        # started them (PR_SET_PDEATHSIG), so the apiserver must not start in a worker thread.
        try:
            kube.kill_apiserver()
        finally:
            kube.start_apiserver()
        kube.api.request("POST", _pods_path(namespace), pending_pod("after"))
        await until(
            "pod created after restart", lambda: informer.get(f"{namespace}/after") is not None
        )
        kube.api.request("DELETE", f"{_pods_path(namespace)}/before")
        await until("deletion after restart", lambda: informer.get(f"{namespace}/before") is None)
        assert informer.stats.watches > watches
        assert informer.stats.reconnects + informer.stats.gone >= 1
    assert [(e.type, e.key) for e in events if e.type is not EventType.MODIFIED] == [
        (EventType.ADDED, f"{namespace}/after"),
        (EventType.DELETED, f"{namespace}/before"),
    ]


async def test_410_after_compaction_relists_and_reports_deletions_made_in_the_gap(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str
) -> None:
    """A watch resumed at a compacted resourceVersion relists: the gap's delete becomes an event."""
    for name in ("keep", "doomed"):
        kube.api.request("POST", _pods_path(namespace), pending_pod(name))
    informer = _workers(kube_transport, namespace)
    events = recorder(informer)
    async with running(informer):
        assert len(informer) == 2
    old_rv = informer.resource_version
    # The watch is down: the gap.
    kube.api.request("DELETE", f"{_pods_path(namespace)}/doomed")
    kube.api.request("POST", _pods_path(namespace), pending_pod("newcomer"))
    try:
        kube.kill_apiserver()
        assert kube.compact_etcd() > int(old_rv)
    finally:
        kube.start_apiserver()
    lists = informer.stats.lists
    async with running(informer):
        await until("relist after 410", lambda: informer.stats.lists > lists)
        await until("newcomer seen", lambda: informer.get(f"{namespace}/newcomer") is not None)
        assert informer.stats.gone >= 1
        assert set(informer.items()) == {f"{namespace}/keep", f"{namespace}/newcomer"}
    deleted = [e for e in events if e.type is EventType.DELETED]
    assert [e.key for e in deleted] == [f"{namespace}/doomed"]
    assert deleted[0].obj.name == "doomed"
    assert (EventType.ADDED, f"{namespace}/newcomer") in [(e.type, e.key) for e in events]


async def test_agent_informers_see_only_their_own_pod_and_node(
    kube: KubeCluster,
    kube_transport: KubeTransport,
    namespace: str,
    unique: Callable[[str], str],
) -> None:
    """An agent's caches hold exactly its pod and its node, first listed from the watch cache."""
    mine, other = unique("agent-mine"), unique("agent-other")
    kube.add_fake_nodes([mine, other], wait_ready_s=None)
    for name in ("w-0", "w-1"):
        kube.api.request("POST", _pods_path(namespace), pending_pod(name))
    nodes, pods = agent_informers(
        kube_transport, namespace, pod_name="w-0", node_name=mine, settings=None
    )
    pod_events = recorder(pods)
    async with running(nodes), running(pods):
        assert list(nodes.items()) == [mine]
        assert list(pods.items()) == [f"{namespace}/w-0"]
        kube.api.request(
            "PATCH",
            f"{_pods_path(namespace)}/w-1",
            {"metadata": {"labels": {"x": "1"}}},
            content_type="application/merge-patch+json",
        )
        kube.api.request(
            "PATCH",
            f"{_pods_path(namespace)}/w-0",
            {"metadata": {"labels": {"x": "1"}}},
            content_type="application/merge-patch+json",
        )
        await until("own pod update", lambda: any(e.obj.labels.get("x") for e in pod_events))
    assert {e.key for e in pod_events} == {f"{namespace}/w-0"}
    for name in (mine, other):
        kube.api.request("DELETE", f"/api/v1/nodes/{name}", ok=(200, 404))


async def test_node_cache_reads_taints_conditions_and_labels(
    kube: KubeCluster, kube_transport: KubeTransport, unique: Callable[[str], str]
) -> None:
    """A kwok node shows Ready with its labels in the cache; foreign annotations are dropped."""
    name = unique("nodecache")
    kube.add_fake_nodes([name], labels={"slonk.dev/test": name})
    informer = Informer(kube_transport, node_source(label_selector=f"slonk.dev/test={name}"), FAST)
    async with running(informer):
        await until("node Ready", lambda: (n := informer.get(name)) is not None and bool(n.ready))
        node = informer.get(name)
        assert node is not None
        assert node.labels["kubernetes.io/hostname"] == name
        assert "kwok.x-k8s.io/node" not in node.annotations
        assert not node.unschedulable
    kube.api.request("DELETE", f"/api/v1/nodes/{name}", ok=(200, 404))
