"""A ConfigMap slonkd owns: created with an owner label, replaced only while it carries it.

The chart does not template these ConfigMaps (e.g. ``topology.conf``): the coordinator creates
them. One that exists without slonkd's owner label belongs to someone else: slonkd reports
FOREIGN and writes nothing. An update is a PUT with the read resourceVersion as precondition,
retried on conflict; equal data is UNCHANGED and sends no write.

:class:`NamedConfigMap` is the bare read, create and replace of one ConfigMap, shared with
the coordinator's state (:class:`~slonkd.adapters.kube.state.StateStore`), whose rules
(fencing, no owner label) are its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from slonkd.adapters.kube.errors import Call, KubeConflict, KubeNotFound
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TransientError
from slonkd.core.kube_changes import ChangeOutcome, ChangeResult

OWNER_LABEL: Final = "app.kubernetes.io/managed-by"
OWNER_VALUE: Final = "slonkd"


class NamedConfigMap:
    """One named ConfigMap in one namespace: read it, create it, replace it."""

    def __init__(
        self, transport: KubeTransport, namespace: str, name: str, *, conflict_retries: int = 8
    ) -> None:
        self._transport = transport
        self.namespace = namespace
        self.name = name
        self.retries = conflict_retries
        """How often a write that met a conflict is tried again (the owner's loop)."""
        self._collection = f"/api/v1/namespaces/{namespace}/configmaps"

    def _call(self, verb: str) -> Call:
        return Call(verb=verb, resource="configmaps", namespace=self.namespace, name=self.name)

    async def read(self) -> dict[str, Any] | None:
        """The ConfigMap's JSON, None if it does not exist."""
        try:
            return await self._transport.request(
                self._call("get"), "GET", f"{self._collection}/{self.name}"
            )
        except KubeNotFound:
            return None

    async def create(
        self, data: Mapping[str, str], labels: Mapping[str, str] | None = None
    ) -> None:
        """Create it with ``data`` (KubeConflict: it exists meanwhile)."""
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if labels is not None:
            metadata["labels"] = dict(labels)
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(data)}
        await self._transport.request(self._call("create"), "POST", self._collection, body=body)

    async def replace(self, obj: dict[str, Any]) -> None:
        """Write ``obj`` as read and changed (KubeConflict: changed since it was read)."""
        await self._transport.request(
            self._call("update"), "PUT", f"{self._collection}/{self.name}", body=obj
        )


class OwnedConfigMap(NamedConfigMap):
    """One named ConfigMap in one namespace whose data slonkd publishes."""

    async def publish(self, data: Mapping[str, str]) -> ChangeResult:
        """Make the ConfigMap's data exactly ``data`` (create it, owner-labelled, if missing)."""
        for _attempt in range(self.retries):
            obj = await self.read()
            try:
                if obj is None:
                    await self.create(data, {OWNER_LABEL: OWNER_VALUE})
                    return ChangeResult(outcome=ChangeOutcome.CHANGED, detail="created")
                labels = obj.get("metadata", {}).get("labels") or {}
                if labels.get(OWNER_LABEL) != OWNER_VALUE:
                    return ChangeResult(
                        outcome=ChangeOutcome.FOREIGN,
                        detail=f"configmap {self.namespace}/{self.name} exists without "
                        f"{OWNER_LABEL}={OWNER_VALUE}: not slonkd's, left as it is",
                    )
                if (obj.get("data") or {}) == dict(data):
                    return ChangeResult(outcome=ChangeOutcome.UNCHANGED)
                obj["data"] = dict(data)
                await self.replace(obj)
                return ChangeResult(outcome=ChangeOutcome.CHANGED, detail="updated")
            except KubeConflict:  # created or changed meanwhile: read again
                continue
        raise TransientError(f"configmap {self.name}: still conflicting after {self.retries} tries")
