"""Fenced coordinator commands on a real dynsec mosquitto: once, in order, never stale or forged.

The coordinator side is the real :class:`CommandSender` on a client with the coordinator's
dynsec role; the agent side is the agent's real bus and :class:`CommandListener` with its
issued credentials. "Exactly once" is checked by sending a second command afterwards and
seeing the listener obey exactly the two, with no repeat refused in between (the broker
delivered nothing twice; a new listener is used after each restart, so its memory of ids
cannot hide a redelivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiomqtt
import pytest

from slonkd.adapters.bus.client import Bus, BusSettings
from slonkd.adapters.bus.dynsec import AgentCredentials, DynSecAdmin
from slonkd.adapters.bus.dynsec_roles import coordinator_role
from slonkd.core.command_gate import RECHECK, Refusal
from slonkd.core.errors import TransientError
from slonkd.core.messages import AgentStatus, Channel, Command, encode, node_topic
from slonkd.runtime.agent.commands import CommandListener, agent_bus, republish_on_reconnect
from slonkd.runtime.coordinating.commands import CommandSender, command_id
from slonkd_sandbox.mosquitto import Mosquitto
from tests.contract.bus_helpers import dynsec_admin, dynsec_broker_in, in_task, running
from tests.contract.kube_helpers import until

pytestmark = pytest.mark.mqtt

CLUSTER = "lab"
COORDINATOR = "slonkd-coordinator"
COORDINATOR_PW = "coordinator-password"


@dataclass
class Bench:
    """A dynsec broker with a coordinator client and two issued agents, n1 and n2."""

    broker: Mosquitto
    admin: DynSecAdmin
    agents: dict[str, AgentCredentials]
    rechecks: list[str] = field(default_factory=list)

    def settings(self, username: str, password: str, client_id: str) -> BusSettings:
        """Bus settings with short reconnect waits."""
        return BusSettings(
            host=self.broker.host,
            port=self.broker.port,
            username=username,
            password=password,
            client_id=client_id,
            reconnect_min_s=0.05,
            reconnect_max_s=0.5,
        )

    @asynccontextmanager
    async def coordinator(self, token: int, name: str = "c-0") -> AsyncIterator[CommandSender]:
        """A leader with fencing token ``token``, connected (its own dynsec client, as in prod)."""
        user, client_id = await self.coordinator_client(name)
        bus = Bus(self.settings(user, COORDINATOR_PW, client_id))
        sender = CommandSender(bus, cluster=CLUSTER, identity=name, check_valid=lambda: token)
        async with running(bus, connect_s=20):
            yield sender

    @asynccontextmanager
    async def agent(self, node: str = "n1") -> AsyncIterator[CommandListener]:
        """``node``'s agent bus (persistent session) and a fresh command listener, running."""
        creds = self.agents[node]
        topic = node_topic(CLUSTER, node, Channel.STATUS)
        bus = agent_bus(
            self.settings(creds.username, creds.password, f"slonkd-agent-{node}"),
            cluster=CLUSTER,
            node=node,
            will=(topic, AgentStatus(node=node, online=False)),
        )

        async def recheck(command: Command) -> None:
            self.rechecks.append(command.id)

        listener = CommandListener(bus, node=node, recheck=recheck)
        async with in_task(listener.run()), running(bus, connect_s=20):
            yield listener

    async def coordinator_client(self, name: str) -> tuple[str, str]:
        """A coordinator replica's dynsec client: (username, the client id it is bound to)."""
        user, client_id = f"{COORDINATOR}-{name}", f"slonkd-coordinator-{name}"
        role = coordinator_role(CLUSTER, user)
        await self.admin.ensure_client(user, COORDINATOR_PW, role, client_id=client_id)
        return user, client_id

    def raw_client(self, username: str, password: str, client_id: str) -> aiomqtt.Client:
        """A plain MQTT 5 client (to forge what the product code never sends)."""
        return aiomqtt.Client(
            self.broker.host,
            self.broker.port,
            username=username,
            password=password,
            identifier=client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            timeout=5,
        )


@pytest.fixture
async def bench(session_root: Path) -> AsyncIterator[Bench]:
    """The broker, the coordinator's dynsec client and two agents' issued credentials."""
    async with dynsec_broker_in(session_root, "cmds-") as broker:
        admin = dynsec_admin(broker)
        agents = {n: await admin.issue(CLUSTER, n) for n in ("n1", "n2")}
        yield Bench(broker=broker, admin=admin, agents=agents)


async def obeyed(listener: CommandListener, ids: list[str]) -> None:
    """Wait until ``listener`` obeyed exactly ``ids`` (fails on a deadline or on more)."""
    await until(f"commands {ids} obeyed", lambda: len(listener.obeyed) >= len(ids))
    assert listener.obeyed == ids


