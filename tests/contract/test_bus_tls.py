"""The bus over TLS against a real mosquitto with a TLS listener (the chart's ``tls.enabled``).

The broker's certificate is made for the test by a throwaway CA, with 127.0.0.1 and
localhost in its SAN. A client given that CA (``BusSettings.ca_file``, the dynsec admin's
``ca_file``) connects and publishes; a client without TLS is refused on the TLS port; a
client trusting another CA, or reaching a broker whose certificate does not name the host
it dialled, fails verification and never falls back to plain MQTT.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import aiomqtt
import pytest

from slonkd.adapters.bus.client import Bus, BusSettings, Received, tls_context
from slonkd.adapters.bus.dynsec import DynSecAdmin
from slonkd.core.errors import TransientError
from slonkd.core.messages import AgentStatus, Channel, node_topic
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.tls import make_ca, make_server_cert
from tests.contract.bus_helpers import running

pytestmark = pytest.mark.mqtt

CLUSTER = "lab"
USERS = {
    "coordinator": MqttUser(password="coordinator-pw", acl=("topic readwrite slonk/#",)),
    "n1": MqttUser(password="n1-pw", acl=("topic write slonk/v1/lab/nodes/n1/#",)),
}


@dataclass(frozen=True)
class Pki:
    """The broker's CA bundle, another CA's bundle, and the broker."""

    ca: str
    other_ca: str
    broker: Mosquitto


@pytest.fixture
def pki(session_root: Path) -> Iterator[Pki]:
    """A static-auth mosquitto with a plain and a TLS listener, its CA and a stranger CA."""
    root = Path(tempfile.mkdtemp(prefix="bustls-", dir=session_root))
    ca = make_ca(root / "pki", "bus-ca")
    other = make_ca(root / "pki", "other-ca")
    server = make_server_cert(ca, root / "pki", "mosquitto")
    with Mosquitto(root / "mqtt", users=USERS, tls=server) as broker:
        yield Pki(ca=str(ca.cert), other_ca=str(other.cert), broker=broker)


def _settings(p: Pki, user: str, ca_file: str | None) -> BusSettings:
    return BusSettings(
        host=p.broker.host,
        port=p.broker.tls_port,
        username=user,
        password=f"{user}-pw",
        client_id=f"slonkd-{user}",
        ca_file=ca_file,
        connect_timeout_s=2.0,
        reconnect_min_s=0.05,
        reconnect_max_s=0.3,
    )


async def _next(bus: Bus, timeout_s: float = 10) -> Received:
    async with asyncio.timeout(timeout_s):
        return await anext(aiter(bus.messages()))


async def test_a_client_with_the_ca_connects_and_publishes_over_tls(pki: Pki) -> None:
    """Buses given the broker's CA connect on the TLS port and an agent's status gets through."""
    status = AgentStatus(node="n1", online=True, pod="worker-1", health={"gpu": "ok"})
    coord = Bus(
        _settings(pki, "coordinator", pki.ca),
        subscriptions=[f"slonk/v1/{CLUSTER}/nodes/+/status"],
    )
    agent_bus = Bus(_settings(pki, "n1", pki.ca))
    async with running(coord, connect_s=None), running(agent_bus, connect_s=None) as agent:
        await coord.wait_connected(10)
        await agent.publish(node_topic(CLUSTER, "n1", Channel.STATUS), status, timeout_s=10)
        got = await _next(coord)
    assert got.payload == status


async def test_the_ca_also_verifies_the_broker_by_its_dns_name(pki: Pki) -> None:
    """``localhost`` is in the certificate's SAN too: dialling it verifies as well."""
    bus = Bus(replace(_settings(pki, "n1", pki.ca), host="localhost"))
    async with running(bus, connect_s=None):
        await bus.wait_connected(10)


