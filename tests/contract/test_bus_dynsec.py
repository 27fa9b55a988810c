"""Per-agent credentials through mosquitto's dynamic-security plugin, on a real broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiomqtt
import pytest

from slonkd.adapters.bus.dynsec import AgentCredentials
from slonkd.adapters.bus.dynsec_roles import coordinator_role, nudge_role
from slonkd.cli.nudge import main as nudge_main
from slonkd.core.errors import ParseError
from slonkd.core.messages import AgentStatus, Channel, encode, node_topic
from slonkd_sandbox.mosquitto import Mosquitto
from tests.contract.bus_helpers import admin_watcher, dynsec_admin, dynsec_broker_in

pytestmark = pytest.mark.mqtt


@pytest.fixture
async def dynsec_broker(session_root: Path) -> AsyncIterator[Mosquitto]:
    """A broker with the dynamic-security plugin and only its admin client."""
    async with dynsec_broker_in(session_root, "dynsec-") as broker:
        yield broker


def _client(b: Mosquitto, creds: AgentCredentials, client_id: str = "") -> aiomqtt.Client:
    return aiomqtt.Client(
        b.host,
        b.port,
        username=creds.username,
        password=creds.password,
        identifier=client_id or creds.client_id,
        protocol=aiomqtt.ProtocolVersion.V5,
        timeout=5,
    )


async def test_issued_agent_writes_only_its_own_topics(dynsec_broker: Mosquitto) -> None:
    """An issued agent publishes its own status; its publish on another node's topic is dropped."""
    b = dynsec_broker
    creds = await dynsec_admin(b).issue("lab", "n1")
    assert creds.username == "agent-n1"
    async with admin_watcher(b) as watcher:
        await watcher.subscribe("slonk/#", qos=1)
        async with _client(b, creds) as agent:
            forged = AgentStatus(node="n2", online=False)
            await agent.publish(str(node_topic("lab", "n2", Channel.STATUS)), encode(forged), qos=1)
            mine = AgentStatus(node="n1", online=True)
            await agent.publish(str(node_topic("lab", "n1", Channel.STATUS)), encode(mine), qos=1)
        async with asyncio.timeout(10):
            message = await anext(aiter(watcher.messages))
    assert str(message.topic) == "slonk/v1/lab/nodes/n1/status"


async def test_agent_can_subscribe_to_its_commands_but_not_anothers(
    dynsec_broker: Mosquitto,
) -> None:
    """Subscribing to its own commands is granted; to another node's commands it is refused."""
    b = dynsec_broker
    creds = await dynsec_admin(b).issue("lab", "n1")
    async with _client(b, creds) as agent:
        own = await agent.subscribe(str(node_topic("lab", "n1", Channel.COMMANDS)), qos=1)
        other = await agent.subscribe(str(node_topic("lab", "n2", Channel.COMMANDS)), qos=1)
        everything = await agent.subscribe("slonk/#", qos=1)
    assert [int(c.value) for c in own] == [1]  # type: ignore[union-attr]
    assert all(int(c.value) >= 0x80 for c in other)  # type: ignore[union-attr]
    assert all(int(c.value) >= 0x80 for c in everything)  # type: ignore[union-attr]


async def test_reissue_rotates_the_password_and_revoke_locks_out(dynsec_broker: Mosquitto) -> None:
    """A second issue (pod restart) invalidates the old password; revoke removes the client."""
    b = dynsec_broker
    admin = dynsec_admin(b)
    first = await admin.issue("lab", "n1")
    second = await admin.issue("lab", "n1")
    assert first.password != second.password
    with pytest.raises(aiomqtt.MqttError):
        async with _client(b, first):
            pass
    async with _client(b, second):
        pass
    await admin.revoke("n1")
    with pytest.raises(aiomqtt.MqttError):
        async with _client(b, second):
            pass


