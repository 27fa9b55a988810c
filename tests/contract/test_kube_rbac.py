"""The minimal RBAC in deploy/rbac allows every call of the adapter and nothing else.

Each test records every request its ServiceAccount's transport makes that the apiserver
authorized (a spy on the transport's one send path) and checks both ways against the rules
of deploy/rbac: each call is allowed by a rule of ours, and each rule was used by a call
that worked. A right the code no longer uses, or a call the test stopped making, fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from slonkd.adapters.kube.configmaps import OwnedConfigMap
from slonkd.adapters.kube.errors import Call, KubeForbidden
from slonkd.adapters.kube.events import EventRecorder, EventSettings
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
from slonkd_sandbox.kube.cluster import KubeCluster
from tests.contract.kube_helpers import pending_pod, running, until
from tests.rig import Rig

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


@dataclass(frozen=True, slots=True)
class Access:
    """One request as RBAC sees it (``resource`` carries the subresource: pods/eviction)."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str


def access_of(method: str, path: str, query: Mapping[str, str] | None) -> Access:
    """The RBAC attributes of one request, as the apiserver's request-info resolver finds them."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = "/".join(rest[0:3:2])  # resource[/subresource]
    name = rest[1] if len(rest) > 1 else ""
    if method == "GET":
        watch = (query or {}).get("watch") in ("1", "true")
        verb = "watch" if watch else "get" if name else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
    return Access(verb=verb, group=group, resource=resource, namespace=namespace, name=name)


@dataclass(frozen=True, slots=True)
class Grant:
    """One verb on one resource (and name) that a Role or ClusterRole of deploy/rbac grants."""

    role: str
    namespace: str | None  # None: a ClusterRole, bound cluster-wide
    verb: str
    group: str
    resource: str
    name: str  # "": any name

    def allows(self, a: Access) -> bool:
        """Whether this grant authorizes ``a``."""
        return (
            (self.verb, self.group, self.resource) == (a.verb, a.group, a.resource)
            and self.name in ("", a.name)
            and self.namespace in (None, a.namespace)
        )


def grants_of(files: list[str], namespace: str) -> list[Grant]:
    """The rules of deploy/rbac/<file>.yaml, a Role applied in ``namespace`` unless it names one."""
    out = []
    for file in files:
        for doc in yaml.safe_load_all((RBAC / f"{file}.yaml").read_text()):
            meta = doc["metadata"]
            where = meta.get("namespace", namespace) if doc["kind"] == "Role" else None
            for rule in doc["rules"]:
                out += [
                    Grant(f"{doc['kind']} {meta['name']}", where, verb, group, res, name)
                    for group in rule["apiGroups"]
                    for res in rule["resources"]
                    for verb in rule["verbs"]
                    for name in rule.get("resourceNames", [""])
                ]
    return out


def spy(monkeypatch: pytest.MonkeyPatch, transport: KubeTransport) -> list[Access]:
    """Every request of ``transport`` that the apiserver authorized (any status but 401/403)."""
    seen: list[Access] = []
    send = transport._send

    async def recording(
        call: Call, method: str, path: str, *, query: Mapping[str, str] | None, **kw: Any
    ) -> aiohttp.ClientResponse:
        response = await send(call, method, path, query=query, **kw)
        if response.status not in (401, 403):
            seen.append(access_of(method, path, query))
        return response

    monkeypatch.setattr(transport, "_send", recording)
    return seen


def assert_exactly_used(grants: list[Grant], seen: list[Access]) -> None:
    """Each authorized call is one of our rules' and each rule served a call: no spare right."""
    assert seen
    ungranted = {a for a in seen if not any(g.allows(a) for g in grants)}
    assert not ungranted, f"calls no rule of deploy/rbac allows: {ungranted}"
    unused = [g for g in grants if not any(g.allows(a) for a in seen)]
    assert not unused, f"rules no call of the code uses: {unused}"


async def watching(seen: list[Access], *resources: str) -> None:
    """Wait until the informers of ``resources`` have their watch requests authorized."""
    watched = {res: False for res in resources}

    def all_watched() -> bool:
        watched.update((a.resource, True) for a in seen if a.verb == "watch")
        return all(watched[r] for r in resources)

    await until(f"watches of {resources}", all_watched)


@pytest.fixture
async def cleanup(kube: KubeCluster) -> AsyncIterator[list[str]]:
    """Paths of cluster-scoped objects to delete after the test."""
    paths: list[str] = []
    yield paths
    for path in paths:
        kube.api.request("DELETE", path, ok=(200, 202, 404))