async def test_a_client_without_tls_is_refused_on_the_tls_port(pki: Pki) -> None:
    """A plain MQTT client (no CA set) never connects to the TLS listener, bus or raw."""
    bus = Bus(_settings(pki, "n1", None))
    async with running(bus, connect_s=None):
        with pytest.raises(TransientError):
            await bus.wait_connected(3)
    assert bus.connects == 0
    raw = aiomqtt.Client(
        pki.broker.host, pki.broker.tls_port, username="n1", password="n1-pw", timeout=3
    )
    with pytest.raises(aiomqtt.MqttError):
        async with raw:
            pass


async def test_a_client_trusting_another_ca_fails_verification(pki: Pki) -> None:
    """Trusting a CA that did not sign the broker's certificate fails verification.

    The bus keeps retrying TLS and never connects (no fallback to plain MQTT).
    """
    raw = aiomqtt.Client(
        pki.broker.host,
        pki.broker.tls_port,
        username="n1",
        password="n1-pw",
        timeout=3,
        tls_context=tls_context(pki.other_ca),
    )
    with pytest.raises(aiomqtt.MqttError, match="CERTIFICATE_VERIFY_FAILED"):
        async with raw:
            pass
    bus = Bus(_settings(pki, "n1", pki.other_ca))
    async with running(bus, connect_s=None):
        with pytest.raises(TransientError):
            await bus.wait_connected(3)
    assert bus.connects == 0


async def test_a_certificate_for_another_host_fails_verification(session_root: Path) -> None:
    """The right CA but a certificate that does not name 127.0.0.1: refused (hostname check)."""
    root = Path(tempfile.mkdtemp(prefix="bustls-", dir=session_root))
    ca = make_ca(root / "pki", "bus-ca")
    server = make_server_cert(ca, root / "pki", "elsewhere", sans=("DNS:elsewhere.example",))
    with Mosquitto(root / "mqtt", users=USERS, tls=server) as broker:
        raw = aiomqtt.Client(
            broker.host,
            broker.tls_port,
            username="n1",
            password="n1-pw",
            timeout=3,
            tls_context=tls_context(str(ca.cert)),
        )
        with pytest.raises(aiomqtt.MqttError, match="CERTIFICATE_VERIFY_FAILED"):
            async with raw:
                pass


async def test_the_dynsec_admin_works_over_tls_and_only_with_the_ca(session_root: Path) -> None:
    """The dynsec admin issues a client over TLS with the CA; with another CA or none it fails.

    The issued client connects and publishes over TLS too; the failures are transient errors.
    """
    root = Path(tempfile.mkdtemp(prefix="bustls-", dir=session_root))
    ca = make_ca(root / "pki", "bus-ca")
    other = make_ca(root / "pki", "other-ca")
    server = make_server_cert(ca, root / "pki", "mosquitto")
    with Mosquitto(root / "mqtt", dynamic_security=True, tls=server) as broker:
        args = {
            "host": broker.host,
            "port": broker.tls_port,
            "username": broker.admin_user,
            "password": broker.admin_password,
            "timeout_s": 5.0,
        }
        admin = DynSecAdmin(**args, ca_file=str(ca.cert))  # type: ignore[arg-type]
        creds = await admin.issue(CLUSTER, "n7")
        assert "agent-n7" in await admin.clients()
        agent = aiomqtt.Client(
            broker.host,
            broker.tls_port,
            username=creds.username,
            password=creds.password,
            identifier=creds.client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            timeout=5,
            tls_context=tls_context(str(ca.cert)),
        )
        async with agent:
            await agent.publish(str(node_topic(CLUSTER, "n7", Channel.EVENTS)), b"{}", qos=1)
        stranger = DynSecAdmin(**args, ca_file=str(other.cert))  # type: ignore[arg-type]
        with pytest.raises(TransientError):
            await stranger.clients()
        plain = DynSecAdmin(**args)  # type: ignore[arg-type]
        with pytest.raises(TransientError):
            await plain.clients()
