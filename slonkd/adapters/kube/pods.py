"""Taking a worker pod away: eviction through the Eviction API, or deletion with a grace period.

Both carry the pod's uid as a precondition, so a decision taken about one pod never hits its
replacement (a StatefulSet reuses the name). A 429 from the Eviction API means a
PodDisruptionBudget forbids it right now: that is a normal answer, reported as REFUSED with
the server's message, not an error. A pod already gone (404, or another uid: 409) is GONE.
"""

from __future__ import annotations

from typing import Any

from slonkd.adapters.kube.errors import Call, KubeConflict, KubeNotFound, KubeTooManyRequests
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult


def _delete_options(uid: str, grace_s: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"preconditions": {"uid": uid}} if uid else {}
    if grace_s is not None:
        options["gracePeriodSeconds"] = grace_s
    return options


class PodWriter:
    """Evictions and deletions of pods, by name and uid."""

    def __init__(self, transport: KubeTransport) -> None:
        self._transport = transport

    async def evict(
        self, namespace: str, name: str, *, uid: str = "", grace_s: int | None = None
    ) -> ChangeResult:
        """Ask the Eviction API to evict the pod; REFUSED while a PDB forbids it."""
        call = Call(
            verb="create", resource="pods", subresource="eviction", namespace=namespace, name=name
        )
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": _delete_options(uid, grace_s),
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        try:
            await self._transport.request(call, "POST", path, body=body)
        except KubeTooManyRequests as exc:
            return ChangeResult(outcome=ChangeOutcome.REFUSED, detail=str(exc))
        except KubeNotFound as exc:
            return ChangeResult(outcome=ChangeOutcome.GONE, detail=str(exc))
        except KubeConflict as exc:  # the uid precondition: the name now has another pod
            return ChangeResult(outcome=ChangeOutcome.GONE, detail=str(exc))
        return ChangeResult(outcome=ChangeOutcome.CHANGED)

    async def delete(
        self, namespace: str, name: str, *, uid: str = "", grace_s: int | None = None
    ) -> ChangeResult:
        """Delete the pod with the given grace period (None: the pod's own)."""
        call = Call(verb="delete", resource="pods", namespace=namespace, name=name)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **_delete_options(uid, grace_s)}
        try:
            await self._transport.request(call, "DELETE", path, body=body)
        except (KubeNotFound, KubeConflict) as exc:
            return ChangeResult(outcome=ChangeOutcome.GONE, detail=str(exc))
        return ChangeResult(outcome=ChangeOutcome.CHANGED)
