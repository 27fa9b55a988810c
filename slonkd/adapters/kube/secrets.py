"""A Secret made once: created when absent, never replaced, its data never read out.

:func:`ensure_secret` reads the Secret by name; a 404 creates it with fresh values
(:func:`slonkd.core.secret_spec.make_data`; a TLS Secret's type is ``kubernetes.io/tls``,
any other's ``Opaque``), and a 409 on that create (someone made it meanwhile) keeps the one
that won. One that exists is kept as it is: only its key names are looked at, so that a
Secret an operator made without a key the pods need is reported.

One exception to "never written": a Secret an older chart rendered itself (Helm's
``meta.helm.sh/release-name`` annotation or ``app.kubernetes.io/managed-by: Helm`` label,
which ``helm template`` renders too) would be deleted by the ``helm upgrade`` whose chart no
longer renders it, or pruned by Argo CD. The pre-upgrade (PreSync) Job runs first and adds
``helm.sh/resource-policy: keep`` and Argo CD's ``Prune=false`` sync option to it (a merge
patch of those annotations, data untouched), so neither deletes it; from then on it is
made-once like the others.

Neighbours: :mod:`slonkd.core.secret_spec` (the spec, the values),
:mod:`slonkd.cli.secrets_cmd` (``slonkd secrets ensure``), :mod:`slonkd.adapters.kube.transport`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from slonkd.adapters.kube.errors import Call, KubeConflict, KubeNotFound
from slonkd.adapters.kube.transport import MERGE_PATCH, KubeTransport
from slonkd.core.secret_spec import SecretSpec, make_data

HELM_RELEASE: Final = "meta.helm.sh/release-name"
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
RESOURCE_POLICY: Final = "helm.sh/resource-policy"
SYNC_OPTIONS: Final = "argocd.argoproj.io/sync-options"
NO_PRUNE: Final = "Prune=false"


class Outcome(StrEnum):
    """What :func:`ensure_secret` did with one Secret."""

    CREATED = "created"
    KEPT = "kept"
    RELEASED_FROM_HELM = "kept, released from Helm (helm.sh/resource-policy: keep, Prune=false)"


def _call(verb: str, namespace: str, name: str = "") -> Call:
    return Call(verb=verb, resource="secrets", namespace=namespace, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ensured:
    """One Secret's outcome, and the keys of the spec it lacks (only a kept one can)."""

    name: str
    outcome: Outcome
    missing: tuple[str, ...] = ()


async def _read(transport: KubeTransport, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await transport.request(
            _call("get", namespace, name), "GET", f"/api/v1/namespaces/{namespace}/secrets/{name}"
        )
    except KubeNotFound:
        return None


async def _keep(
    transport: KubeTransport, namespace: str, spec: SecretSpec, obj: dict[str, Any]
) -> Ensured:
    have = set(obj.get("data") or {})
    missing = tuple(k.key for k in spec.keys if k.key not in have)
    added = release_from_helm(obj.get("metadata") or {})
    if not added:
        return Ensured(name=spec.name, outcome=Outcome.KEPT, missing=missing)
    await transport.request(
        _call("patch", namespace, spec.name),
        "PATCH",
        f"/api/v1/namespaces/{namespace}/secrets/{spec.name}",
        body={"metadata": {"annotations": added}},
        content_type=MERGE_PATCH,
    )
    return Ensured(name=spec.name, outcome=Outcome.RELEASED_FROM_HELM, missing=missing)


def release_from_helm(metadata: dict[str, Any]) -> dict[str, str]:
    """The annotations that keep a Secret an older chart rendered from deletion; {} if none."""
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    if HELM_RELEASE not in annotations and labels.get(MANAGED_BY) != "Helm":
        return {}
    added = {}
    if annotations.get(RESOURCE_POLICY) != "keep":
        added[RESOURCE_POLICY] = "keep"
    options = [o.strip() for o in str(annotations.get(SYNC_OPTIONS, "")).split(",") if o.strip()]
    if NO_PRUNE not in options:
        added[SYNC_OPTIONS] = ",".join([*options, NO_PRUNE])
    return added


async def ensure_secret(transport: KubeTransport, namespace: str, spec: SecretSpec) -> Ensured:
    """Create ``spec``'s Secret in ``namespace`` if it is absent; keep it if it exists."""
    obj = await _read(transport, namespace, spec.name)
    if obj is None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": spec.name, "namespace": namespace, "labels": dict(spec.labels)},
            "type": spec.type,
            "data": make_data(spec),
        }
        try:
            await transport.request(
                _call("create", namespace),
                "POST",
                f"/api/v1/namespaces/{namespace}/secrets",
                body=body,
            )
        except KubeConflict:  # AlreadyExists: made meanwhile; that one stays
            obj = await _read(transport, namespace, spec.name)
            if obj is None:
                raise
        else:
            return Ensured(name=spec.name, outcome=Outcome.CREATED)
    return await _keep(transport, namespace, spec, obj)


__all__ = ["Ensured", "Outcome", "ensure_secret", "release_from_helm"]
