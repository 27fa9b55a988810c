"""The mosquitto harness is real: ACLs, passwords, persistence and dynamic security hold."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import aiomqtt
import pytest

from slonkd_sandbox.mosquitto import Mosquitto

pytestmark = pytest.mark.mqtt


def _client(broker: Mosquitto, user: str, password: str, **kw: object) -> aiomqtt.Client:
    return aiomqtt.Client(
        broker.host,
        broker.port,
        username=user,
        password=password,
        protocol=aiomqtt.ProtocolVersion.V5,
        timeout=5,
        **kw,  # type: ignore[arg-type]
    )


async def test_publish_outside_the_acl_is_not_delivered(mosquitto: Mosquitto) -> None:
    """agent-a may write only under its own node topic: another node's topic never arrives."""
    async with _client(mosquitto, "watcher", "watcher-pw") as watcher:
        await watcher.subscribe("slonk/#", qos=1)
        async with _client(mosquitto, "agent-a", "agent-a-pw") as agent:
            await agent.publish("slonk/v1/lab/nodes/agent-b/status", b"forged", qos=1)
            await agent.publish("slonk/v1/lab/nodes/agent-a/status", b"mine", qos=1)
        got: list[tuple[str, bytes]] = []
        async with asyncio.timeout(10):
            async for message in watcher.messages:
                assert isinstance(message.payload, bytes)
                got.append((str(message.topic), message.payload))
                if message.payload == b"mine":
                    break
    assert got == [("slonk/v1/lab/nodes/agent-a/status", b"mine")]


async def test_wrong_password_is_refused(mosquitto: Mosquitto) -> None:
    """A wrong password (and an unknown user) cannot connect."""
    with pytest.raises(aiomqtt.MqttError):
        async with _client(mosquitto, "agent-a", "not-the-password"):
            pass
    with pytest.raises(aiomqtt.MqttError):
        async with _client(mosquitto, "nobody", "x"):
            pass


async def test_retained_message_survives_a_broker_restart(mosquitto: Mosquitto) -> None:
    """Persistence is on: a retained status is still there after the broker restarts."""
    async with _client(mosquitto, "agent-a", "agent-a-pw") as agent:
        await agent.publish("slonk/v1/lab/nodes/agent-a/status", b"kept", qos=1, retain=True)
    await asyncio.to_thread(mosquitto.restart)
    async with _client(mosquitto, "watcher", "watcher-pw") as watcher:
        await watcher.subscribe("slonk/v1/lab/nodes/agent-a/status", qos=1)
        async with asyncio.timeout(10):
            message = await anext(aiter(watcher.messages))
    assert message.payload == b"kept"
    assert message.retain


async def test_dynamic_security_creates_clients_at_run_time() -> None:
    """With the dynsec plugin, the admin creates a client and a role; the ACL then applies."""
    root = Path(tempfile.mkdtemp(prefix="slonkd-test-dynsec-", dir="/tmp"))
    broker = Mosquitto(root, dynamic_security=True)
    await asyncio.to_thread(broker.start)
    try:
        commands = [
            {
                "command": "createRole",
                "rolename": "node-n1",
                "acls": [
                    {
                        "acltype": "publishClientSend",
                        "topic": "slonk/v1/lab/nodes/n1/#",
                        "allow": True,
                    }
                ],
            },
            {
                "command": "createClient",
                "username": "n1",
                "password": "n1-pw",
                "roles": [{"rolename": "node-n1"}],
            },
        ]
        async with _client(broker, broker.admin_user, broker.admin_password) as admin:
            await admin.subscribe("$CONTROL/dynamic-security/v1/response", qos=1)
            await admin.publish(
                "$CONTROL/dynamic-security/v1", json.dumps({"commands": commands}), qos=1
            )
            async with asyncio.timeout(10):
                reply = await anext(aiter(admin.messages))
            assert isinstance(reply.payload, bytes)
            responses = json.loads(reply.payload)["responses"]
            assert [r.get("error") for r in responses] == [None, None]
            await admin.subscribe("slonk/#", qos=1)
            async with _client(broker, "n1", "n1-pw") as node:
                await node.publish("slonk/v1/lab/nodes/n2/status", b"forged", qos=1)
                await node.publish("slonk/v1/lab/nodes/n1/status", b"mine", qos=1)
            async with asyncio.timeout(10):
                message = await anext(aiter(admin.messages))
            assert (str(message.topic), message.payload) == (
                "slonk/v1/lab/nodes/n1/status",
                b"mine",
            )
        with pytest.raises(aiomqtt.MqttError):
            async with _client(broker, "n1", "wrong"):
                pass
    finally:
        await asyncio.to_thread(broker.stop)
