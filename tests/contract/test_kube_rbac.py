"""The minimal RBAC in deploy/rbac allows every call of the adapter and nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from slonkd.adapters.kube.configmaps import OwnedConfigMap
from slonkd.adapters.kube.errors import Call, KubeForbidden
from slonkd.adapters.kube.events import EventRecorder
from slonkd.adapters.kube.lease import LeaderElector, LeaseSettings
from slonkd.adapters.kube.nodes import NodeWriter
from slonkd.adapters.kube.pods import PodWriter
from slonkd.adapters.kube.sources import agent_informers, coordinator_informers
from slonkd.adapters.kube.state import StateStore
from slonkd.adapters.kube.statefulsets import statefulset_informer
from slonkd.adapters.kube.tokenreview import find_worker_pod, review_token
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.coordinator_state import CoordinatorState
from slonkd.core.kube_changes import ChangeOutcome, ObjectRef
from slonkd.core.kube_objects import TaintEffect
from slonkd.testing.kube import KubeCluster
from tests.contract.kube_helpers import pending_pod, running

pytestmark = pytest.mark.kube

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac"


def _bind(kube: KubeCluster, ns: str, sa: str, role: str, tag: str) -> list[str]:
    """Apply the role files and bind them to ``sa``; the cluster-scoped names to clean up."""
    kube.kubectl("apply", "-n", ns, "-f", str(RBAC / f"{role}.yaml"))
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    ref = {"apiGroup": "rbac.authorization.k8s.io", "name": f"slonkd-{role}"}
    crb = f"slonkd-{role}-{tag}"
    kube.api.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {"metadata": {"name": crb}, "roleRef": {**ref, "kind": "ClusterRole"}, "subjects": subject},
    )
    kube.api.request(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "metadata": {"name": f"slonkd-{role}"},
            "roleRef": {**ref, "kind": "Role"},
            "subjects": subject,
        },
    )
    return [crb]


async def _transport_for(kube: KubeCluster, ns: str, sa: str, tmp_path: Path) -> KubeTransport:
    kube.api.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": sa}})
    token = kube.create_token(ns, sa)
    path = tmp_path / f"{sa}.kubeconfig"
    path.write_text(kube.kubeconfig_for(token, user=sa, namespace=ns))
    return await KubeTransport.from_kubeconfig(path)


@pytest.fixture
async def cleanup(kube: KubeCluster) -> AsyncIterator[list[str]]:
    """Paths of cluster-scoped objects to delete after the test."""
    paths: list[str] = []
    yield paths
    for path in paths:
        kube.api.request("DELETE", path, ok=(200, 202, 404))


async def test_coordinator_role_allows_all_it_does_and_forbids_the_rest(
    kube: KubeCluster,
    namespace: str,
    unique: Callable[[str], str],
    tmp_path: Path,
    cleanup: list[str],
) -> None:
    """With only deploy/rbac, the coordinator watches, changes, evicts, leads; other writes: 403."""
    tag = namespace
    for crb in _bind(kube, namespace, "coord", "coordinator", tag):
        cleanup.append(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{crb}")
    kube.kubectl("apply", "-f", str(RBAC / "coordinator-node-events.yaml"))
    kube.api.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        {
            "metadata": {"name": f"slonkd-node-events-{tag}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "slonkd-node-events",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coord", "namespace": namespace}],
        },
    )
    cleanup.append(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/slonkd-node-events-{tag}"
    )
    (node,) = kube.add_fake_nodes([unique("rbac")], wait_ready_s=None)
    cleanup.append(f"/api/v1/nodes/{node}")
    pod = kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod("w-0"))
    kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod("w-1"))
    transport = await _transport_for(kube, namespace, "coord", tmp_path)
    try:
        nodes, pods = coordinator_informers(transport, namespace, pod_selector="app=w")
        statefulsets = statefulset_informer(transport, namespace)
        async with running(nodes), running(pods), running(statefulsets):
            assert nodes.get(node) is not None
            assert len(pods) == 2
            assert len(statefulsets) == 0  # listed and watched (none made here): no 403
        writer = NodeWriter(transport)
        assert (await writer.cordon(node, cause="rbac")).done
        assert (await writer.uncordon(node)).done
        assert (await writer.set_taint(node, "slonk.dev/x", TaintEffect.NO_SCHEDULE)).done
        assert (await writer.remove_taint(node, "slonk.dev/x")).done
        assert (await writer.set_slurm_healthy(node, healthy=True, reason="Ok")).done
        assert (await writer.set_labels(node, {"slonk.dev/l": "1"})).done
        assert (await writer.set_annotations(node, {"slonk.dev/a": "1"})).done
        events = EventRecorder(transport)
        node_ref = ObjectRef(kind="Node", name=node)
        for _ in range(2):  # create, then patch the count
            assert (await events.record(node_ref, type_="Normal", reason="R", message="m")).done
        pod_ref = ObjectRef(kind="Pod", name="w-0", namespace=namespace)
        for _ in range(2):
            assert (await events.record(pod_ref, type_="Normal", reason="R", message="m")).done
        pods_w = PodWriter(transport)
        uid = pod["metadata"]["uid"]
        evicted = await pods_w.evict(namespace, "w-0", uid=uid)
        assert evicted.outcome is ChangeOutcome.CHANGED
        assert (await pods_w.delete(namespace, "w-1", grace_s=0)).outcome is ChangeOutcome.CHANGED
        elector = LeaderElector(
            transport,
            LeaseSettings(
                name="slonkd-coordinator",
                namespace=namespace,
                identity="c-1",
                lease_duration_s=3,
                renew_deadline_s=2,
                retry_period_s=0.5,
                safety_margin_s=0.5,
            ),
        )
        got: list[int] = []
        leading = asyncio.Event()

        async def work(token: int) -> None:
            got.append(token)
            leading.set()

        task = asyncio.create_task(elector.run(work))
        try:
            async with asyncio.timeout(10):
                await leading.wait()
            assert elector.is_valid()
            await elector.release()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        store = StateStore(transport, namespace, "slonkd-state")
        await store.update(got[0], lambda s: CoordinatorState(nodes_out=frozenset({node})))
        await store.update(got[0], lambda s: s)
        assert (await store.load()).nodes_out == {node}
        topology = OwnedConfigMap(transport, namespace, "slonkd-topology")
        assert (await topology.publish({"topology.conf": "# a\n"})).detail == "created"
        assert (await topology.publish({"topology.conf": "# b\n"})).detail == "updated"
        token = kube.create_token(namespace, "default")
        who = await review_token(transport, token)
        assert who.authenticated
        assert who.namespace == namespace
        assert who.service_account == "default"
        # find_worker_pod: the credential issuer's check that the token's pod is a worker
        assert await find_worker_pod(transport, namespace, "nobody", selector="app=w") is None
        # Outside the rules: delete a node, write another ConfigMap.
        with pytest.raises(KubeForbidden, match=r'resources: \["nodes"\], verbs: \["delete"\]'):
            await transport.request(
                Call(verb="delete", resource="nodes", name=node), "DELETE", f"/api/v1/nodes/{node}"
            )
        other = StateStore(transport, namespace, "not-slonkd-state")
        with pytest.raises(KubeForbidden, match=r'resources: \["configmaps"\], verbs: \["get"\]'):
            await other.update(got[0], lambda s: CoordinatorState(breaker_open=True))
        with pytest.raises(KubeForbidden, match=r'resources: \["configmaps"\], verbs: \["get"\]'):
            await OwnedConfigMap(transport, namespace, "kube-root-ca.crt").publish({"x": "y"})
        with pytest.raises(KubeForbidden, match="pods/eviction"):
            await PodWriter(transport).evict("default", "anything")
        with pytest.raises(KubeForbidden, match=r'resources: \["statefulsets"\], verbs: \["patch"'):
            await transport.request(
                Call(verb="patch", resource="statefulsets", group="apps", namespace=namespace),
                "PATCH",
                f"/apis/apps/v1/namespaces/{namespace}/statefulsets/w",
                body={"spec": {"replicas": 0}},
                content_type="application/merge-patch+json",
            )
    finally:
        await transport.close()


async def test_agent_role_watches_its_own_objects_and_cannot_write(
    kube: KubeCluster,
    namespace: str,
    unique: Callable[[str], str],
    tmp_path: Path,
    cleanup: list[str],
) -> None:
    """With deploy/rbac/agent.yaml the agent syncs its pod and node; a cordon gets 403."""
    for crb in _bind(kube, namespace, "agent", "agent", namespace):
        cleanup.append(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{crb}")
    (node,) = kube.add_fake_nodes([unique("rbac-agent")], wait_ready_s=None)
    cleanup.append(f"/api/v1/nodes/{node}")
    kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod("w-0"))
    transport = await _transport_for(kube, namespace, "agent", tmp_path)
    try:
        nodes, pods = agent_informers(transport, namespace, pod_name="w-0", node_name=node)
        async with running(nodes), running(pods):
            assert list(nodes.items()) == [node]
            assert list(pods.items()) == [f"{namespace}/w-0"]
        with pytest.raises(KubeForbidden, match="missing RBAC rule"):
            await NodeWriter(transport).cordon(node, cause="agent must not")
    finally:
        await transport.close()
