"""The credential bootstrap on real services: apiserver TokenReview, dynsec mosquitto, HTTP API.

The coordinator's API runs in-process with a real :class:`CredentialIssuer`; agents present
real pod-bound tokens minted by TokenRequest for real pod objects, through the agent's real
bootstrap client, and then talk to a broker whose only clients are the ones dynsec holds.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
import aiomqtt
import pytest
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from slonkd.adapters.bus.bootstrap import BootstrapSettings, IssuedCredentials, fetch_credentials
from slonkd.adapters.bus.client import BusSettings
from slonkd.adapters.bus.dynsec import DynSecAdmin
from slonkd.adapters.bus.dynsec_roles import coordinator_role
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TerminalError
from slonkd.core.kube_objects import WORKER_LABELS, WORKER_SELECTOR
from slonkd.core.messages import AgentStatus, Channel, encode, node_topic
from slonkd.runtime.agent.commands import agent_bus
from slonkd.runtime.coordinating.api import CoordinatorAPI
from slonkd.runtime.coordinating.credentials import CredentialIssuer, CredentialSettings
from slonkd_sandbox.kube.cluster import KubeCluster
from slonkd_sandbox.mosquitto import Mosquitto
from tests.contract.bus_helpers import dynsec_admin, in_task, running
from tests.contract.kube_helpers import pending_pod, until

pytestmark = [pytest.mark.kube, pytest.mark.mqtt]

CLUSTER = "lab"
AUDIENCE = "slonkd-bus"
WORKER = dict(WORKER_LABELS)


@dataclass
class Setup:
    """The pieces one test uses."""

    kube: KubeCluster
    namespace: str
    broker: Mosquitto
    admin: DynSecAdmin
    issuer: CredentialIssuer
    url: str
    tmp: Path
    transport: KubeTransport

    def pod(self, name: str, labels: dict[str, str] | None = None, ns: str = "") -> str:
        """Create a pod (worker labels by default); its uid."""
        body = pending_pod(name, labels if labels is not None else WORKER)
        made = self.kube.api.request(
            "POST", f"/api/v1/namespaces/{ns or self.namespace}/pods", body
        )
        return str(made["metadata"]["uid"])

    def token(self, name: str, uid: str, ns: str = "", audience: str = AUDIENCE) -> str:
        """A token bound to pod ``name`` (uid ``uid``) with ``audience``."""
        return self.kube.create_token(
            ns or self.namespace, "default", bound_pod=(name, uid), audiences=(audience,)
        )

    def token_file(self, token: str) -> str:
        """``token`` written where a projected volume would put it."""
        path = Path(tempfile.mkstemp(dir=self.tmp)[1])
        path.write_text(token + "\n")
        return str(path)

    async def bootstrap(self, token: str) -> IssuedCredentials:
        """The agent's real bootstrap client against the API (no waits between retries)."""
        s = BootstrapSettings(
            url=self.url, token_file=self.token_file(token), attempts=2, wait_min_s=0, wait_max_s=0
        )
        return await fetch_credentials(s)

    async def agent_names(self) -> set[str]:
        """The agent clients dynsec holds."""
        return {c for c in await self.admin.clients() if c.startswith("agent-")}

    def client(self, username: str, password: str, client_id: str = "") -> aiomqtt.Client:
        """A plain MQTT 5 client (an issued agent connects under its bound client id)."""
        return aiomqtt.Client(
            self.broker.host,
            self.broker.port,
            username=username,
            password=password,
            identifier=client_id or None,
            protocol=aiomqtt.ProtocolVersion.V5,
            timeout=5,
        )


async def post(url: str, authorization: str | None) -> tuple[int, dict[str, Any]]:
    """POST to ``url`` with that Authorization header; (status, JSON body)."""
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with aiohttp.ClientSession() as session, session.post(url, headers=headers) as r:
        return r.status, await r.json()


