"""The credential bootstrap end to end over TLS: https API, TLS broker, real TokenReview.

What the chart's ``tls.enabled`` wires, on real services: the coordinator's API serves
HTTPS with a certificate a throwaway CA signed (SAN 127.0.0.1 and localhost), its dynsec
admin reaches mosquitto's TLS listener, and the agent's real bootstrap client trades a real
pod-bound token for its MQTT client over HTTPS, then connects to the broker over TLS. An
agent without the CA (or with another one) gets nothing and never falls back to plain HTTP;
the API port answers no plain HTTP at all.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from slonkd.adapters.bus.bootstrap import BootstrapSettings, fetch_credentials
from slonkd.adapters.bus.client import Bus, BusSettings
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TransientError
from slonkd.core.kube_objects import WORKER_SELECTOR
from slonkd.core.messages import AgentStatus, Channel, node_topic
from slonkd.runtime.coordinating.api import ApiTls, CoordinatorAPI
from slonkd.runtime.coordinating.credentials import (
    CredentialIssuer,
    CredentialSettings,
    dynsec_admin,
)
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.mosquitto import Mosquitto
from slonkd_sandbox.tls import make_ca, make_server_cert
from tests.contract.bus_helpers import running
from tests.contract.kube_helpers import pending_pod
from tests.contract.test_bus_credentials import AUDIENCE, CLUSTER, WORKER

pytestmark = [pytest.mark.kube, pytest.mark.mqtt]


@dataclass
class Chain:
    """The TLS chain one test uses."""

    kube: KubeCluster
    namespace: str
    broker: Mosquitto
    ca: str
    other_ca: str
    port: int
    tmp: Path

    def token_file(self, pod: str) -> str:
        """A pod-bound token of a new worker pod ``pod``, written as the kubelet would."""
        made = self.kube.api.request(
            "POST", f"/api/v1/namespaces/{self.namespace}/pods", pending_pod(pod, WORKER)
        )
        token = self.kube.create_token(
            self.namespace,
            "default",
            bound_pod=(pod, str(made["metadata"]["uid"])),
            audiences=(AUDIENCE,),
        )
        path = self.tmp / f"{pod}.token"
        path.write_text(token + "\n")
        return str(path)

    def bootstrap(self, token_file: str, ca_file: str | None) -> BootstrapSettings:
        """The agent's bootstrap settings for the https endpoint (one attempt, no waits)."""
        return BootstrapSettings(
            url=f"https://127.0.0.1:{self.port}/v1/credentials",
            token_file=token_file,
            ca_file=ca_file,
            attempts=1,
            wait_min_s=0,
            wait_max_s=0,
        )


@pytest.fixture
async def chain(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str, session_root: Path
) -> AsyncIterator[Chain]:
    """A dynsec mosquitto with a TLS listener and the credentials API serving HTTPS."""
    root = Path(tempfile.mkdtemp(prefix="credtls-", dir=session_root))
    ca = make_ca(root / "pki", "slonk-ca")
    other = make_ca(root / "pki", "other-ca")
    server = make_server_cert(ca, root / "pki", "server")
    broker = Mosquitto(root / "mqtt", dynamic_security=True, tls=server)
    await asyncio.to_thread(broker.start)
    settings = CredentialSettings(
        admin_host=broker.host,
        admin_port=broker.tls_port,
        admin_user=broker.admin_user,
        admin_password=broker.admin_password,
        admin_ca_file=str(ca.cert),
        audiences=(AUDIENCE,),
    )
    api = CoordinatorAPI(identity="test-coordinator", holder=lambda: "")
    api.credentials = CredentialIssuer(
        settings,
        transport=kube_transport,
        admin=dynsec_admin(settings),
        namespace=namespace,
        cluster=CLUSTER,
        pod_selector=WORKER_SELECTOR,
    )
    await api.start(
        "127.0.0.1", 0, tls=ApiTls(cert_file=str(server.cert), key_file=str(server.key))
    )
    try:
        yield Chain(
            kube=kube,
            namespace=namespace,
            broker=broker,
            ca=str(ca.cert),
            other_ca=str(other.cert),
            port=api.port,
            tmp=root,
        )
    finally:
        await api.stop()
        await asyncio.to_thread(broker.stop)


async def test_an_agent_with_the_ca_gets_credentials_over_https_and_connects_over_tls(
    chain: Chain,
) -> None:
    """With the CA the agent's fetch succeeds over HTTPS and its client publishes over TLS."""
    creds = await fetch_credentials(chain.bootstrap(chain.token_file("w-1"), chain.ca))
    assert creds.username == "agent-w-1"
    bus = Bus(
        BusSettings(
            host=chain.broker.host,
            port=chain.broker.tls_port,
            username=creds.username,
            password=creds.password,
            client_id=creds.client_id,
            ca_file=chain.ca,
        )
    )
    async with running(bus, connect_s=None):
        status = AgentStatus(node="w-1", online=True)
        await bus.publish(node_topic(CLUSTER, "w-1", Channel.STATUS), status, timeout_s=10)


async def test_an_agent_without_the_ca_gets_nothing_and_no_plain_http_answers(
    chain: Chain,
) -> None:
    """Without the CA, or trusting another, the fetch fails on verification; http:// fails too.

    The system's trust store does not know the test CA, so no CA means a verification error
    (no retry in plain HTTP); the API port does not speak plain HTTP, so an agent pointed at
    ``http://`` gets no answer either. No client is issued by any of these.
    """
    token = chain.token_file("w-2")
    for ca_file in (None, chain.other_ca):
        with pytest.raises(TransientError, match=r"(?i)certificate verify failed"):
            await fetch_credentials(chain.bootstrap(token, ca_file))
    plain = chain.bootstrap(token, None)
    plain = replace(plain, url=plain.url.replace("https://", "http://"))
    with pytest.raises(TransientError):
        await fetch_credentials(plain)
    admin = dynsec_admin(
        CredentialSettings(
            admin_host=chain.broker.host,
            admin_port=chain.broker.tls_port,
            admin_user=chain.broker.admin_user,
            admin_password=chain.broker.admin_password,
            admin_ca_file=chain.ca,
        )
    )
    assert [c for c in await admin.clients() if c.startswith("agent-")] == []
