"""Per-agent MQTT credentials through mosquitto's dynamic-security plugin.

A StatefulSet cannot mount one Secret per pod, so the coordinator issues each agent its own
client at start (after checking the agent's pod-bound ServiceAccount token): a role that
may publish only its own node's ``status`` and ``events`` topics and subscribe only to its
own ``commands``, and a fresh random password, replaced on every issue (a restarted pod
gets a new one; the old one stops working). Every client is bound to one client id, so no
credential can connect under another client's id: client ids are predictable, and a
connection under a taken id would kick its owner off and resume its session. Only the
coordinator's admin client talks to ``$CONTROL/dynamic-security/v1``; nothing here builds a
topic from unchecked text.

A client issued to a pod records the pod's uid (its ``textdescription``), so it can be
revoked when that pod is gone and never when its successor of the same name holds it, and
its password is derived from the admin's secret and the pod uid (:func:`pod_password`): any
replica answers a retried request for the same pod uid with the same password and without
touching the broker (the description also holds a tag of the password, so a changed admin
secret re-keys it). Deleting a client closes its connection; :meth:`DynSecAdmin.delete_if_held`
deletes only the client a caller read (not one issued anew meanwhile);
:meth:`DynSecAdmin.purge_session` also drops the session the broker keeps for its client id.
With ``ca_file`` the admin talks TLS, verifying the broker as the bus does
(:func:`~slonkd.adapters.bus.client.tls_context`). The clients' names and roles are in
:mod:`.dynsec_roles`; one admin connection and its batches in :mod:`.dynsec_link`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import re
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiomqtt
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from slonkd.adapters.bus.client import tls_context
from slonkd.adapters.bus.dynsec_link import Link, open_link
from slonkd.adapters.bus.dynsec_roles import agent_client_id, agent_role, agent_username, own_role
from slonkd.core.errors import ParseError, TerminalError, TransientError
from slonkd.core.messages import check_name

log = structlog.get_logger("slonkd.bus.dynsec")

_CLIENT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_POD_UID_RE = re.compile(r"pod-uid=([A-Za-z0-9-]{1,64}) tag=([0-9a-f]{16})")
_POD_RE = re.compile(r"pod=([A-Za-z0-9][A-Za-z0-9._-]{0,252})")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentCredentials:
    """What an agent needs to connect: its username and password."""

    username: str
    password: str
    client_id: str
    """The only MQTT client id this client may connect with (dynsec binds the two)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientRecord:
    """One client dynsec holds, with what slonkd recorded about its owner."""

    username: str
    client_id: str
    pod_uid: str = ""
    """The pod uid an agent client was issued to ("": none recorded)."""
    tag: str = ""
    """A tag of the issued password (see :func:`pod_password`)."""
    pod: str = ""
    """The pod a coordinator client belongs to ("": none recorded)."""


def pod_password(secret: str, username: str, pod_uid: str) -> tuple[str, str]:
    """The password of ``username`` issued to pod ``pod_uid``, and its tag.

    An HMAC of the admin's secret (shared by every coordinator replica), so a retry for the
    same pod uid gets the same password from any replica, and nobody without the secret can
    compute it. The tag (a hash of the password) tells whether dynsec holds this very
    password; it reveals no more than the salted hash dynsec stores anyway.
    """
    message = f"slonkd-agent-password/v1/{username}/{pod_uid}".encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    password = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    return password, hashlib.sha256(password.encode()).hexdigest()[:16]


def _record(raw: dict[str, Any]) -> ClientRecord:
    text = str(raw.get("textdescription", ""))
    by_uid = _POD_UID_RE.fullmatch(text)
    by_pod = _POD_RE.fullmatch(text)
    return ClientRecord(
        username=str(raw.get("username", "")),
        client_id=str(raw.get("clientid", "")),
        pod_uid=by_uid.group(1) if by_uid else "",
        tag=by_uid.group(2) if by_uid else "",
        pod=by_pod.group(1) if by_pod else "",
    )