async def test_a_deleted_client_takes_its_role_with_it(dynsec_broker: Mosquitto) -> None:
    """Revoked agents and reaped clients leave no role behind in dynsec.

    Each client slonkd issues has a role of its own (``slonk-<username>``). Before, only the
    client was deleted: every node that left the cluster for good left its role in the
    broker's dynsec.json, for ever. The role goes in the same batch, after the client
    (mosquitto 2.0 crashes on a role deleted under a client, mosquitto#2660).
    """
    admin = dynsec_admin(dynsec_broker)
    for node in ("n1", "n2"):
        await admin.issue("lab", node)
    await admin.ensure_client(
        "coordinator-c-0", "pw", coordinator_role("lab", "coordinator-c-0"), client_id="c-0"
    )
    await admin.revoke("n1")
    await admin.delete_client("coordinator-c-0")
    (answer,) = await admin._call([{"command": "listRoles", "count": -1, "offset": 0}])
    roles = set(answer["data"]["roles"])
    assert {"slonk-agent-n1", "slonk-coordinator-c-0"}.isdisjoint(roles), roles
    assert "slonk-agent-n2" in roles  # the others keep theirs
    assert "agent-n2" in await admin.clients()
    await admin.revoke("n1")  # gone already: no error


async def test_re_keying_one_of_many_clients_keeps_the_broker_up(dynsec_broker: Mosquitto) -> None:
    """A restarted pod's re-issue and a coordinator's new password, among 40 agents.

    mosquitto 2.0 crashes (general protection fault in libc) when a role is deleted while a
    client still holds it, once dynsec holds a few dozen clients (20 here; 16 did not;
    eclipse-mosquitto/mosquitto#2660): the replace batch deleted the role first, so every
    re-key of a client in a fleet (a restarted pod's new uid, each coordinator start) took
    the broker down with every agent's connection.
    """
    b = dynsec_broker
    admin = dynsec_admin(b)
    for i in range(40):
        await admin.issue("lab", f"n{i}", pod_uid=f"uid-{i}")
    role = coordinator_role("lab", "coordinator")
    for password in ("first-pw", "second-pw"):
        await admin.ensure_client("coordinator", password, role, client_id="slonkd-coordinator")
    creds = await admin.issue("lab", "n0", pod_uid="uid-0-restarted")
    assert b.running
    async with _client(b, creds) as agent:
        mine = AgentStatus(node="n0", online=True)
        await agent.publish(str(node_topic("lab", "n0", Channel.STATUS)), encode(mine), qos=1)
    assert len(await admin.clients()) == 42  # the admin, the coordinator, 40 agents


async def test_hostile_node_names_are_refused_before_reaching_the_broker(
    dynsec_broker: Mosquitto,
) -> None:
    """A node name with wildcards or slashes is refused; no role or client is created."""
    admin = dynsec_admin(dynsec_broker)
    for name in ("n1/#", "+", "../n2", "", "a" * 200):
        with pytest.raises(ParseError):
            await admin.issue("lab", name)


async def test_a_credential_cannot_take_over_another_clients_id(dynsec_broker: Mosquitto) -> None:
    """Agent n1's credential connecting with n2's (predictable) client id is refused.

    Each issued client is bound to its client id (issue 16 item 3): a holder of any credential
    can neither kick another client off the broker nor resume its session; n2 stays connected.
    """
    b = dynsec_broker
    admin = dynsec_admin(b)
    n1 = await admin.issue("lab", "n1")
    n2 = await admin.issue("lab", "n2")
    assert n2.client_id == "slonkd-agent-n2"
    async with _client(b, n2) as victim:
        with pytest.raises(aiomqtt.MqttError):
            async with _client(b, n1, client_id=n2.client_id):
                pass
        with pytest.raises(aiomqtt.MqttError):  # nor under any id other than its own
            async with _client(b, n1, client_id="anything-else"):
                pass
        await asyncio.sleep(0.5)
        mine = AgentStatus(node="n2", online=True)
        await victim.publish(str(node_topic("lab", "n2", Channel.STATUS)), encode(mine), qos=1)


