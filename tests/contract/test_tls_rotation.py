"""A certificate rotation on a real mosquitto: SIGHUP, and no client leaves the bus.

The broker starts with a certificate of the old CA; the clients trust a bundle of the old
and the new CA (a CA rotated with an overlap). The broker's certificate and key files are
replaced by ones the new CA signed and the broker gets SIGHUP, as the chart's ``tls-reload``
sidecar sends it. The subscriber connected before stays connected on its one connection
(no reconnect) and gets a QoS 1 message published after the swap by a client that connected
after it, whose handshake shows the new certificate. The signal goes to this test's broker
by its pid, never to a process found by name.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import ssl
import tempfile
from pathlib import Path

import pytest

from slonkd.adapters.bus.client import Bus, BusSettings, Received
from slonkd.core.messages import AgentStatus, Channel, node_topic
from slonkd_sandbox.mosquitto import Mosquitto, MqttUser
from slonkd_sandbox.tls import ServerCert, make_ca, make_server_cert
from tests.contract.bus_helpers import running

pytestmark = pytest.mark.mqtt

CLUSTER = "lab"
USERS = {
    "coordinator": MqttUser(password="coordinator-pw", acl=("topic readwrite slonk/#",)),
    "n1": MqttUser(password="n1-pw", acl=("topic write slonk/v1/lab/nodes/n1/#",)),
}


def _settings(broker: Mosquitto, user: str, bundle: Path) -> BusSettings:
    return BusSettings(
        host=broker.host, port=broker.tls_port, username=user, password=f"{user}-pw",
        client_id=f"slonkd-{user}", ca_file=str(bundle), connect_timeout_s=2.0,
        reconnect_min_s=0.05, reconnect_max_s=0.3,
    )  # fmt: skip


def _der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


async def _presented(broker: Mosquitto, bundle: Path) -> bytes:
    """The certificate the broker presents to a new, verified TLS connection (DER)."""
    context = ssl.create_default_context(cafile=str(bundle))
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(broker.host, broker.tls_port, ssl=context), timeout=5
    )
    der: bytes = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return der


def _replace(live: ServerCert, new: ServerCert) -> None:
    """Put ``new``'s certificate and key in ``live``'s files, each with one rename."""
    for source, target in ((new.cert, live.cert), (new.key, live.key)):
        shutil.copyfile(source, target.with_suffix(".next"))
        os.replace(target.with_suffix(".next"), target)


async def test_a_rotation_keeps_every_client_on_the_bus(session_root: Path) -> None:
    """Across the swap and SIGHUP the subscriber keeps its connection and gets what follows."""
    root = Path(tempfile.mkdtemp(prefix="tlsrot-", dir=session_root))
    old_ca, new_ca = make_ca(root / "pki", "old-ca"), make_ca(root / "pki", "new-ca")
    first = make_server_cert(old_ca, root / "pki", "first")
    second = make_server_cert(new_ca, root / "pki", "second")
    bundle = root / "bundle.crt"
    bundle.write_bytes(old_ca.cert.read_bytes() + new_ca.cert.read_bytes())
    (root / "live").mkdir()
    live = ServerCert(cert=root / "live" / "tls.crt", key=root / "live" / "tls.key", ca=bundle)
    _replace(live, first)
    status = AgentStatus(node="n1", online=True, pod="worker-1", health={"gpu": "ok"})
    with Mosquitto(root / "mqtt", users=USERS, tls=live) as broker:
        assert await _presented(broker, bundle) == _der(first.cert)
        coord = Bus(
            _settings(broker, "coordinator", bundle),
            subscriptions=[f"slonk/v1/{CLUSTER}/nodes/+/status"],
        )
        async with running(coord):
            _replace(live, second)
            os.kill(broker.pid, signal.SIGHUP)
            async with asyncio.timeout(10):
                while await _presented(broker, bundle) != _der(second.cert):  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            async with running(Bus(_settings(broker, "n1", bundle))) as agent:
                await agent.publish(node_topic(CLUSTER, "n1", Channel.STATUS), status)
                async with asyncio.timeout(10):
                    got: Received = await anext(aiter(coord.messages()))
            assert got.payload == status
            assert coord.connected
            assert coord.connects == 1  # the same connection all along
        assert broker.running