async def test_a_command_sent_while_the_agent_is_away_is_obeyed_once_when_it_is_back(
    bench: Bench,
) -> None:
    """A recheck queued for an absent agent is obeyed once when it reconnects, never twice."""
    async with bench.agent():
        pass  # the persistent session and its subscription now exist
    async with bench.coordinator(token=3) as leader:
        first = await leader.send("n1", RECHECK, cause="operator-recheck")
        async with bench.agent() as listener:
            await obeyed(listener, [first.id])
            second = await leader.send("n1", RECHECK, cause="operator-recheck")
            await obeyed(listener, [first.id, second.id])
            assert listener.refused == {}
    assert bench.rechecks == [first.id, second.id]


async def test_a_pending_command_is_obeyed_exactly_once_across_a_broker_restart(
    bench: Bench,
) -> None:
    """A command queued for an absent agent survives a broker restart and is obeyed once."""
    async with bench.agent():
        pass
    async with bench.coordinator(token=3) as leader:
        first = await leader.send("n1", RECHECK, cause="operator-recheck")
        await asyncio.to_thread(bench.broker.restart)
        async with bench.agent() as listener:
            await obeyed(listener, [first.id])
            second = await leader.send("n1", RECHECK, cause="operator-recheck")  # reconnected
            await obeyed(listener, [first.id, second.id])
            assert listener.refused == {}
    assert bench.rechecks == [first.id, second.id]


async def test_a_stale_fencing_token_is_refused_and_changes_nothing(bench: Bench) -> None:
    """After leader 5 announced itself, a command of old leader 4 is refused and not run."""
    async with (
        bench.coordinator(token=5, name="c-new") as new,
        bench.coordinator(token=4, name="c-old") as old,
    ):
        await new.announce()
        async with bench.agent() as listener:
            await until("the retained leader token seen", lambda: listener.gate.newest_token == 5)
            stale = await old.send("n1", RECHECK, cause="operator-recheck")
            await until("the stale command refused", lambda: sum(listener.refused.values()) >= 1)
            assert listener.refused == {Refusal.STALE_TOKEN.value: 1}
            assert not listener.gate.seen(stale.id)
            assert listener.gate.newest_token == 5
            fresh = await new.send("n1", RECHECK, cause="operator-recheck")
            await obeyed(listener, [fresh.id])
    assert bench.rechecks == [fresh.id]


async def test_a_forged_command_naming_another_node_on_this_agents_topic_is_refused(
    bench: Bench,
) -> None:
    """A payload for n2 on n1's commands topic (even from the coordinator) is dropped."""
    forged = Command(id=command_id(), node="n2", action=RECHECK, cause="forged", fencing_token=99)
    body = encode(forged)
    async with bench.agent() as listener, bench.coordinator(token=3) as leader:
        user, client_id = await bench.coordinator_client("forger")
        async with bench.raw_client(user, COORDINATOR_PW, client_id) as raw:
            await raw.publish(str(node_topic(CLUSTER, "n1", Channel.COMMANDS)), body, qos=1)
        await until("the forgery dropped", lambda: sum(listener.bus.dropped.values()) >= 1)
        real = await leader.send("n1", RECHECK, cause="operator-recheck")
        await obeyed(listener, [real.id])
        assert listener.gate.newest_token == 3  # the forged token 99 raised nothing
    assert bench.rechecks == [real.id]


async def test_another_agents_credentials_cannot_command_this_agent(bench: Bench) -> None:
    """n2's client publishing a well-formed command on n1's topic is refused by the broker ACL."""
    n2 = bench.agents["n2"]
    sneaky = Command(id=command_id(), node="n1", action=RECHECK, cause="n2", fencing_token=99)
    async with bench.agent() as listener, bench.coordinator(token=3) as leader:
        async with bench.raw_client(n2.username, n2.password, n2.client_id) as raw:
            await raw.publish(
                str(node_topic(CLUSTER, "n1", Channel.COMMANDS)), encode(sneaky), qos=1
            )
        real = await leader.send("n1", RECHECK, cause="operator-recheck")
        await obeyed(listener, [real.id])  # the next message n1 got is the leader's, not n2's
        assert sum(listener.bus.dropped.values()) == 0
        assert listener.gate.newest_token == 3
    assert bench.rechecks == [real.id]


