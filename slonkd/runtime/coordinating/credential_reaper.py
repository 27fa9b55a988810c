"""The leader revokes the MQTT clients of pods that are gone.

Issued credentials must not outlive their pod. The leader's worker pod informer hands every
deletion to :meth:`CredentialReaper.on_pod_event`; :meth:`CredentialReaper.run` deletes that
agent's dynsec client (and its role) if it was issued to the deleted pod's uid (a successor of
the same name that already got its own client keeps it) and, when no pod of that name is left (a
scale-down), purges the session the broker keeps for its client id. Every delete is of the client
as read: one issued anew between the read and the delete (another replica serving the successor)
is left alone (:meth:`~slonkd.adapters.bus.dynsec.DynSecAdmin.delete_if_held`). At leader start, and
then every ``sweep_s``, :meth:`CredentialReaper.sweep` catches what was missed (deletions
while no leader ran, a failed revocation): it deletes every agent client whose worker pod
(by uid, or by name for a client issued before uids were recorded) no longer exists, and
every coordinator client whose pod no longer exists, with their sessions. The leader's own
client and clients slonkd did not issue (the admin) are never touched.

It decides nothing about SLURM or Kubernetes; a failure is logged and left to the next sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from slonkd.adapters.bus.dynsec import ClientRecord, DynSecAdmin
from slonkd.adapters.bus.dynsec_roles import agent_client_id, agent_username
from slonkd.adapters.kube.informer import CacheEvent, EventType, Informer
from slonkd.adapters.kube.tokenreview import find_worker_pod
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import ParseError, SlonkdError
from slonkd.core.kube_objects import Pod
from slonkd.core.messages import check_name

log = structlog.get_logger("slonkd.credentials")

AGENT_PREFIX = "agent-"
COORDINATOR_PREFIX = "coordinator-"


class CredentialReaper:
    """Deletes the dynsec clients of deleted pods; one per leader term."""

    def __init__(
        self,
        admin: DynSecAdmin,
        *,
        transport: KubeTransport,
        namespace: str,
        pod_selector: str,
        pods: Informer[Pod],
        own_client: str,
        sweep_s: float = 600.0,
    ) -> None:
        self.admin = admin
        self._transport = transport
        self._namespace = namespace
        self._selector = pod_selector
        self._pods = pods
        self._own = own_client
        self._sweep_s = sweep_s
        self._deleted: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.revoked = 0

    def on_pod_event(self, event: CacheEvent[Any]) -> None:
        """Informer handler: queue each deleted worker pod (name, uid) for revocation."""
        if event.type is EventType.DELETED and isinstance(event.obj, Pod):
            self._deleted.put_nowait((str(event.obj.name), event.obj.uid))

    async def run(self) -> None:
        """Sweep, then revoke deleted pods' clients as they come, sweeping every ``sweep_s``."""
        while True:
            with contextlib.suppress(SlonkdError):  # logged; tried again at the next sweep
                await self._logged(self.sweep(), "sweep")
            try:
                async with asyncio.timeout(self._sweep_s):
                    while True:
                        name, uid = await self._deleted.get()
                        with contextlib.suppress(SlonkdError):
                            await self._logged(self.revoke_pod(name, uid), name)
            except TimeoutError:
                continue

    async def _logged(self, work: Any, what: str) -> Any:
        try:
            return await work
        except SlonkdError as exc:
            log.warning("bus.revocation_failed", target=what[:80], error=str(exc)[:200])
            raise

    async def revoke_pod(self, name: str, uid: str) -> bool:
        """Delete the agent client of deleted pod ``name``/``uid``; whether one was deleted.

        A client recorded for another uid belongs to a successor and stays.
        """
        try:
            username = agent_username(name)
        except ParseError:
            return False
        held = await self.admin.client(username)
        if held is None or (held.pod_uid and held.pod_uid != uid):
            return False
        return await self._delete(held, purge=self._cached(name) is None, cause="pod-deleted")

    def _cached(self, name: str) -> Pod | None:
        return self._pods.get(f"{self._namespace}/{name}")

    async def sweep(self) -> list[str]:
        """Delete every issued client whose pod is gone; the usernames deleted."""
        removed = []
        for held in await self.admin.records():
            if held.username == self._own:
                continue
            if held.username.startswith(AGENT_PREFIX):
                gone, purge = await self._agent_gone(held)
            elif held.username.startswith(COORDINATOR_PREFIX):
                gone = purge = await self._coordinator_gone(held)
            else:
                continue  # not issued by slonkd (the admin)
            if gone and await self._delete(held, purge=purge, cause="sweep"):
                removed.append(held.username)
        log.info("bus.credentials_swept", removed=len(removed))
        return removed

    async def _agent_gone(self, held: ClientRecord) -> tuple[bool, bool]:
        """(its pod is gone, no pod of its name is left) for an agent client."""
        name = held.username.removeprefix(AGENT_PREFIX)
        try:
            check_name(name, "node")
        except ParseError:
            return False, False
        pod = self._cached(name)
        if pod is None or (held.pod_uid and pod.uid != held.pod_uid):
            # the cache may lag behind a pod just created: ask the apiserver before deleting
            pod = await find_worker_pod(
                self._transport, self._namespace, name, selector=self._selector
            )
        if pod is not None and (not held.pod_uid or pod.uid == held.pod_uid):
            return False, False
        return True, pod is None

    async def _coordinator_gone(self, held: ClientRecord) -> bool:
        """Whether the pod of a coordinator client no longer exists (any labels)."""
        pod = held.pod or held.username.removeprefix(COORDINATOR_PREFIX)
        try:
            check_name(pod, "pod")
        except ParseError:
            return False
        found = await find_worker_pod(self._transport, self._namespace, pod, selector="")
        return found is None

    async def _delete(self, held: ClientRecord, *, purge: bool, cause: str) -> bool:
        """Delete ``held`` if dynsec still holds it as read; whether it was deleted."""
        if not await self.admin.delete_if_held(held):
            log.info(
                "bus.credentials_kept",
                username=held.username,
                pod_uid=held.pod_uid,
                cause=cause,
                detail="gone or issued anew since it was read (a successor's): left alone",
            )
            return False
        client_id = held.client_id
        if not client_id and held.username.startswith(AGENT_PREFIX):
            client_id = agent_client_id(held.username.removeprefix(AGENT_PREFIX))
        if purge and client_id:
            await self.admin.purge_session(client_id)
        self.revoked += 1
        log.info(
            "bus.credentials_revoked",
            username=held.username,
            pod_uid=held.pod_uid,
            session_purged=purge and bool(client_id),
            cause=cause,
        )
        return True
