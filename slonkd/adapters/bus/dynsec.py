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
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiomqtt
import structlog

from slonkd.core.errors import ParseError, TerminalError, TransientError
from slonkd.core.messages import Channel, check_name, node_topic

log = structlog.get_logger("slonkd.bus.dynsec")

CONTROL_TOPIC = "$CONTROL/dynamic-security/v1"
RESPONSE_TOPIC = f"{CONTROL_TOPIC}/response"
_CLIENT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentCredentials:
    """What an agent needs to connect: its username and password."""

    username: str
    password: str
    client_id: str
    """The only MQTT client id this client may connect with (dynsec binds the two)."""


def agent_username(node: str) -> str:
    """The MQTT username of ``node``'s agent."""
    return f"agent-{check_name(node, 'node')}"


def agent_client_id(node: str) -> str:
    """The MQTT client id of ``node``'s agent (bound to its username in dynsec)."""
    return f"slonkd-agent-{check_name(node, 'node')}"


def agent_role(cluster: str, node: str) -> dict[str, Any]:
    """The dynsec role of ``node``'s agent: its own topics and nothing else."""
    own = {
        ch: str(node_topic(cluster, node, ch))
        for ch in (Channel.STATUS, Channel.EVENTS, Channel.COMMANDS)
    }
    return {
        "rolename": f"slonk-{agent_username(node)}",
        "acls": [
            {"acltype": "publishClientSend", "topic": own[Channel.STATUS], "allow": True},
            {"acltype": "publishClientSend", "topic": own[Channel.EVENTS], "allow": True},
            {"acltype": "subscribeLiteral", "topic": own[Channel.COMMANDS], "allow": True},
            {"acltype": "publishClientReceive", "topic": own[Channel.COMMANDS], "allow": True},
            {
                "acltype": "subscribeLiteral",
                "topic": f"slonk/v1/{cluster}/coordinator/status",
                "allow": True,
            },
            {
                "acltype": "publishClientReceive",
                "topic": f"slonk/v1/{cluster}/coordinator/status",
                "allow": True,
            },
        ],
    }


def coordinator_role(cluster: str, username: str) -> dict[str, Any]:
    """The dynsec role of the coordinator: send every node's commands and its own status."""
    root = f"slonk/v1/{check_name(cluster, 'cluster')}"
    return {
        "rolename": f"slonk-{check_name(username, 'client')}",
        "acls": [
            {"acltype": "publishClientSend", "topic": f"{root}/nodes/+/commands", "allow": True},
            {"acltype": "publishClientSend", "topic": f"{root}/coordinator/status", "allow": True},
            {"acltype": "subscribePattern", "topic": f"{root}/#", "allow": True},
            {"acltype": "publishClientReceive", "topic": f"{root}/#", "allow": True},
        ],
    }


class DynSecAdmin:
    """Issues and revokes agent credentials as the broker's dynsec admin."""

    def __init__(
        self, *, host: str, port: int, username: str, password: str, timeout_s: float = 10.0
    ) -> None:
        self._args = {"hostname": host, "port": port, "username": username, "password": password}
        self._timeout_s = timeout_s
        self._lock = asyncio.Lock()

    async def _call(self, commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send one batch of commands and return the broker's responses, in order."""
        async with self._lock:
            try:
                async with (
                    asyncio.timeout(self._timeout_s),
                    aiomqtt.Client(**self._args, protocol=aiomqtt.ProtocolVersion.V5) as client,  # type: ignore[arg-type]
                ):
                    await client.subscribe(RESPONSE_TOPIC, qos=1)
                    await client.publish(
                        CONTROL_TOPIC, json.dumps({"commands": list(commands)}), qos=1
                    )
                    async for message in client.messages:
                        if not isinstance(message.payload, bytes):
                            continue
                        responses = json.loads(message.payload).get("responses", [])
                        if isinstance(responses, list):
                            return [r for r in responses if isinstance(r, dict)]
            except TimeoutError as exc:
                raise TransientError("no answer from the dynamic-security plugin") from exc
            except aiomqtt.MqttError as exc:
                if "authorized" in str(exc).lower():
                    raise TerminalError(f"the broker refused the dynsec admin: {exc}") from exc
                raise TransientError(f"dynsec call failed: {exc}") from exc
        raise TransientError("the broker closed the dynsec response stream")

    async def issue(self, cluster: str, node: str) -> AgentCredentials:
        """Create (or re-key) ``node``'s agent client and role; return the new password."""
        username = agent_username(node)
        role = agent_role(cluster, node)
        password = secrets.token_urlsafe(24)
        client_id = agent_client_id(node)
        await self._replace(username, password, role, client_id)
        log.info("bus.agent_credentials_issued", node=node, username=username)
        return AgentCredentials(username=username, password=password, client_id=client_id)

    async def ensure_client(
        self, username: str, password: str, role: dict[str, Any], *, client_id: str
    ) -> None:
        """Create or replace a fixed client (the coordinator's) with ``role``."""
        if not _CLIENT_ID_RE.fullmatch(client_id):
            raise ParseError(f"bad MQTT client id: {client_id[:80]!r}")
        await self._replace(check_name(username, "client"), password, role, client_id)
        log.info("bus.client_ensured", username=username, role=role["rolename"])

    async def _replace(
        self, username: str, password: str, role: dict[str, Any], client_id: str
    ) -> None:
        """Recreate ``role`` and ``username`` (new password, bound to ``client_id``)."""
        responses = await self._call(
            [
                {"command": "deleteRole", "rolename": role["rolename"]},
                {"command": "createRole", **role},
                {"command": "deleteClient", "username": username},
                {
                    "command": "createClient",
                    "username": username,
                    "password": password,
                    "clientid": client_id,
                    "roles": [{"rolename": role["rolename"]}],
                },
            ]
        )
        errors = [r.get("error") for r in responses[1::2] if r.get("error")]
        if len(responses) != 4 or errors:
            raise TerminalError(f"dynsec refused the client {username}: {errors or responses}")

    async def clients(self) -> list[str]:
        """The usernames dynsec knows (for checks and tests)."""
        responses = await self._call([{"command": "listClients", "count": -1, "offset": 0}])
        data = responses[0].get("data") if responses else None
        names = data.get("clients") if isinstance(data, dict) else None
        if not isinstance(names, list):
            raise TransientError(f"unexpected listClients answer: {str(responses)[:200]}")
        return [str(n) for n in names]

    async def revoke(self, node: str) -> None:
        """Delete ``node``'s agent client (its connection is closed by the broker)."""
        username = agent_username(node)
        await self._call([{"command": "deleteClient", "username": username}])
        log.info("bus.agent_credentials_revoked", node=node, username=username)