async def test_the_agent_republishes_its_status_after_a_reconnect(bench: Bench) -> None:
    """After a connection loss that left "offline" retained (a will), the status is online again.

    A second client with the agent's id takes its session over, publishes the retained
    offline status a will would, and leaves; the agent's bus reconnects and republishes.
    """
    creds = bench.agents["n1"]
    topic = node_topic(CLUSTER, "n1", Channel.STATUS)
    settings = bench.settings(creds.username, creds.password, "slonkd-agent-n1")
    bus = agent_bus(
        replace(settings, reconnect_min_s=0.5, reconnect_max_s=1.0),
        cluster=CLUSTER,
        node="n1",
        will=(topic, AgentStatus(node="n1", online=False)),
    )

    async def publish() -> None:
        # as Agent.publish_status: a publish whose connection the takeover drops fails;
        # the next connection publishes again
        with contextlib.suppress(TransientError):
            await bus.publish(topic, AgentStatus(node="n1", online=True), retain=True)

    async with running(bus, connect_s=20):
        await publish()
        async with in_task(republish_on_reconnect(bus, publish)):
            async with aiomqtt.Client(
                bench.broker.host,
                bench.broker.port,
                username=creds.username,
                password=creds.password,
                identifier="slonkd-agent-n1",
                protocol=aiomqtt.ProtocolVersion.V5,
            ) as usurper:
                offline = encode(AgentStatus(node="n1", online=False))
                await usurper.publish(str(topic), offline, qos=1, retain=True)
            await until("the bus reconnected", lambda: bus.connects >= 2)
            await until("the status online again", lambda: retained_online(bench, topic))


async def test_the_agent_publishes_its_status_on_its_first_connection_too(bench: Bench) -> None:
    """An agent whose first connection comes late publishes its status once it connects.

    Not only after a reconnect: its coordinator may not be resolvable yet (issue 14). The
    agent's own first publish gives up after 10 s without a connection; found on the real
    node, where the chart's broker never held the status of an agent that bootstrapped late.
    """
    creds = bench.agents["n1"]
    topic = node_topic(CLUSTER, "n1", Channel.STATUS)
    settings = bench.settings(creds.username, creds.password, "slonkd-agent-n1")
    bus = agent_bus(
        settings, cluster=CLUSTER, node="n1", will=(topic, AgentStatus(node="n1", online=False))
    )
    published: list[int] = []

    async def publish() -> None:
        await bus.publish(topic, AgentStatus(node="n1", online=True), retain=True)
        published.append(bus.connects)

    async with in_task(republish_on_reconnect(bus, publish)):
        assert not retained_online(bench, topic)
        async with running(bus, connect_s=20):
            await until("the status online", lambda: retained_online(bench, topic))
            # the broker holds it before the PUBACK is back: the publish returns a moment later
            # (retained_online blocks this loop while mosquitto_sub runs: failed once in a full run)
            await until("the publish returned", lambda: bool(published))
            assert published == [1]


def retained_online(bench: Bench, topic: object) -> bool:
    """Whether the broker's retained status on ``topic`` says online (read as the admin)."""
    out = subprocess.run(
        [
            "mosquitto_sub", "-h", bench.broker.host, "-p", str(bench.broker.port),
            "-u", bench.broker.admin_user, "-P", bench.broker.admin_password,
            "-t", str(topic), "-C", "1", "-W", "2", "--retained-only",
        ],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    return bool(out.stdout.strip()) and bool(json.loads(out.stdout).get("online"))


@pytest.mark.alone  # a bound in seconds, kept beside parallel workers
async def test_a_publish_on_a_connection_that_drops_fails_at_once_not_at_its_timeout(
    bench: Bench,
) -> None:
    """A publish whose connection is lost before its PUBACK fails when the loss is seen.

    Before, it waited out its whole timeout on the dead connection (aiomqtt never answers
    it): the agent's republish after a session takeover came 10 s late, the will's
    "offline" standing meanwhile (the full suite's failure of the test above). The broker
    is stopped (no PUBACK can come), then killed (the connection drops).
    """
    creds = bench.agents["n1"]
    topic = node_topic(CLUSTER, "n1", Channel.STATUS)
    settings = bench.settings(creds.username, creds.password, "slonkd-agent-n1")
    bus = agent_bus(
        settings, cluster=CLUSTER, node="n1", will=(topic, AgentStatus(node="n1", online=False))
    )
    async with running(bus, connect_s=20):
        os.kill(bench.broker.pid, signal.SIGSTOP)
        sent = asyncio.create_task(
            bus.publish(topic, AgentStatus(node="n1", online=True), timeout_s=20)
        )
        await asyncio.sleep(0.3)
        assert not sent.done()  # no PUBACK from a stopped broker
        killed = time.monotonic()
        await asyncio.to_thread(bench.broker.kill)
        with pytest.raises(TransientError, match="connection"):
            await asyncio.wait_for(sent, 20)
        assert time.monotonic() - killed < 5, "the publish waited for its timeout"
