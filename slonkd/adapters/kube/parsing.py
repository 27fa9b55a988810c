"""Raw apiserver JSON (decoded dicts) -> :mod:`slonkd.core.kube_objects` values. Pure.

Only the fields slonkd decides on are kept: the rest of each object (managedFields, specs,
images, last-applied annotations) is dropped as soon as it is parsed, which is what keeps a
5,000-node cache small. Annotations are kept only under ``slonk.dev/`` (slonkd's own marks
and the operator's hold), labels in full (topology and pools live there). Repeated strings
(label keys and values, namespaces, condition types) are interned so that thousands of
objects share one copy.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from slonkd.core.errors import ParseError
from slonkd.core.kube_objects import (
    SLONK_PREFIX,
    ContainerState,
    KubeNodeName,
    Node,
    NodeCondition,
    Pod,
    PodName,
    PodPhase,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

_INTERN_MAX = 64


def _s(value: Any) -> str:
    text = "" if value is None else str(value)
    return sys.intern(text) if len(text) <= _INTERN_MAX else text


def _labels(raw: Any) -> Mapping[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {_s(k): _s(v) for k, v in raw.items()}


def _our_annotations(raw: Any) -> Mapping[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {_s(k): str(v) for k, v in raw.items() if k.startswith(SLONK_PREFIX)}


def _meta(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ParseError(f"{kind} without metadata.name: {str(obj)[:200]}")
    return meta


def pod_from_json(obj: Mapping[str, Any]) -> Pod:
    """A :class:`Pod` from the apiserver's JSON for one pod."""
    meta = _meta(obj, "pod")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ready_conditions = [
        c
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
    ]
    ready = bool(ready_conditions)
    ready_at = ready_conditions[0].get("lastTransitionTime") if ready_conditions else None
    disrupted = next(
        (
            c
            for c in status.get("conditions") or ()
            if isinstance(c, Mapping)
            and c.get("type") == "DisruptionTarget"
            and c.get("status") == "True"
        ),
        None,
    )
    disruption = _s(disrupted.get("reason")) if disrupted is not None else None
    disrupted_at = disrupted.get("lastTransitionTime") if disrupted is not None else None
    created = meta.get("creationTimestamp")
    containers = tuple(
        ContainerState(
            name=_s(c.get("name")),
            ready=bool(c.get("ready")),
            restart_count=int(c.get("restartCount") or 0),
        )
        for c in status.get("containerStatuses") or ()
    )
    try:
        phase = PodPhase(status.get("phase") or "Pending")
    except ValueError:
        phase = PodPhase.UNKNOWN
    node_name = spec.get("nodeName")
    grace = meta.get("deletionGracePeriodSeconds")
    termination = spec.get("terminationGracePeriodSeconds")
    return Pod(
        name=PodName(meta["name"]),
        namespace=_s(meta.get("namespace")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        node_name=KubeNodeName(_s(node_name)) if node_name else None,
        phase=phase,
        ready=ready,
        ready_since=ready_at if isinstance(ready_at, str) else None,
        deletion_timestamp=meta.get("deletionTimestamp"),
        deletion_grace_s=int(grace) if grace is not None else None,
        termination_grace_s=int(termination) if termination is not None else None,
        containers=containers,
        labels=_labels(meta.get("labels")),
        annotations=_our_annotations(meta.get("annotations")),
        disruption=disruption,
        disruption_since=disrupted_at if isinstance(disrupted_at, str) else None,
        created=created if isinstance(created, str) else None,
        tolerations=_tolerations(spec.get("tolerations")),
    )


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    """The pod's ``spec.tolerations``; an entry that cannot be read is left out.

    A toleration left out hides no taint (:mod:`slonkd.core.tolerations`): slonkd then treats
    that taint as maintenance, the safe side. The apiserver validates tolerations, so this
    only guards against a newer Kubernetes' operator or a malformed object.
    """
    if not isinstance(raw, list):
        return ()
    return tuple(t for t in map(_toleration, raw) if t is not None)


def _toleration(raw: Any) -> Toleration | None:
    """One toleration, or None when a field is not what Kubernetes allows there."""
    if not isinstance(raw, Mapping):
        return None
    key, value = raw.get("key", ""), raw.get("value", "")
    operator, effect = raw.get("operator") or "Equal", raw.get("effect") or None
    seconds = raw.get("tolerationSeconds")
    if not isinstance(key, str | None) or not isinstance(value, str | None):
        return None
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        return None
    if not isinstance(operator, str) or not isinstance(effect, str | None):
        return None
    try:
        op = TolerationOperator(operator)
        kind = None if effect is None else TaintEffect(effect)
    except ValueError:
        return None
    return Toleration(key=_s(key), operator=op, value=_s(value), effect=kind, seconds=seconds)


def taint_from_json(raw: Mapping[str, Any]) -> Taint:
    """A :class:`Taint` from one entry of ``spec.taints``."""
    try:
        effect = TaintEffect(raw.get("effect", ""))
    except ValueError as exc:
        raise ParseError(f"taint with unknown effect: {raw}") from exc
    return Taint(
        key=_s(raw.get("key")),
        effect=effect,
        value=_s(raw.get("value")),
        time_added=raw.get("timeAdded"),
    )


def taint_to_json(taint: Taint) -> dict[str, Any]:
    """The JSON of a taint as the apiserver stores it (empty value and time left out)."""
    out: dict[str, Any] = {"key": taint.key, "effect": str(taint.effect)}
    if taint.value:
        out["value"] = taint.value
    if taint.time_added:
        out["timeAdded"] = taint.time_added
    return out


def node_from_json(obj: Mapping[str, Any]) -> Node:
    """A :class:`Node` from the apiserver's JSON for one node."""
    meta = _meta(obj, "node")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = tuple(
        NodeCondition(
            type=_s(c.get("type")),
            status=_s(c.get("status")),
            reason=_s(c.get("reason")),
            message=str(c.get("message") or ""),
            last_transition_time=c.get("lastTransitionTime"),
        )
        for c in status.get("conditions") or ()
    )
    return Node(
        name=KubeNodeName(meta["name"]),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(taint_from_json(t) for t in spec.get("taints") or ()),
        conditions=conditions,
        labels=_labels(meta.get("labels")),
        annotations=_our_annotations(meta.get("annotations")),
        deletion_timestamp=meta.get("deletionTimestamp"),
    )


def field_owners(obj: Mapping[str, Any], *path: str) -> set[str]:
    """Managers whose managedFields entry owns the field at ``path`` (e.g. spec, unschedulable).

    Status-subresource entries are ignored: only writes to the main resource count.
    """
    owners: set[str] = set()
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if entry.get("subresource"):
            continue
        fields: Any = entry.get("fieldsV1") or {}
        for part in path:
            fields = fields.get(f"f:{part}") if isinstance(fields, dict) else None
            if fields is None:
                break
        else:
            owners.add(str(entry.get("manager", "")))
    return owners