class CountingTransport:
    """The real transport, counting the TokenReviews that pass through it."""

    def __init__(self, inner: KubeTransport) -> None:
        self.inner = inner
        self.reviews = 0

    async def request(self, call: Any, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """Count a TokenReview, then make the call."""
        if path.endswith("/tokenreviews"):
            self.reviews += 1
        return await self.inner.request(call, method, path, **kw)


@dataclass
class Served:
    """A second credentials API with its own settings, over a counting transport."""

    issuer: CredentialIssuer
    url: str
    counter: CountingTransport


@pytest.fixture
async def serve(setup: Setup) -> AsyncIterator[Any]:
    """A starter of credentials APIs with given settings (all stopped after the test)."""
    apis: list[CoordinatorAPI] = []

    async def start(**overrides: Any) -> Served:
        settings = CredentialSettings(
            admin_host=setup.broker.host,
            admin_port=setup.broker.port,
            admin_user=setup.broker.admin_user,
            admin_password=setup.broker.admin_password,
            audiences=(AUDIENCE,),
            **overrides,
        )
        counter = CountingTransport(setup.transport)
        issuer = CredentialIssuer(
            settings,
            transport=cast(KubeTransport, counter),
            admin=setup.admin,
            namespace=setup.namespace,
            cluster=CLUSTER,
            pod_selector=WORKER_SELECTOR,
        )
        api = CoordinatorAPI(identity="test-coordinator", holder=lambda: "")
        api.credentials = issuer
        await api.start("127.0.0.1", 0)
        apis.append(api)
        return Served(issuer, f"http://127.0.0.1:{api.port}/v1/credentials", counter)

    yield start
    for api in apis:
        await api.stop()


def junk_token() -> str:
    """A bearer value shaped like a JWT that no apiserver will authenticate."""
    return "eyJhbGciOiJSUzI1NiJ9." + secrets.token_urlsafe(600) + "." + secrets.token_urlsafe(64)


async def flood(url: str, count: int, source: str) -> list[int]:
    """``count`` concurrent junk-token requests from the local address ``source``; statuses."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> int:
            headers = {"Authorization": f"Bearer {junk_token()}"}
            async with session.post(url, headers=headers) as r:
                await r.read()
                return r.status

        return list(await asyncio.gather(*(one() for _ in range(count))))


@pytest.fixture
async def setup(
    kube: KubeCluster, kube_transport: KubeTransport, namespace: str, session_root: Path
) -> AsyncIterator[Setup]:
    """A dynsec broker, the coordinator API with a credential issuer, a namespace for pods."""
    root = Path(tempfile.mkdtemp(prefix="creds-", dir=session_root))
    broker = Mosquitto(root / "mqtt", dynamic_security=True)
    await asyncio.to_thread(broker.start)
    admin = dynsec_admin(broker)
    settings = CredentialSettings(
        admin_host=broker.host,
        admin_port=broker.port,
        admin_user=broker.admin_user,
        admin_password=broker.admin_password,
        audiences=(AUDIENCE,),
        per_pod_limit=3,
    )
    issuer = CredentialIssuer(
        settings,
        transport=kube_transport,
        admin=admin,
        namespace=namespace,
        cluster=CLUSTER,
        pod_selector=WORKER_SELECTOR,
    )
    api = CoordinatorAPI(identity="test-coordinator", holder=lambda: "")
    api.credentials = issuer
    await api.start("127.0.0.1", 0)
    try:
        yield Setup(
            kube=kube,
            namespace=namespace,
            broker=broker,
            admin=admin,
            issuer=issuer,
            url=f"http://127.0.0.1:{api.port}/v1/credentials",
            tmp=root,
            transport=kube_transport,
        )
    finally:
        await api.stop()
        await asyncio.to_thread(broker.stop)


async def test_a_worker_pods_token_gets_credentials_for_its_own_topics_only(setup: Setup) -> None:
    """A worker's token yields its own client, confined to its own topics.

    It publishes its status, not another node's, and may not read another node's commands.
    """
    uid = setup.pod("w-1")
    creds = await setup.bootstrap(setup.token("w-1", uid))
    assert (creds.username, creds.cluster) == ("agent-w-1", CLUSTER)
    assert "password" not in repr(creds)
    admin = setup.client(setup.broker.admin_user, setup.broker.admin_password)
    async with admin as watcher:
        await watcher.subscribe(f"slonk/v1/{CLUSTER}/nodes/+/status", qos=1)
        async with setup.client(creds.username, creds.password, creds.client_id) as agent:
            forged = AgentStatus(node="w-2", online=False)
            await agent.publish(
                str(node_topic(CLUSTER, "w-2", Channel.STATUS)), encode(forged), qos=1
            )
            mine = AgentStatus(node="w-1", online=True)
            await agent.publish(
                str(node_topic(CLUSTER, "w-1", Channel.STATUS)), encode(mine), qos=1
            )
            other = await agent.subscribe(str(node_topic(CLUSTER, "w-2", Channel.COMMANDS)), qos=1)
            own = await agent.subscribe(str(node_topic(CLUSTER, "w-1", Channel.COMMANDS)), qos=1)
        async with asyncio.timeout(10):
            first = await anext(aiter(watcher.messages))
    assert str(first.topic) == f"slonk/v1/{CLUSTER}/nodes/w-1/status"  # the forgery never came
    assert all(int(c.value) >= 0x80 for c in other)  # type: ignore[union-attr]
    assert [int(c.value) for c in own] == [1]  # type: ignore[union-attr]
    assert setup.issuer.issued == 1


async def test_tokens_that_are_not_a_worker_pods_are_refused_and_create_nothing(
    setup: Setup, kube: KubeCluster
) -> None:
    """Anything but a live worker pod's token is refused (401/403) and creates no client.

    Garbage, a missing header, a wrong audience, an unbound token, a pod outside the
    namespace, a pod that is not a worker, a deleted pod's token.
    """
    other_ns = f"{setup.namespace}-x"
    kube.create_namespace(other_ns)
    try:
        outside_uid = setup.pod("w-out", ns=other_ns)
        plain_uid = setup.pod("web-1", labels={"app": "web"})
        gone_uid = setup.pod("w-gone")
        gone_token = setup.token("w-gone", gone_uid)
        kube.api.request("DELETE", f"/api/v1/namespaces/{setup.namespace}/pods/w-gone")
        worker_uid = setup.pod("w-5")
        unbound = kube.create_token(setup.namespace, "default", audiences=(AUDIENCE,))
        cases = {
            "no header": (None, 401),
            "not bearer": ("Basic dXNlcjpwYXNz", 401),
            "garbage": ("Bearer not-a-token", 401),
            "oversized": ("Bearer " + "a" * 8050, 401),
            "wrong audience": (f"Bearer {setup.token('w-5', worker_uid, audience='other')}", 401),
            "not pod-bound": (f"Bearer {unbound}", 403),
            "other namespace": (f"Bearer {setup.token('w-out', outside_uid, ns=other_ns)}", 403),
            "not a worker": (f"Bearer {setup.token('web-1', plain_uid)}", 403),
            "deleted pod": (f"Bearer {gone_token}", 401),
        }
        for what, (header, want) in cases.items():
            status, body = await post(setup.url, header)
            assert (what, status) == (what, want), body
            assert "password" not in body
        assert await setup.agent_names() == set()
        assert setup.issuer.issued == 0
        assert setup.issuer.refused == len(cases)
        with pytest.raises(TerminalError, match="403"):
            await setup.bootstrap(setup.token("web-1", plain_uid))
    finally:
        kube.api.request("DELETE", f"/api/v1/namespaces/{other_ns}", ok=(200, 202, 404))


async def test_a_restarted_pod_gets_a_new_password_and_the_old_one_stops_working(
    setup: Setup, kube: KubeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """A restarted pod (new uid) gets a new password; the old password and token stop working.

    The broker refuses the old password, the API the old pod's token; no secret is logged.
    """
    first_uid = setup.pod("w-7")
    old_token = setup.token("w-7", first_uid)
    old = await setup.bootstrap(old_token)
    async with setup.client(old.username, old.password, old.client_id):
        pass
    kube.api.request("DELETE", f"/api/v1/namespaces/{setup.namespace}/pods/w-7")
    second_uid = setup.pod("w-7")
    assert second_uid != first_uid
    new = await setup.bootstrap(setup.token("w-7", second_uid))
    assert new.username == old.username
    assert new.password != old.password
    with pytest.raises(aiomqtt.MqttError):
        async with setup.client(old.username, old.password, old.client_id):
            pass
    async with setup.client(new.username, new.password, new.client_id):
        pass
    status, body = await post(setup.url, f"Bearer {old_token}")
    # The apiserver may still pass the old token for a moment (its pod lookup is cached);
    # then the issuer's own uid check refuses it: 403 instead of 401, refused either way.
    assert status in (401, 403), body
    assert await setup.agent_names() == {"agent-w-7"}
    logged = capsys.readouterr()
    for secret in (old.password, new.password, old_token):
        assert secret not in logged.out + logged.err  # neither passwords nor tokens are logged


async def test_rotations_past_the_per_pod_limit_are_refused_with_429(setup: Setup) -> None:
    """With a limit of 3 per window, the fourth re-creation of one pod's client is 429.

    Only requests that must (re)create the client count (here it is deleted under the pod
    each time); the refused one creates nothing.
    """
    uid = setup.pod("w-9")
    header = f"Bearer {setup.token('w-9', uid)}"
    codes = []
    for _ in range(4):
        codes.append((await post(setup.url, header))[0])
        await setup.admin.revoke("w-9")
    assert codes == [200, 200, 200, 429]
    assert setup.issuer.issued == 3
    assert await setup.agent_names() == set()


async def test_the_agents_bus_fetches_credentials_and_refetches_after_a_rotation(
    setup: Setup,
) -> None:
    """The agent's bus connects with issued credentials and refetches them when refused.

    When its client is deleted under it (the broker drops it and refuses the password), it
    fetches credentials again and reconnects by itself.
    """
    uid = setup.pod("w-3")
    token = setup.token("w-3", uid)
    boot = BootstrapSettings(
        url=setup.url, token_file=setup.token_file(token), wait_min_s=0, wait_max_s=0
    )
    settings = BusSettings(
        host=setup.broker.host,
        port=setup.broker.port,
        username="",
        password="",
        client_id="slonkd-agent-w-3",
        reconnect_min_s=0.05,
        reconnect_max_s=0.5,
    )
    topic = node_topic(CLUSTER, "w-3", Channel.STATUS)
    bus = agent_bus(
        settings,
        cluster=CLUSTER,
        node="w-3",
        will=(topic, AgentStatus(node="w-3", online=False)),
        bootstrap=boot,
    )
    async with running(bus, connect_s=20):
        await bus.publish(topic, AgentStatus(node="w-3", online=True), retain=True)
        await setup.admin.revoke("w-3")  # its client deleted under it: the broker drops it
        await until("the bus reconnected with new credentials", lambda: bus.connects >= 2)
        await bus.publish(topic, AgentStatus(node="w-3", online=True), retain=True)
        assert setup.issuer.issued == 2


async def test_a_source_past_its_limit_gets_429_before_any_token_review(serve: Any) -> None:
    """Past its per-source burst a source is answered 429 with Retry-After, no TokenReview spent.

    Another source (another pod's address) still gets its requests reviewed.
    """
    served = await serve(source_burst=3, source_rate=0.1)
    statuses = await flood(served.url, 10, "127.0.0.2")
    assert sorted(statuses) == [401] * 3 + [429] * 7
    assert served.counter.reviews == 3
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    headers = {"Authorization": f"Bearer {junk_token()}"}
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(served.url, headers=headers) as r,
    ):
        assert r.status == 429
        assert int(r.headers["Retry-After"]) >= 1
    assert (await post(served.url, f"Bearer {junk_token()}"))[0] == 401  # from 127.0.0.1
    assert served.counter.reviews == 4


async def test_past_the_global_limit_requests_get_429_before_any_token_review(
    serve: Any,
) -> None:
    """The global bucket caps TokenReviews across all sources; the rest get 429 + Retry-After."""
    served = await serve(global_burst=4, global_rate=0.1)
    statuses = [
        *(await flood(served.url, 3, "127.0.0.2")),
        *(await flood(served.url, 3, "127.0.0.3")),
    ]
    assert sorted(statuses) == [401] * 4 + [429] * 2
    assert served.counter.reviews == 4


async def test_oversized_headers_and_bodies_are_refused_without_a_token_review(
    serve: Any, setup: Setup
) -> None:
    """A huge Authorization header, too many headers or any sizeable body: refused, unreviewed.

    A body the endpoint never needs is refused with 413 from its Content-Length; a chunked
    one too; headers past the caps with 400/431 by the HTTP server before the handler runs.
    """
    served = await serve()
    uid = setup.pod("w-4")
    auth = {"Authorization": f"Bearer {setup.token('w-4', uid)}"}
    async with aiohttp.ClientSession() as session:

        async def status(headers: dict[str, str], data: Any = None) -> int:
            async with session.post(served.url, headers=headers, data=data) as r:
                return r.status

        assert await status({"Authorization": "Bearer " + "a" * 100_000}) in (400, 431)
        many = {**auth, **{f"X-Pad-{i}": "x" for i in range(200)}}
        assert await status(many) in (400, 431)
        assert await status(auth, data=b"x" * 5_000_000) == 413

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(100):
                yield b"x" * 10_000

        assert await status(auth, data=chunks()) == 413
        assert served.counter.reviews == 0
        assert await status(auth, data=b"") == 200  # the agent's own request still works
    assert served.counter.reviews == 1


@pytest.mark.alone  # a bound in seconds: the 4-worker phase on a busy machine broke it
async def test_a_junk_token_flood_does_not_delay_a_restarted_agent_nor_flood_the_log(
    serve: Any, setup: Setup, kube: KubeCluster
) -> None:
    """500 concurrent junk tokens from one address while a worker pod restarts.

    The restarted pod's agent (another address: each pod has its own IP) gets credentials
    within its normal time; the flood spends at most its per-source allowance of
    TokenReviews; the refusals make a bounded number of log lines.
    """
    served = await serve()  # the defaults: 10 at once and 1 per 2 s per source, summary per minute
    uid = setup.pod("w-2")
    start = time.monotonic()
    await setup_bootstrap(served.url, setup, setup.token("w-2", uid))
    normal = time.monotonic() - start
    kube.api.request("DELETE", f"/api/v1/namespaces/{setup.namespace}/pods/w-2")
    new_uid = setup.pod("w-2")
    token = setup.token("w-2", new_uid)
    reviews_before = served.counter.reviews
    with structlog.testing.capture_logs() as logs:
        flooding = asyncio.create_task(flood(served.url, 500, "127.0.0.2"))
        await asyncio.sleep(0.05)  # the flood is under way
        start = time.monotonic()
        creds = await setup_bootstrap(served.url, setup, token)
        under_flood = time.monotonic() - start
        flood_start = start - 0.05
        statuses = await flooding
        flood_s = time.monotonic() - flood_start
    refused_lines = [e for e in logs if e["event"] == "bus.credentials_refused"]
    junk_reviews = served.counter.reviews - reviews_before - 1
    print(
        f"normal {normal * 1000:.0f} ms, under flood {under_flood * 1000:.0f} ms, "
        f"flood {flood_s:.2f} s: {statuses.count(429)} x 429, {statuses.count(401)} x 401, "
        f"{junk_reviews} junk TokenReviews, {len(refused_lines)} refusal log lines"
    )
    assert creds.username == "agent-w-2"
    assert under_flood < max(2.0, 5 * normal)
    assert all(code in (401, 429) for code in statuses)
    assert junk_reviews <= 10 + 0.5 * flood_s + 1
    assert len(refused_lines) <= 2 + flood_s / 60


async def setup_bootstrap(url: str, setup: Setup, token: str) -> IssuedCredentials:
    """The agent's real bootstrap client against ``url``."""
    boot = BootstrapSettings(
        url=url, token_file=setup.token_file(token), attempts=2, wait_min_s=0, wait_max_s=0
    )
    return await fetch_credentials(boot)


# -- issue 16 item 4: idempotent per pod uid, revoked when the pod goes ---------------------


async def test_a_replayed_token_gets_the_same_password_and_never_kicks_the_agent(
    setup: Setup,
) -> None:
    """Requests for one pod uid are idempotent: same password, no rotation, no lockout.

    A replayed (or retried) token used to re-key the agent on every request, kicking it off
    the broker until the per-pod limit (3 here) locked it out. Now eight requests for the same
    live pod all answer its one password, the connected agent stays connected, and dynsec
    holds one client for the pod.
    """
    uid = setup.pod("w-11")
    header = f"Bearer {setup.token('w-11', uid)}"
    first = await setup.bootstrap(setup.token("w-11", uid))
    async with setup.client(first.username, first.password, first.client_id) as agent:
        answers = [await post(setup.url, header) for _ in range(8)]
        assert [status for status, _ in answers] == [200] * 8
        assert {body["password"] for _, body in answers} == {first.password}
        mine = AgentStatus(node="w-11", online=True)
        await agent.publish(str(node_topic(CLUSTER, "w-11", Channel.STATUS)), encode(mine), qos=1)
    assert await setup.agent_names() == {"agent-w-11"}


def _admin_connections(setup: Setup) -> int:
    """Connections the dynsec admin has made to the broker (its log's connection lines)."""
    return setup.broker.log.read_text().count(f"u'{setup.broker.admin_user}')")


async def test_a_credential_request_makes_one_admin_connection(setup: Setup) -> None:
    """The check (does dynsec hold this pod's client?) and the change share one connection.

    Each admin connection is a CONNECT/CONNACK, which over TLS 1.3 mosquitto (without
    ``set_tcp_nodelay``) answers ~40 ms late: a new pod's request made two (the check,
    then the change). A first request (a change) and a repeated one (none) each connect
    once, and get the same password.
    """
    uid = setup.pod("w-21")
    token = setup.token("w-21", uid)
    passwords = set()
    for _ in range(2):
        before = _admin_connections(setup)
        passwords.add((await setup.bootstrap(token)).password)
        assert _admin_connections(setup) - before == 1
    assert len(passwords) == 1
    assert setup.issuer.issued == 2


def _reaper(setup: Setup, pods: Any) -> Any:
    from slonkd.runtime.coordinating.credential_reaper import CredentialReaper

    return CredentialReaper(
        setup.admin,
        transport=setup.transport,
        namespace=setup.namespace,
        pod_selector=WORKER_SELECTOR,
        pods=pods,
        own_client="coordinator-me",
    )


@pytest.fixture
async def pods(setup: Setup) -> AsyncIterator[Any]:
    """The coordinator's worker pod informer over the test namespace, synced."""
    from slonkd.adapters.kube.sources import coordinator_informers

    _, informer = coordinator_informers(
        setup.transport, setup.namespace, pod_selector=WORKER_SELECTOR
    )
    async with in_task(informer.run()):
        await informer.synced.wait()
        yield informer


async def test_deleting_a_worker_pod_revokes_its_agents_client(
    setup: Setup, kube: KubeCluster, pods: Any
) -> None:
    """When a worker pod is deleted, its agent's client is deleted: connection closed, refused.

    The leader's reaper hears the deletion from the pod informer; the scaled-down agent's
    password stops working at once instead of staying valid forever.
    """
    reaper = _reaper(setup, pods)
    pods.add_handler(reaper.on_pod_event)
    async with in_task(reaper.run()):
        uid = setup.pod("w-12")
        creds = await setup.bootstrap(setup.token("w-12", uid))
        async with setup.client(creds.username, creds.password, creds.client_id) as agent:
            kube.api.request("DELETE", f"/api/v1/namespaces/{setup.namespace}/pods/w-12")
            await until_async("the client deleted", lambda: _gone(setup, "agent-w-12"))
            with pytest.raises(aiomqtt.MqttError):  # the broker closed the connection
                await _publish_twice(agent)
        with pytest.raises(aiomqtt.MqttError):
            async with setup.client(creds.username, creds.password, creds.client_id):
                pass


async def test_a_late_deletion_of_an_old_pod_keeps_its_successors_client(
    setup: Setup, kube: KubeCluster, pods: Any
) -> None:
    """A deletion handled after the pod's successor got its client leaves that client alone.

    A StatefulSet recreates the pod under the same name; the revocation is bound to the
    deleted pod's uid, so the successor's agent keeps its credentials.
    """
    reaper = _reaper(setup, pods)
    old_uid = setup.pod("w-13")
    await setup.bootstrap(setup.token("w-13", old_uid))
    kube.api.request("DELETE", f"/api/v1/namespaces/{setup.namespace}/pods/w-13")
    new_uid = setup.pod("w-13")
    new = await setup.bootstrap(setup.token("w-13", new_uid))
    assert await reaper.revoke_pod("w-13", old_uid) is False
    async with setup.client(new.username, new.password, new.client_id):
        pass
    assert await reaper.revoke_pod("w-13", new_uid) is True
    assert await setup.agent_names() == set()


async def test_the_leader_start_sweep_removes_clients_of_gone_pods_and_their_sessions(
    setup: Setup, kube: KubeCluster, pods: Any
) -> None:
    """At leader start, every issued client whose pod (by uid) is gone is deleted.

    Kept: a live worker pod's agent, the leader's own client, the admin. Deleted: an agent
    client issued to a deleted pod uid, a pre-uid agent client of a pod name that no longer
    exists, a gone coordinator pod's client; that coordinator's session (it queued what its
    subscriptions matched) is purged too.
    """
    live_uid = setup.pod("w-14")
    live = await setup.bootstrap(setup.token("w-14", live_uid))
    gone_uid = setup.pod("w-15")
    await setup.bootstrap(setup.token("w-15", gone_uid))
    kube.api.request("DELETE", f"/api/v1/namespaces/{setup.namespace}/pods/w-15")
    await setup.admin.issue(CLUSTER, "w-16")  # issued before uids were recorded; no pod w-16
    role = coordinator_role(CLUSTER, "coordinator-c-gone")
    await setup.admin.ensure_client(
        "coordinator-c-gone", "pw-gone-123456", role,
        client_id="slonkd-coordinator-c-gone", pod="c-gone",
    )  # fmt: skip
    own = coordinator_role(CLUSTER, "coordinator-me")
    await setup.admin.ensure_client(
        "coordinator-me", "pw-me-123456", own, client_id="slonkd-coordinator-me", pod="me"
    )
    async with _session_client(
        setup, "coordinator-c-gone", "pw-gone-123456", "slonkd-coordinator-c-gone"
    ) as c:
        await c.subscribe("slonk/v1/lab/nodes/+/status", qos=1)
    async with setup.client(setup.broker.admin_user, setup.broker.admin_password) as admin:
        await admin.publish("slonk/v1/lab/nodes/w-14/status", b"queued", qos=1)

    removed = await _reaper(setup, pods).sweep()

    assert sorted(removed) == ["agent-w-15", "agent-w-16", "coordinator-c-gone"]
    names = set(await setup.admin.clients())
    assert {"agent-w-14", "coordinator-me", setup.broker.admin_user} <= names
    assert not names & {"agent-w-15", "agent-w-16", "coordinator-c-gone"}
    async with setup.client(live.username, live.password, live.client_id):
        pass
    # The gone coordinator's session is purged: resuming it delivers nothing it had queued.
    async with _session_client(
        setup, setup.broker.admin_user, setup.broker.admin_password, "slonkd-coordinator-c-gone"
    ) as resumed:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.5):
                await anext(aiter(resumed.messages))


def _session_client(setup: Setup, user: str, password: str, client_id: str) -> aiomqtt.Client:
    """A client resuming (or starting) a persistent session under ``client_id``."""
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 300
    return aiomqtt.Client(
        setup.broker.host, setup.broker.port, username=user, password=password,
        identifier=client_id, protocol=aiomqtt.ProtocolVersion.V5, clean_start=False,
        properties=props, timeout=5,
    )  # fmt: skip


async def _gone(setup: Setup, username: str) -> bool:
    return username not in await setup.admin.clients()


async def _publish_twice(agent: aiomqtt.Client) -> None:
    async with asyncio.timeout(5):
        for _ in range(2):
            await agent.publish("slonk/v1/lab/nodes/w-12/status", b"{}", qos=1)


async def until_async(what: str, check: Any, timeout_s: float = 15.0) -> None:
    """Await ``check()`` until it is true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