class DynSecAdmin:
    """Issues and revokes agent credentials as the broker's dynsec admin."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        username: str,
        password: str,
        timeout_s: float = 10.0,
        ca_file: str | None = None,
    ) -> None:
        """``ca_file``: connect with TLS, verifying the broker against this CA bundle.

        The bundle is read again for every connection: a rotated one counts from the next call.
        """
        self._args = {"hostname": host, "port": port, "username": username, "password": password}
        self._ca_file = ca_file
        self._secret = password
        self._timeout_s = timeout_s
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def _link(self) -> AsyncIterator[Link]:
        """One admin connection (:func:`~.dynsec_link.open_link`), this admin's only one at a time.

        A connection costs a round of CONNECT/CONNACK, and over TLS 1.3 mosquitto 2.0 (without
        ``set_tcp_nodelay``) answers a CONNECT ~40 ms late, Nagle on its side waiting for our
        delayed ACK (measured: TLS 1.2, plain MQTT or the broker's ``set_tcp_nodelay true``
        answer in under 1 ms): what one decision needs (check, then change) goes over one
        connection.
        """
        async with self._lock, open_link(self._connection(), self._timeout_s) as link:
            yield link

    def _connection(self) -> dict[str, object]:
        """aiomqtt's arguments for one connection, the CA bundle read now."""
        try:
            context = tls_context(self._ca_file)
        except ValueError as exc:
            raise TransientError(str(exc)) from None
        return {**self._args, "tls_context": context}

    async def _call(self, commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send one batch of commands on a connection of its own; the broker's responses."""
        async with self._link() as link:
            return await link.ask(commands)

    async def issue(self, cluster: str, node: str, *, pod_uid: str = "") -> AgentCredentials:
        """Create (or re-key) ``node``'s agent client and role; return the new password.

        With ``pod_uid``: the pod's derived password (:func:`pod_password`), and the uid is
        recorded; without: a random one.
        """
        async with self._link() as link:
            return await self._issue(link, cluster, node, pod_uid)

    async def current(self, node: str, pod_uid: str) -> AgentCredentials | None:
        """``node``'s credentials for pod ``pod_uid`` if dynsec already holds them, else None."""
        async with self._link() as link:
            return await self._current(link, node, pod_uid)

    async def ensure_agent(
        self,
        cluster: str,
        node: str,
        pod_uid: str,
        *,
        before_change: Callable[[], None] = lambda: None,
    ) -> tuple[AgentCredentials, bool]:
        """``node``'s credentials for pod ``pod_uid``, and whether dynsec was changed for them.

        :meth:`current`, and :meth:`issue` only when dynsec does not hold them already, over
        one admin connection (one CONNECT, ~40 ms over TLS 1.3, not two); this admin
        makes no other call in between. ``before_change`` runs before a change and may raise
        to refuse it (the issuer's per-pod limit counts only changes).
        """
        async with self._link() as link:
            held = await self._current(link, node, pod_uid)
            if held is not None:
                return held, False
            before_change()
            return await self._issue(link, cluster, node, pod_uid), True

    async def _issue(self, link: Link, cluster: str, node: str, pod_uid: str) -> AgentCredentials:
        username = agent_username(node)
        role = agent_role(cluster, node)
        password, note = secrets.token_urlsafe(24), ""
        if pod_uid:
            password, tag = pod_password(self._secret, username, _check_uid(pod_uid))
            note = f"pod-uid={pod_uid} tag={tag}"
        client_id = agent_client_id(node)
        await _replace(link, username, password, role, client_id, note)
        log.info("bus.agent_credentials_issued", node=node, username=username, pod_uid=pod_uid)
        return AgentCredentials(username=username, password=password, client_id=client_id)

    async def _current(self, link: Link, node: str, pod_uid: str) -> AgentCredentials | None:
        username = agent_username(node)
        password, tag = pod_password(self._secret, username, _check_uid(pod_uid))
        held = await _client(link, username)
        client_id = agent_client_id(node)
        if held is None or (held.pod_uid, held.tag, held.client_id) != (pod_uid, tag, client_id):
            return None
        return AgentCredentials(username=username, password=password, client_id=client_id)

    async def ensure_client(
        self, username: str, password: str, role: dict[str, Any], *, client_id: str, pod: str = ""
    ) -> None:
        """Create or replace a fixed client (the coordinator's) with ``role``.

        ``pod``: the pod it belongs to, recorded so the leader can delete it once that is gone.
        ``client_id`` "": bound to no client id (slonkd-nudge, one process per trigger run).
        """
        if client_id and not _CLIENT_ID_RE.fullmatch(client_id):
            raise ParseError(f"bad MQTT client id: {client_id[:80]!r}")
        if pod and not _POD_RE.fullmatch(f"pod={pod}"):
            raise ParseError(f"bad pod name: {pod[:80]!r}")
        note = f"pod={pod}" if pod else ""
        async with self._link() as link:
            await _replace(link, check_name(username, "client"), password, role, client_id, note)
        log.info("bus.client_ensured", username=username, role=role["rolename"])

    async def clients(self) -> list[str]:
        """The usernames dynsec knows (for checks and tests)."""
        responses = await self._call([{"command": "listClients", "count": -1, "offset": 0}])
        data = responses[0].get("data") if responses else None
        names = data.get("clients") if isinstance(data, dict) else None
        if not isinstance(names, list):
            raise TransientError(f"unexpected listClients answer: {str(responses)[:200]}")
        return [str(n) for n in names]

    async def records(self) -> list[ClientRecord]:
        """Every client dynsec holds, with what slonkd recorded about its owner."""
        responses = await self._call(
            [{"command": "listClients", "verbose": True, "count": -1, "offset": 0}]
        )
        data = responses[0].get("data") if responses else None
        found = data.get("clients") if isinstance(data, dict) else None
        if not isinstance(found, list):
            raise TransientError(f"unexpected listClients answer: {str(responses)[:200]}")
        return [_record(c) for c in found if isinstance(c, dict)]

    async def client(self, username: str) -> ClientRecord | None:
        """The client ``username`` (None: dynsec holds none)."""
        async with self._link() as link:
            return await _client(link, username)

    async def revoke(self, node: str) -> None:
        """Delete ``node``'s agent client (its connection is closed by the broker)."""
        username = agent_username(node)
        await self.delete_client(username)
        log.info("bus.agent_credentials_revoked", node=node, username=username)

    async def delete_client(self, username: str) -> None:
        """Delete the client ``username`` and its own role (the broker closes its connection).

        Every client slonkd makes has a role of its own, ``slonk-<username>``: left behind, the
        roles of nodes gone for good would pile up in dynsec. The client goes first, as in
        :func:`_replace` (mosquitto#2660); either one already gone is no error.
        """
        name = check_name(username, "client")
        await self._call(
            [
                {"command": "deleteClient", "username": name},
                {"command": "deleteRole", "rolename": own_role(name)},
            ]
        )

    async def delete_if_held(self, held: ClientRecord) -> bool:
        """Delete ``held``'s client and role only if dynsec still holds that very client.

        dynsec has no conditional delete, and between a caller's read and its delete another
        replica may issue the name anew (a pod's successor): by name alone, the successor's
        fresh client would go. So the client is read again on the delete's own connection,
        right before it, and deleted only if its record is the one read (the pod uid and the
        password tag an issue writes, the client id, the coordinator pod). The window left is
        one round trip on one connection. Whether it was deleted (False: gone or re-issued).
        """
        name = check_name(held.username, "client")
        async with self._link() as link:
            if await _client(link, name) != held:
                return False
            await link.ask(
                [
                    {"command": "deleteClient", "username": name},
                    {"command": "deleteRole", "rolename": own_role(name)},
                ]
            )
        return True

    async def purge_session(self, client_id: str) -> None:
        """Drop the session the broker keeps for ``client_id`` (and what it queued).

        Connects as the admin under that id with a clean start and no session expiry: the
        broker discards the old session and forgets the new one on disconnect. Only for the
        id of a client that is gone: a live one would be kicked off by the takeover.
        """
        if not _CLIENT_ID_RE.fullmatch(client_id):
            raise ParseError(f"bad MQTT client id: {client_id[:80]!r}")
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho is untyped here
        props.SessionExpiryInterval = 0
        try:
            async with (
                asyncio.timeout(self._timeout_s),
                aiomqtt.Client(
                    **self._connection(),  # type: ignore[arg-type]
                    identifier=client_id,
                    protocol=aiomqtt.ProtocolVersion.V5,
                    clean_start=True,
                    properties=props,
                ),
            ):
                pass
        except TimeoutError as exc:
            raise TransientError("the broker did not answer a session purge") from exc
        except aiomqtt.MqttError as exc:
            raise TransientError(f"session purge failed: {exc}") from exc


async def _replace(
    link: Link, username: str, password: str, role: dict[str, Any], client_id: str, note: str = ""
) -> None:
    """Recreate ``role`` and ``username`` (new password, bound to ``client_id``) in one batch.

    The client goes first: mosquitto 2.0 crashes when a role is deleted while a client still
    holds it once dynsec holds a few dozen clients (eclipse-mosquitto/mosquitto#2660).
    """
    responses = await link.ask(
        [
            {"command": "deleteClient", "username": username},
            {"command": "deleteRole", "rolename": role["rolename"]},
            {"command": "createRole", **role},
            {
                "command": "createClient",
                "username": username,
                "password": password,
                **({"clientid": client_id} if client_id else {}),
                "textdescription": note,
                "roles": [{"rolename": role["rolename"]}],
            },
        ]
    )
    errors = [r.get("error") for r in responses[2:] if r.get("error")]  # the creations
    if len(responses) != 4 or errors:
        raise TerminalError(f"dynsec refused the client {username}: {errors or responses}")


async def _client(link: Link, username: str) -> ClientRecord | None:
    """The client ``username`` (None: dynsec holds none)."""
    responses = await link.ask([{"command": "getClient", "username": username}])
    data = responses[0].get("data") if responses else None
    raw = data.get("client") if isinstance(data, dict) else None
    if isinstance(raw, dict):
        return _record(raw)
    if responses and responses[0].get("error") == "Client not found":
        return None
    raise TransientError(f"unexpected getClient answer: {str(responses)[:200]}")


def _check_uid(uid: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", uid):
        raise ParseError(f"bad pod uid: {uid[:80]!r}")
    return uid
