"""Worker StatefulSets for rollouts: the watched source and the parser of one object.

The coordinator watches the StatefulSets of the workers' namespace (RBAC: ``statefulsets``
get/list/watch in ``apps``) to learn each one's ``status.updateRevision`` and update
strategy; it never writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slonkd.adapters.kube.errors import Call
from slonkd.adapters.kube.informer import Informer, InformerSettings, Source
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import ParseError
from slonkd.core.rollout_phase import StatefulSetRevision


def statefulset_from_json(obj: Mapping[str, Any]) -> StatefulSetRevision:
    """A :class:`StatefulSetRevision` from the apiserver's JSON for one StatefulSet."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ParseError(f"statefulset without metadata.name: {str(obj)[:200]}")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    strategy = (spec.get("updateStrategy") or {}).get("type") or "RollingUpdate"
    match = (spec.get("selector") or {}).get("matchLabels") or {}
    return StatefulSetRevision(
        name=str(meta["name"]),
        namespace=str(meta.get("namespace") or ""),
        update_revision=str(status.get("updateRevision") or ""),
        current_revision=str(status.get("currentRevision") or ""),
        replicas=int(spec.get("replicas") or 0),
        on_delete=strategy == "OnDelete",
        selector={str(k): str(v) for k, v in match.items()},
    )


def statefulset_source(namespace: str) -> Source[StatefulSetRevision]:
    """Every StatefulSet of ``namespace``."""
    return Source(
        call=Call(verb="watch", resource="statefulsets", group="apps", namespace=namespace),
        path=f"/apis/apps/v1/namespaces/{namespace}/statefulsets",
        parse=statefulset_from_json,
    )


def statefulset_informer(
    transport: KubeTransport, namespace: str, settings: InformerSettings | None = None
) -> Informer[StatefulSetRevision]:
    """A cache of the StatefulSets of ``namespace``."""
    return Informer(transport, statefulset_source(namespace), settings)
