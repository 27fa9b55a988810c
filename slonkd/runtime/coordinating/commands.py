"""The coordinator's side of agent commands: fenced, unique, QoS 1, never retained.

:class:`CommandSender` publishes a :class:`~slonkd.core.messages.Command` to one agent's
commands topic with a fresh random id and the leader's fencing token, read from the Lease
right before publishing (a paused old leader raises instead of sending). It also announces
the leader's token in the retained coordinator status, so an agent that connects later
refuses whatever an older leader queued for it. The agent's side is
:mod:`slonkd.runtime.agent.commands`.

``POST /v1/nodes/{node}/recheck`` asks the leader to send ``recheck`` to one agent. It is
bound to loopback: only a client inside the coordinator's pod (``kubectl exec`` or
``kubectl port-forward``, i.e. whoever RBAC lets do that) may call it; any other peer gets
403. It decides nothing about SLURM or Kubernetes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import time
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from slonkd.adapters.bus.client import Bus
from slonkd.core.command_gate import KNOWN_ACTIONS, RECHECK
from slonkd.core.errors import ParseError, SlonkdError, TransientError
from slonkd.core.messages import (
    Channel,
    Command,
    CoordinatorStatus,
    check_name,
    coordinator_topic,
    node_topic,
)

log = structlog.get_logger("slonkd.commands")


def command_id() -> str:
    """A fresh, unguessable command id (16 characters of [A-Za-z0-9_-])."""
    return secrets.token_urlsafe(12)


class CommandSender:
    """Publishes fenced commands and the leader's status through the coordinator's bus."""

    def __init__(
        self,
        bus: Bus,
        *,
        cluster: str,
        identity: str,
        check_valid: Callable[[], int],
        publish_timeout_s: float = 10.0,
    ) -> None:
        self._bus = bus
        self._cluster = cluster
        self._identity = identity
        self._check_valid = check_valid
        self._timeout_s = publish_timeout_s
        self.sent = 0

    async def announce(self) -> None:
        """Publish the retained coordinator status with this leader's fencing token."""
        token = self._check_valid()
        status = CoordinatorStatus(
            online=True, leader=self._identity, fencing_token=token, at=time.time()
        )
        await self._bus.publish(
            coordinator_topic(self._cluster), status, retain=True, timeout_s=self._timeout_s
        )
        log.info("bus.coordinator_announced", leader=self._identity)

    async def announce_when_connected(self, retry_s: float = 1.0) -> None:
        """:meth:`announce`, retried while the broker is unreachable (a task of the leader)."""
        while True:
            try:
                await self.announce()
                return
            except TransientError as exc:
                log.warning("bus.coordinator_announce_failed", error=str(exc)[:200])
                await asyncio.sleep(retry_s)

    async def send(self, node: str, action: str, *, cause: str, detail: str = "") -> Command:
        """Publish ``action`` to ``node``'s agent (QoS 1, not retained); the command sent."""
        if action not in KNOWN_ACTIONS:
            raise ParseError(f"unknown command action {action[:40]!r}")
        topic = node_topic(self._cluster, node, Channel.COMMANDS)
        token = self._check_valid()  # right before publishing: a paused old leader stops here
        command = Command(
            id=command_id(),
            node=node,
            action=action,
            cause=cause,
            fencing_token=token,
            detail=detail,
            at=time.time(),
        )
        await self._bus.publish(topic, command, retain=False, timeout_s=self._timeout_s)
        self.sent += 1
        log.info(
            "bus.command_sent",
            node=node,
            action=action,
            cause=cause,
            command_id=command.id,
            owner="coordinator",
        )
        return command


def loopback(remote: str | None) -> bool:
    """Whether the peer's address is a loopback one (None or not an address: no)."""
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


async def recheck_endpoint(
    request: web.Request, leader: Any, not_leading: Callable[[], web.Response | None]
) -> web.Response:
    """``POST /v1/nodes/{node}/recheck``: loopback only; the leader sends ``recheck``."""
    node = request.match_info["node"]
    if not loopback(request.remote):
        log.warning("bus.recheck_refused", reason="not from loopback", remote=request.remote)
        return web.json_response({"error": "only from inside the coordinator's pod"}, status=403)
    if (refusal := not_leading()) is not None:
        return refusal
    sender: CommandSender | None = getattr(leader, "commands", None)
    if sender is None:
        return web.json_response({"error": "this coordinator has no bus"}, status=409)
    try:
        check_name(node, "node")
    except ParseError:
        return web.json_response({"error": "bad node name"}, status=400)
    if node not in {str(p.name) for p in leader.pods.items().values()}:
        return web.json_response({"error": f"no worker pod {node!r}"}, status=404)
    try:
        command = await sender.send(node, RECHECK, cause="operator-recheck", detail="API request")
    except SlonkdError as exc:  # lease lost (terminal) or broker unreachable (transient)
        return web.json_response({"error": str(exc)[:200]}, status=503)
    return web.json_response(
        {"id": command.id, "node": node, "action": RECHECK, "fencing_token": command.fencing_token}
    )