async def test_the_coordinators_client_is_bound_to_its_id(dynsec_broker: Mosquitto) -> None:
    """The coordinator's own dynsec client works only under the coordinator's client id."""
    b = dynsec_broker
    admin = dynsec_admin(b)
    await admin.ensure_client(
        "coordinator-c0", "pw-c0-123456", coordinator_role("lab", "coordinator-c0"),
        client_id="slonkd-coordinator-c0",
    )  # fmt: skip
    creds = AgentCredentials(
        username="coordinator-c0", password="pw-c0-123456", client_id="slonkd-coordinator-c0"
    )
    async with _client(b, creds):
        pass
    with pytest.raises(aiomqtt.MqttError):
        async with _client(b, creds, client_id="slonkd-agent-n9"):
            pass


async def test_the_coordinators_client_reads_only_the_topics_it_needs(
    dynsec_broker: Mosquitto,
) -> None:
    """The coordinator's client may subscribe to every node's status and the SLURM nudges only.

    A ``#`` subscription would make a session of a gone coordinator pod queue everything the
    cluster says (issue 16 item 4): ``slonk/v1/lab/#`` and another node's events are refused.
    """
    b = dynsec_broker
    admin = dynsec_admin(b)
    user = "coordinator-c1"
    await admin.ensure_client(
        user, "pw-c1-123456", coordinator_role("lab", user), client_id="slonkd-coordinator-c1"
    )
    creds = AgentCredentials(
        username=user, password="pw-c1-123456", client_id="slonkd-coordinator-c1"
    )
    async with _client(b, creds) as coordinator:
        status = await coordinator.subscribe("slonk/v1/lab/nodes/+/status", qos=1)
        nudges = await coordinator.subscribe("slonk/v1/lab/slurm/events", qos=1)
        everything = await coordinator.subscribe("slonk/v1/lab/#", qos=1)
        events = await coordinator.subscribe("slonk/v1/lab/nodes/+/events", qos=1)
    assert [int(c.value) for c in [*status, *nudges]] == [1, 1]
    assert all(int(c.value) >= 0x80 for c in [*everything, *events])


async def test_slurmctld_nudge_client_publishes_only_slurm_events(
    dynsec_broker: Mosquitto, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client the coordinator makes for slurmctld's triggers, used by slonkd-nudge itself.

    Bound to no client id (each nudge is its own process), it publishes the cluster's SLURM
    events and nothing else: its publish on a node's status topic is dropped.
    """
    b = dynsec_broker
    await dynsec_admin(b).ensure_client(
        "slurmctld-nudge", "nudge-pw", nudge_role("lab", "slurmctld-nudge"), client_id=""
    )
    for key, value in {
        "SLONKD_MQTT_HOST": b.host,
        "SLONKD_MQTT_PORT": str(b.port),
        "SLONKD_MQTT_USER": "slurmctld-nudge",
        "SLONKD_MQTT_PASSWORD": "nudge-pw",
        "SLONKD_CLUSTER": "lab",
    }.items():
        monkeypatch.setenv(key, value)
    async with admin_watcher(b) as watcher:
        await watcher.subscribe("slonk/#", qos=1)
        nudge = AgentCredentials(username="slurmctld-nudge", password="nudge-pw", client_id="x-1")
        async with _client(b, nudge) as forger:
            forged = AgentStatus(node="n1", online=False)
            await forger.publish(
                str(node_topic("lab", "n1", Channel.STATUS)), encode(forged), qos=1
            )
        assert await asyncio.to_thread(nudge_main, ["--by=slonkd-coordinator", "down", "n1"]) == 0
        async with asyncio.timeout(10):
            message = await anext(aiter(watcher.messages))
    assert str(message.topic) == "slonk/v1/lab/slurm/events"
