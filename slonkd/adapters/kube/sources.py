"""The watched resources: worker pods and nodes, for the coordinator (all) or an agent (its own).

The coordinator watches every node and the worker pods selected by label; an agent watches
exactly its own pod and its own node by field selector, with its first list served from the
apiserver's watch cache (``resourceVersion=0``) so that thousands of agents starting at once
do not each cost a quorum read of etcd.
"""

from __future__ import annotations

from slonkd.adapters.kube.errors import Call
from slonkd.adapters.kube.informer import Informer, InformerSettings, Source
from slonkd.adapters.kube.parsing import node_from_json, pod_from_json
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_objects import Node, Pod


def node_source(*, name: str = "", label_selector: str = "") -> Source[Node]:
    """All nodes (optionally by label), or one node by name."""
    return Source(
        call=Call(verb="watch", resource="nodes"),
        path="/api/v1/nodes",
        parse=node_from_json,
        label_selector=label_selector,
        field_selector=f"metadata.name={name}" if name else "",
    )


def pod_source(namespace: str, *, label_selector: str = "", name: str = "") -> Source[Pod]:
    """Worker pods of one namespace by label, or one pod by name."""
    return Source(
        call=Call(verb="watch", resource="pods", namespace=namespace),
        path=f"/api/v1/namespaces/{namespace}/pods",
        parse=pod_from_json,
        label_selector=label_selector,
        field_selector=f"metadata.name={name}" if name else "",
    )


def coordinator_informers(
    transport: KubeTransport,
    namespace: str,
    *,
    pod_selector: str,
    settings: InformerSettings | None = None,
) -> tuple[Informer[Node], Informer[Pod]]:
    """The coordinator's caches: every node, and the worker pods matching ``pod_selector``."""
    return (
        Informer(transport, node_source(), settings),
        Informer(transport, pod_source(namespace, label_selector=pod_selector), settings),
    )


def agent_informers(
    transport: KubeTransport,
    namespace: str,
    *,
    pod_name: str,
    node_name: str,
    settings: InformerSettings | None = None,
) -> tuple[Informer[Node], Informer[Pod]]:
    """An agent's caches: only its own node and its own pod, first listed from the watch cache."""
    agent = settings or InformerSettings(from_watch_cache=True)
    return (
        Informer(transport, node_source(name=node_name), agent),
        Informer(transport, pod_source(namespace, name=pod_name), agent),
    )
