"""The bus adapter against a real mosquitto.

Retained status, queued commands, last will, reconnects, and forged payloads dropped at the
boundary.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import pytest

from slonkd.adapters.bus.client import Bus, BusSettings, Received
from slonkd.core.messages import (
    AgentStatus,
    Channel,
    Command,
    CoordinatorStatus,
    coordinator_topic,
    encode,
    node_topic,
)
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from tests.contract.bus_helpers import running

pytestmark = pytest.mark.mqtt

CLUSTER = "lab"
AGENT_ACL = (
    "pattern write slonk/v1/+/nodes/%u/status",
    "pattern write slonk/v1/+/nodes/%u/events",
    "pattern read slonk/v1/+/nodes/%u/commands",
)


@pytest.fixture
def broker(session_root: Path) -> Iterator[Mosquitto]:
    """mosquitto with a coordinator (all of slonk/#) and node agents n1, n2 (own topics only)."""
    root = Path(tempfile.mkdtemp(prefix="bus-", dir=session_root))
    users = {
        "coordinator": MqttUser(password="coordinator-pw", acl=("topic readwrite slonk/#",)),
        "n1": MqttUser(password="n1-pw"),
        "n2": MqttUser(password="n2-pw"),
    }
    with Mosquitto(root, users=users, patterns=AGENT_ACL) as b:
        yield b


def _settings(b: Mosquitto, user: str, client_id: str | None = None) -> BusSettings:
    return BusSettings(
        host=b.host,
        port=b.port,
        username=user,
        password=f"{user}-pw",
        client_id=client_id or f"slonkd-{user}",
        reconnect_min_s=0.05,
        reconnect_max_s=0.5,
    )


async def _next(bus: Bus, timeout_s: float = 10) -> Received:
    async with asyncio.timeout(timeout_s):
        return await anext(aiter(bus.messages()))


def _cmd(i: int, node: str = "n1") -> Command:
    return Command(id=f"cmd-{i:08d}", node=node, action="drain", cause="test", fencing_token=1)


async def test_retained_status_reaches_a_later_subscriber(broker: Mosquitto) -> None:
    """An agent's retained status is delivered to a coordinator that subscribes afterwards."""
    status = AgentStatus(node="n1", online=True, pod="worker-1", health={"gpu": "ok"})
    async with running(Bus(_settings(broker, "n1"))) as agent:
        await agent.publish(node_topic(CLUSTER, "n1", Channel.STATUS), status, retain=True)
    coord = Bus(
        _settings(broker, "coordinator"), subscriptions=[f"slonk/v1/{CLUSTER}/nodes/+/status"]
    )
    async with running(coord):
        got = await _next(coord)
    assert got.payload == status
    assert got.retained


async def test_command_sent_while_the_agent_is_away_arrives_once_it_is_back(
    broker: Mosquitto,
) -> None:
    """A command sent while the agent is offline, and across a broker restart, arrives once.

    QoS 1 with a persistent session: the broker keeps the message until the agent is back.
    """
    subs = [str(node_topic(CLUSTER, "n1", Channel.COMMANDS))]
    async with running(Bus(_settings(broker, "n1"), subscriptions=subs)):
        pass  # the session (and its subscription) now exists on the broker
    async with running(Bus(_settings(broker, "coordinator"))) as coord:
        await coord.publish(node_topic(CLUSTER, "n1", Channel.COMMANDS), _cmd(1))
    await asyncio.to_thread(broker.restart)
    agent = Bus(_settings(broker, "n1"), subscriptions=subs)
    async with running(agent):
        got = await _next(agent)
        assert got.payload == _cmd(1)
        with pytest.raises(TimeoutError):
            await _next(agent, timeout_s=1.5)


async def test_forged_and_malformed_commands_are_dropped_and_counted(broker: Mosquitto) -> None:
    """Only the valid command reaches the agent; every forged or malformed one is counted.

    Garbage, a wrong version, another node's command and an oversized payload are dropped.
    """
    topic = str(node_topic(CLUSTER, "n1", Channel.COMMANDS))
    agent = Bus(_settings(broker, "n1"), subscriptions=[topic])
    forged = json.loads(encode(_cmd(2)))
    forged["node"] = "n2"
    future = json.loads(encode(_cmd(3)))
    future["v"] = 99
    async with running(agent):
        async with aiomqtt.Client(
            broker.host, broker.port, username="coordinator", password="coordinator-pw"
        ) as raw:
            for payload in (
                b"garbage",
                json.dumps(forged).encode(),
                json.dumps(future).encode(),
                b"{" + b" " * 20000 + b"}",
                encode(_cmd(4)),
            ):
                await raw.publish(topic, payload, qos=1)
        got = await _next(agent)
    assert got.payload == _cmd(4)
    assert sum(agent.dropped.values()) == 4
    assert agent.dropped["oversized"] == 1


async def test_an_agent_cannot_publish_on_another_nodes_topic(broker: Mosquitto) -> None:
    """The broker's ACL keeps n2 from writing n1's status; the coordinator never sees it."""
    coord = Bus(
        _settings(broker, "coordinator"), subscriptions=[f"slonk/v1/{CLUSTER}/nodes/+/status"]
    )
    async with running(coord), running(Bus(_settings(broker, "n2"))) as n2:
        await n2.publish(
            node_topic(CLUSTER, "n1", Channel.STATUS), AgentStatus(node="n1", online=False)
        )
        await n2.publish(
            node_topic(CLUSTER, "n2", Channel.STATUS), AgentStatus(node="n2", online=True)
        )
        got = await _next(coord)
    assert got.topic.node == "n2"


AGENT_SCRIPT = """
import asyncio, sys
from slonkd.adapters.bus.client import Bus, BusSettings
from slonkd.core.messages import AgentStatus, Channel, node_topic
port = int(sys.argv[1])
topic = node_topic("lab", "n1", Channel.STATUS)
async def main():
    bus = Bus(BusSettings(host="127.0.0.1", port=port, username="n1", password="n1-pw",
                          client_id="slonkd-n1", keepalive_s=2),
              will=(topic, AgentStatus(node="n1", online=False)))
    task = asyncio.create_task(bus.run())
    await bus.publish(topic, AgentStatus(node="n1", online=True), retain=True)
    print("online", flush=True)
    await task
asyncio.run(main())
"""


async def test_last_will_marks_a_killed_agent_offline(broker: Mosquitto) -> None:
    """SIGKILL an agent process: the broker publishes its will, a retained offline status."""
    agent = subprocess.Popen(  # noqa: ASYNC220 - started once, then read in a thread
        [sys.executable, "-c", AGENT_SCRIPT, str(broker.port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert agent.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1].strip() not in {"online", ""}:
            lines.append(await asyncio.to_thread(agent.stdout.readline))
        assert lines[-1].strip() == "online", lines
    finally:
        agent.kill()
        agent.wait(timeout=10)
    coord = Bus(
        _settings(broker, "coordinator"), subscriptions=[f"slonk/v1/{CLUSTER}/nodes/n1/status"]
    )
    async with running(coord):
        seen = [await _next(coord)]
        while seen[-1].payload != AgentStatus(node="n1", online=False):
            seen.append(await _next(coord))
    assert seen[-1].payload == AgentStatus(node="n1", online=False)


async def test_the_bus_reconnects_after_a_broker_restart(broker: Mosquitto) -> None:
    """After the broker restarts, the bus connects again by itself and publishing works."""
    bus = Bus(
        _settings(broker, "coordinator"), subscriptions=[f"slonk/v1/{CLUSTER}/coordinator/status"]
    )
    async with running(bus):
        await asyncio.to_thread(broker.restart)
        await bus.wait_connected(10)
        async with asyncio.timeout(10):
            while bus.connects < 2:  # noqa: ASYNC110 - polling a counter the bus owns
                await asyncio.sleep(0.05)
        status = CoordinatorStatus(online=True, leader="c-0", fencing_token=5)
        await bus.publish(coordinator_topic(CLUSTER), status, retain=True)
        got = await _next(bus)
    assert got.payload == status
