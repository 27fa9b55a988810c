"""The agent's side of the bus: its client, the commands it obeys, the status it may publish.

:func:`agent_bus` builds the agent's :class:`~slonkd.adapters.bus.client.Bus`: a stable client
id and a persistent session (a command queued while the agent is away, or across a broker
restart, is delivered when it is back), subscribed to its own commands and to the
coordinator's retained status, with credentials either static or fetched from the
coordinator (:mod:`slonkd.adapters.bus.bootstrap`), fetched again if the broker refuses them.

:class:`CommandListener` reads the bus and passes every command through a
:class:`~slonkd.core.command_gate.CommandGate`: repeats, commands for another node, unknown
actions and commands carrying an older leader's fencing token are refused and logged with
why; the coordinator's status raises the token floor. The one action is ``recheck``: run
every health check now and republish the status. It never touches SLURM or Kubernetes.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace

import structlog

from slonkd.adapters.bus.bootstrap import BootstrapSettings, fetch_credentials
from slonkd.adapters.bus.client import Bus, BusSettings, Received
from slonkd.core.command_gate import RECHECK, CommandGate
from slonkd.core.errors import ParseError
from slonkd.core.messages import (
    AgentStatus,
    Channel,
    Command,
    CoordinatorStatus,
    Topic,
    coordinator_topic,
    decode,
    encode,
    health_key,
    node_topic,
)
from slonkd.runtime.agent.health_loop import HealthLoop

log = structlog.get_logger("slonkd.agent.commands")

Handler = Callable[[Command], Awaitable[None]]


def agent_subscriptions(cluster: str, node: str) -> list[str]:
    """The agent's topics: its own commands and the coordinator's retained status."""
    return [str(node_topic(cluster, node, Channel.COMMANDS)), str(coordinator_topic(cluster))]


def agent_bus(
    settings: BusSettings,
    *,
    cluster: str,
    node: str,
    will: tuple[Topic, AgentStatus],
    bootstrap: BootstrapSettings | None = None,
) -> Bus:
    """The agent's bus: persistent session, own subscriptions, static or issued credentials."""

    async def issued() -> tuple[str, str]:
        assert bootstrap is not None  # noqa: S101 - only used with a bootstrap
        creds = await fetch_credentials(bootstrap)
        return creds.username, creds.password

    return Bus(
        settings,
        subscriptions=agent_subscriptions(cluster, node),
        will=will,
        credentials=issued if bootstrap is not None else None,
    )


async def republish_on_reconnect(bus: Bus, publish: Callable[[], Awaitable[None]]) -> None:
    """Publish the status on every connection, the first one too.

    Each reconnect: a kick or a rotation fires the will. The first is not taken for granted:
    an agent whose bootstrap waits on its coordinator connects long after its first publish
    gave up.
    """
    seen = 0
    while True:
        seen = await bus.next_connect(seen)
        await publish()


async def run_checks_now(health: HealthLoop | None, publish: Callable[[], Awaitable[None]]) -> None:
    """Run every health check once, now (verdict changes are published), then publish."""
    if health is not None:
        async with asyncio.TaskGroup() as group:
            for check in health.checks:
                group.create_task(
                    health.run_once(check, on_demand=True), name=f"recheck:{check.name}"
                )
    await publish()


class CommandListener:
    """Reads the agent's bus and obeys the commands its gate admits."""

    def __init__(self, bus: Bus, *, node: str, recheck: Handler, memory: int = 1024) -> None:
        self.bus = bus
        self.gate = CommandGate(node=node, memory=memory)
        self._handlers: dict[str, Handler] = {RECHECK: recheck}
        self.obeyed: list[str] = []
        """Ids of the commands obeyed, oldest first (the last ``memory``; tests and status)."""
        self.refused: Counter[str] = Counter()
        self._memory = memory

    async def run(self) -> None:
        """Handle messages until cancelled."""
        async for message in self.bus.messages():
            await self.handle(message)

    async def handle(self, message: Received) -> None:
        """One validated message: learn a leader's token, or obey or refuse a command."""
        payload = message.payload
        if isinstance(payload, CoordinatorStatus):
            newer = self.gate.observe(payload)
            log.info(
                "agent.leader_seen",
                node=self.gate.node,
                leader=payload.leader,
                online=payload.online,
                fencing_token=payload.fencing_token,
                newest_token=self.gate.newest_token,
                newer=newer,
            )
            return
        if not isinstance(payload, Command):
            return
        bound = log.bind(
            node=self.gate.node,
            command_id=payload.id,
            action=payload.action,
            cause=payload.cause,
            fencing_token=payload.fencing_token,
        )
        refusal = self.gate.admit(payload, topic_node=message.topic.node)
        if refusal is not None:
            self.refused[refusal.value] += 1
            bound.warning(
                "agent.command_refused", reason=refusal.value, newest_token=self.gate.newest_token
            )
            return
        bound.info("agent.command_obeyed")
        self.obeyed.append(payload.id)
        del self.obeyed[: -self._memory]
        try:
            await self._handlers[payload.action](payload)
        except Exception as exc:  # noqa: BLE001 - a failed command is logged, the agent goes on
            bound.error("agent.command_failed", error=f"{type(exc).__name__}: {exc}"[:300])


def publishable_status(topic: Topic, status: AgentStatus) -> tuple[AgentStatus, str]:
    """``status`` as the coordinator's decoder accepts it, and why it had to change.

    Health keys outside the bus grammar are mapped into it (:func:`health_key`). If the
    decoder still refuses the status (the same ``decode`` the coordinator runs), it goes out
    without verdicts: to the coordinator the node's health is then unknown (never healthy,
    never the last retained verdicts), and the error names why.
    """
    keyed = replace(status, health={health_key(k): v for k, v in status.health.items()})
    try:
        decode(topic, encode(keyed))
    except (ParseError, ValueError) as exc:
        return replace(status, health={}), str(exc)
    return keyed, ""
