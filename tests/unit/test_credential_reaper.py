"""The credential reaper deletes a client only while it is still the one it read.

Issue 37 item 8b. The reaper reads an agent's dynsec client, decides its pod is gone, then
deletes it; between the read and the delete another replica may issue that name's client to
the pod's successor (a StatefulSet recreates it under the same name; any replica serves
``POST /v1/credentials``). Deleting by name then revoked the successor's fresh client. The
real :class:`~slonkd.runtime.coordinating.credential_reaper.CredentialReaper` and
:class:`~slonkd.adapters.bus.dynsec.DynSecAdmin` run over mosquitto's dynamic-security plugin
faked in memory (its commands, one batch at a time); the successor's issue lands between the
reaper's read and its delete. Neighbours: the contract ``test_bus_credentials`` (the real
broker and apiserver: revocation on deletion, the sweep), ``test_credential_limits``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

from slonkd.adapters.bus.dynsec import DynSecAdmin
from slonkd.adapters.bus.dynsec_link import Link
from slonkd.adapters.kube.informer import Informer
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_objects import Pod
from slonkd.runtime.coordinating.credential_reaper import CredentialReaper

CLUSTER = "lab"


class _Dynsec:
    """The dynamic-security plugin in memory: clients and roles, one batch at a time.

    ``after_read``, when set, runs once right after a batch that read clients was answered
    (another admin's batch landing next, before this admin's following one).
    """

    def __init__(self) -> None:
        self.clients: dict[str, dict[str, Any]] = {}
        self.roles: set[str] = set()
        self.after_read: Callable[[], Awaitable[None]] | None = None

    async def ask(self, commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The responses to one batch, in order (the batch is applied as one)."""
        responses = [self._one(c) for c in commands]
        reads = {"getClient", "listClients"} & {c["command"] for c in commands}
        if reads and self.after_read is not None:
            hook, self.after_read = self.after_read, None
            await hook()
        return responses

    def _one(self, c: dict[str, Any]) -> dict[str, Any]:
        what = c["command"]
        answer: dict[str, Any] = {"command": what}
        if what == "getClient":
            held = self.clients.get(c["username"])
            if held is None:
                return {**answer, "error": "Client not found"}
            return {**answer, "data": {"client": copy.deepcopy(held)}}
        if what == "listClients":
            return {**answer, "data": {"clients": copy.deepcopy(list(self.clients.values()))}}
        if what == "deleteClient":
            if self.clients.pop(c["username"], None) is None:
                return {**answer, "error": "Client not found"}
            return answer
        if what == "deleteRole":
            if c["rolename"] not in self.roles:
                return {**answer, "error": "Role not found"}
            self.roles.discard(c["rolename"])
            return answer
        if what == "createRole":
            if c["rolename"] in self.roles:
                return {**answer, "error": "Role already exists"}
            self.roles.add(c["rolename"])
            return answer
        if what == "createClient":
            if c["username"] in self.clients:
                return {**answer, "error": "Client already exists"}
            self.clients[c["username"]] = {
                "username": c["username"],
                "clientid": c.get("clientid", ""),
                "textdescription": c.get("textdescription", ""),
                "roles": c.get("roles", []),
            }
            return answer
        raise AssertionError(f"unexpected dynsec command {what}")


class _Admin(DynSecAdmin):
    """A dynsec admin whose connections reach the in-memory plugin (purges are recorded)."""

    def __init__(self, dynsec: _Dynsec) -> None:
        super().__init__(host="broker.invalid", port=1883, username="admin", password="secret")
        self.dynsec = dynsec
        self.purged: list[str] = []

    @contextlib.asynccontextmanager
    async def _link(self) -> AsyncIterator[Link]:
        yield cast(Link, self.dynsec)

    async def purge_session(self, client_id: str) -> None:
        """Recorded (the real one connects under that id)."""
        self.purged.append(client_id)


class _NoPods:
    """The worker pod informer's cache and the apiserver: no pod of any name (yet).

    ``on_list`` runs after the apiserver answered a pod list (the answer already made).
    """

    def __init__(self) -> None:
        self.on_list: Callable[[], Awaitable[None]] | None = None

    def get(self, key: str) -> Pod | None:
        """Not cached."""
        return None

    async def request(self, *_: Any, **__: Any) -> dict[str, Any]:
        """An empty pod list."""
        if self.on_list is not None:
            await self.on_list()
        return {"items": []}


def _reaper(admin: DynSecAdmin, pods: _NoPods) -> CredentialReaper:
    return CredentialReaper(
        admin,
        transport=cast(KubeTransport, pods),
        namespace="slonk",
        pod_selector="app=w",
        pods=cast(Informer[Pod], pods),
        own_client="coordinator-me",
    )


async def _issued(dynsec: _Dynsec, uid: str) -> _Admin:
    """w-3's agent client issued to pod ``uid`` by a replica's admin (which is returned)."""
    issuer = _Admin(dynsec)
    await issuer.ensure_agent(CLUSTER, "w-3", uid)
    return issuer


async def test_a_successor_issued_between_the_read_and_the_delete_keeps_its_client() -> None:
    """Pod w-3 (uid old) deleted; its successor (uid new) gets its client right after the read.

    The revocation of the old pod must leave the successor's client and role alone.
    """
    dynsec = _Dynsec()
    issuer = await _issued(dynsec, "old")
    pods = _NoPods()
    reaper = _reaper(_Admin(dynsec), pods)

    async def successor() -> None:
        await issuer.ensure_agent(CLUSTER, "w-3", "new")

    dynsec.after_read = successor
    assert await reaper.revoke_pod("w-3", "old") is False
    held = dynsec.clients.get("agent-w-3")
    assert held is not None, "the successor's client was deleted"
    assert held["textdescription"].startswith("pod-uid=new ")
    assert "slonk-agent-w-3" in dynsec.roles
    assert reaper.revoked == 0


async def test_a_successor_issued_while_the_sweep_asks_the_apiserver_keeps_its_client() -> None:
    """The sweep read the clients, the apiserver has no w-3, then w-3's successor got one.

    The apiserver's answer predates the successor's pod; the client the sweep read is gone
    (re-issued) by the time it deletes: nothing is deleted, no session purged.
    """
    dynsec = _Dynsec()
    issuer = await _issued(dynsec, "old")
    pods = _NoPods()
    admin = _Admin(dynsec)
    reaper = _reaper(admin, pods)

    async def successor() -> None:
        pods.on_list = None
        await issuer.ensure_agent(CLUSTER, "w-3", "new")

    pods.on_list = successor
    assert await reaper.sweep() == []
    held = dynsec.clients.get("agent-w-3")
    assert held is not None, "the successor's client was deleted"
    assert held["textdescription"].startswith("pod-uid=new ")
    assert "slonk-agent-w-3" in dynsec.roles
    assert admin.purged == []


async def test_a_gone_pods_client_that_nobody_reissued_is_deleted_with_its_role() -> None:
    """Without a successor the revocation and the sweep still delete (and purge the session)."""
    dynsec = _Dynsec()
    await _issued(dynsec, "old")
    admin = _Admin(dynsec)
    reaper = _reaper(admin, _NoPods())
    assert await reaper.revoke_pod("w-3", "old") is True
    assert ("agent-w-3" in dynsec.clients, "slonk-agent-w-3" in dynsec.roles) == (False, False)
    assert admin.purged == ["slonkd-agent-w-3"]
    await _issued(dynsec, "old")
    assert await reaper.sweep() == ["agent-w-3"]
    assert dynsec.clients == {}
    assert reaper.revoked == 2