async def test_coordinator_role_allows_all_it_does_and_forbids_the_rest(
    rig: Rig,
    cleanup: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With only deploy/rbac, the coordinator watches, changes, evicts, leads; the rest: 403.

    Node Events go to the node event namespace ("default", a Role there), the breaker's
    Event on its state ConfigMap to its own namespace; Events anywhere else, deleting or
    reading single pods, reading a StatefulSet by name and patching ConfigMaps are refused,
    and every rule of deploy/rbac is used by one of these calls.
    """
    tag = rig.namespace
    for crb in _bind(rig.kube, rig.namespace, "coord", "coordinator", tag):
        cleanup.append(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{crb}")
    rig.kube.kubectl("apply", "-f", str(RBAC / "coordinator-node-events.yaml"))
    rig.kube.api.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        {
            "metadata": {"name": f"slonkd-node-events-{tag}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "slonkd-node-events",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coord", "namespace": rig.namespace}],
        },
    )
    cleanup.append(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/slonkd-node-events-{tag}"
    )
    (node,) = rig.kube.add_fake_nodes([rig.unique("rbac")], wait_ready_s=None)
    cleanup.append(f"/api/v1/nodes/{node}")
    pod = rig.kube.api.request(
        "POST", f"/api/v1/namespaces/{rig.namespace}/pods", pending_pod("w-0")
    )
    rig.kube.api.request("POST", f"/api/v1/namespaces/{rig.namespace}/pods", pending_pod("w-1"))
    transport = await _transport_for(rig.kube, rig.namespace, "coord", rig.tmp_path)
    seen = spy(monkeypatch, transport)
    try:
        nodes, pods = coordinator_informers(transport, rig.namespace, pod_selector="app=w")
        statefulsets = statefulset_informer(transport, rig.namespace)
        async with running(nodes), running(pods), running(statefulsets):
            await watching(seen, "nodes", "pods", "statefulsets")
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
        events = EventRecorder(transport)  # as the coordinator makes it: default settings
        assert EventSettings().node_event_namespace == "default"
        node_ref = ObjectRef(kind="Node", name=node)
        for _ in range(2):  # create, then patch the count
            assert (await events.record(node_ref, type_="Normal", reason="R", message="m")).done
        # the breaker's Event is about its state ConfigMap, in the coordinator's namespace
        state_ref = ObjectRef(kind="ConfigMap", name="slonkd-state", namespace=rig.namespace)
        for _ in range(2):
            assert (await events.record(state_ref, type_="Normal", reason="R", message="m")).done
        pods_w = PodWriter(transport)
        uid = pod["metadata"]["uid"]
        evicted = await pods_w.evict(rig.namespace, "w-0", uid=uid)
        assert evicted.outcome is ChangeOutcome.CHANGED
        elector = LeaderElector(
            transport,
            LeaseSettings(
                name="slonkd-coordinator",
                namespace=rig.namespace,
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
            # Lead until cancelled: a work that returns ends the term, and the campaign's
            # own give-up (GET, PUT) raced the release below; its PUT, cancelled mid-flight by
            # the task.cancel(), reached the apiserver unrecorded ("rules no call uses:
            # update leases" in a full run).
            await asyncio.Event().wait()

        task = asyncio.create_task(elector.run(work))
        try:
            async with asyncio.timeout(10):
                await leading.wait()
            assert elector.is_valid()
            await elector.release()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        store = StateStore(transport, rig.namespace, "slonkd-state")
        await store.update(got[0], lambda s: CoordinatorState(nodes_out=frozenset({node})))
        await store.update(got[0], lambda s: s)
        assert (await store.load()).nodes_out == {node}
        topology = OwnedConfigMap(transport, rig.namespace, "slonkd-topology")
        assert (await topology.publish({"topology.conf": "# a\n"})).detail == "created"
        assert (await topology.publish({"topology.conf": "# b\n"})).detail == "updated"
        token = rig.kube.create_token(rig.namespace, "default")
        who = await review_token(transport, token)
        assert who.authenticated
        assert who.namespace == rig.namespace
        assert who.service_account == "default"
        # find_worker_pod: the credential issuer's check that the token's pod is a worker
        assert await find_worker_pod(transport, rig.namespace, "nobody", selector="app=w") is None
        # Outside the rules: delete a node, write another ConfigMap.
        with pytest.raises(KubeForbidden, match=r'resources: \["nodes"\], verbs: \["delete"\]'):
            await transport.request(
                Call(verb="delete", resource="nodes", name=node), "DELETE", f"/api/v1/nodes/{node}"
            )
        other = StateStore(transport, rig.namespace, "not-slonkd-state")
        with pytest.raises(KubeForbidden, match=r'resources: \["configmaps"\], verbs: \["get"\]'):
            await other.update(got[0], lambda s: CoordinatorState(breaker_open=True))
        with pytest.raises(KubeForbidden, match=r'resources: \["configmaps"\], verbs: \["get"\]'):
            await OwnedConfigMap(transport, rig.namespace, "kube-root-ca.crt").publish({"x": "y"})
        with pytest.raises(KubeForbidden, match="pods/eviction"):
            await PodWriter(transport).evict("default", "anything")
        with pytest.raises(KubeForbidden, match=r'resources: \["statefulsets"\], verbs: \["patch"'):
            await transport.request(
                Call(verb="patch", resource="statefulsets", group="apps", namespace=rig.namespace),
                "PATCH",
                f"/apis/apps/v1/namespaces/{rig.namespace}/statefulsets/w",
                body={"spec": {"replicas": 0}},
                content_type="application/merge-patch+json",
            )
        # Events only in its namespace and the node event namespace, never elsewhere
        elsewhere = ObjectRef(kind="Pod", name="x", namespace="kube-system")
        with pytest.raises(KubeForbidden, match=r'resources: \["events"\], verbs: \["create"\]'):
            await EventRecorder(transport).record(
                elsewhere, type_="Normal", reason="R", message="m"
            )
        other_ns = EventRecorder(transport, EventSettings(node_event_namespace="kube-system"))
        with pytest.raises(KubeForbidden, match=r'resources: \["events"\], verbs: \["create"\]'):
            await other_ns.record(node_ref, type_="Normal", reason="R", message="m")
        # pods are evicted (PDBs hold), never deleted; no single pod or StatefulSet is read
        with pytest.raises(KubeForbidden, match=r'resources: \["pods"\], verbs: \["delete"\]'):
            await pods_w.delete(rig.namespace, "w-1", grace_s=0)
        with pytest.raises(KubeForbidden, match=r'resources: \["pods"\], verbs: \["get"\]'):
            await transport.request(
                Call(verb="get", resource="pods", namespace=rig.namespace, name="w-1"),
                "GET",
                f"/api/v1/namespaces/{rig.namespace}/pods/w-1",
            )
        with pytest.raises(KubeForbidden, match=r'resources: \["statefulsets"\], verbs: \["get"'):
            await transport.request(
                Call(verb="get", resource="statefulsets", group="apps", namespace=rig.namespace),
                "GET",
                f"/apis/apps/v1/namespaces/{rig.namespace}/statefulsets/w",
            )
        # its ConfigMaps are replaced (PUT with a resourceVersion), never patched
        with pytest.raises(KubeForbidden, match=r'resources: \["configmaps"\], verbs: \["patch"'):
            await transport.request(
                Call(verb="patch", resource="configmaps", namespace=rig.namespace),
                "PATCH",
                f"/api/v1/namespaces/{rig.namespace}/configmaps/slonkd-state",
                body={"data": {}},
                content_type="application/merge-patch+json",
            )
    finally:
        await transport.close()
    assert_exactly_used(grants_of(["coordinator", "coordinator-node-events"], rig.namespace), seen)


async def test_agent_role_watches_its_own_objects_and_cannot_write(
    rig: Rig,
    cleanup: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With deploy/rbac/agent.yaml the agent syncs its pod and node, and writes nothing.

    Its informers list and watch by field selector; a cordon, an Event (in its namespace or
    the node event namespace) and a GET of its own pod or node are refused; every rule of
    agent.yaml is used by the informers.
    """
    for crb in _bind(rig.kube, rig.namespace, "agent", "agent", rig.namespace):
        cleanup.append(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{crb}")
    (node,) = rig.kube.add_fake_nodes([rig.unique("rbac-agent")], wait_ready_s=None)
    cleanup.append(f"/api/v1/nodes/{node}")
    rig.kube.api.request("POST", f"/api/v1/namespaces/{rig.namespace}/pods", pending_pod("w-0"))
    transport = await _transport_for(rig.kube, rig.namespace, "agent", rig.tmp_path)
    seen = spy(monkeypatch, transport)
    try:
        nodes, pods = agent_informers(transport, rig.namespace, pod_name="w-0", node_name=node)
        async with running(nodes), running(pods):
            await watching(seen, "nodes", "pods")
            assert list(nodes.items()) == [node]
            assert list(pods.items()) == [f"{rig.namespace}/w-0"]
        with pytest.raises(KubeForbidden, match="missing RBAC rule"):
            await NodeWriter(transport).cordon(node, cause="agent must not")
        events = EventRecorder(transport)
        for ref in (
            ObjectRef(kind="Pod", name="w-0", namespace=rig.namespace),
            ObjectRef(kind="Node", name=node),
        ):
            with pytest.raises(KubeForbidden, match=r'resources: \["events"\], verbs: \["create"'):
                await events.record(ref, type_="Normal", reason="R", message="agent must not")
        for call, path in (
            (Call(verb="get", resource="nodes", name=node), f"/api/v1/nodes/{node}"),
            (
                Call(verb="get", resource="pods", namespace=rig.namespace, name="w-0"),
                f"/api/v1/namespaces/{rig.namespace}/pods/w-0",
            ),
        ):
            with pytest.raises(KubeForbidden, match=r'verbs: \["get"\]'):
                await transport.request(call, "GET", path)
    finally:
        await transport.close()
    assert_exactly_used(grants_of(["agent"], rig.namespace), seen)
