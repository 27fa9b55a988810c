"""A CA bundle rotated with an overlapping CA: every client reads it again when it connects.

A CA rotates in steps: the bundle gains the new CA next to the old one, then the servers get
certificates the new CA signed, and only then is the old CA dropped. Here a real TLS server on
127.0.0.1 already presents a certificate of the new CA while the clients' bundle holds only
the old one: handshakes fail. Once the file holds both, the next connection succeeds without
a restart of the client: the bus's next attempt, the dynsec admin's next call and the
credential bootstrap's next attempt (within one fetch). A bundle that cannot be read for a
while is a failed attempt, retried, never the end of the bus.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from slonkd.adapters.bus.bootstrap import BootstrapSettings, fetch_credentials
from slonkd.adapters.bus.client import Bus, BusSettings
from slonkd.adapters.bus.dynsec import DynSecAdmin
from slonkd.core.errors import TransientError
from slonkd_sandbox.tls import ServerCert, make_ca, make_server_cert


@dataclass(frozen=True)
class Certs:
    """The old CA's and the new CA's certificates (PEM) and a server certificate of the new."""

    old: bytes
    new: bytes
    server: ServerCert


@dataclass
class Server:
    """A TLS server presenting the new CA's certificate; counts the handshakes that completed."""

    port: int = 0
    handshakes: int = 0
    bundle: Path = field(default_factory=Path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Two CAs and a certificate for 127.0.0.1 signed by the second (made once)."""
    root = tmp_path_factory.mktemp("pki")
    old, new = make_ca(root, "old-ca"), make_ca(root, "new-ca")
    server = make_server_cert(new, root, "broker")
    return Certs(old=old.cert.read_bytes(), new=new.cert.read_bytes(), server=server)


def _server_context(certs: Certs) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.server.cert, certs.server.key)
    return context


@pytest.fixture
async def server(certs: Certs, tmp_path: Path) -> AsyncIterator[Server]:
    """The TLS server (it hangs up after each handshake) and a bundle of the old CA only."""
    found = Server(bundle=tmp_path / "ca.crt")
    found.bundle.write_bytes(certs.old)

    async def handshaken(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.handshakes += 1
        writer.close()

    listening = await asyncio.start_server(handshaken, "127.0.0.1", 0, ssl=_server_context(certs))
    found.port = listening.sockets[0].getsockname()[1]
    async with listening:
        yield found


async def _until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 - counters and logs, no event to wait on
            await asyncio.sleep(0.01)


async def test_the_bus_reads_the_bundle_again_at_every_attempt(
    server: Server, certs: Certs
) -> None:
    """The bus's attempts fail verification until the bundle gains the new CA, then handshake.

    A bundle missing for a while is a failed attempt: the bus keeps trying.
    """
    settings = BusSettings(
        host="127.0.0.1", port=server.port, username="u", password="p", client_id="c",
        ca_file=str(server.bundle), connect_timeout_s=1.0, reconnect_min_s=0.01,
        reconnect_max_s=0.05,
    )  # fmt: skip
    bus = Bus(settings)
    running = asyncio.create_task(bus.run())
    try:
        with capture_logs() as logs:
            await _until(lambda: sum(e["event"] == "bus.reconnecting" for e in logs) >= 3)
        assert server.handshakes == 0
        assert "CERTIFICATE_VERIFY_FAILED" in json.dumps(logs)
        server.bundle.unlink()
        with capture_logs() as logs:
            await _until(
                lambda: any("cannot load the CA bundle" in e.get("error", "") for e in logs)
            )
        assert not running.done()
        server.bundle.write_bytes(certs.old + certs.new)
        await _until(lambda: server.handshakes >= 1)
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


async def test_the_dynsec_admin_reads_the_bundle_again_at_every_call(
    server: Server, certs: Certs
) -> None:
    """One admin for the process: its next call after the bundle gained the new CA verifies."""
    admin = DynSecAdmin(
        host="127.0.0.1", port=server.port, username="admin", password="pw", timeout_s=1.0,
        ca_file=str(server.bundle),
    )  # fmt: skip
    with pytest.raises(TransientError, match="CERTIFICATE_VERIFY_FAILED"):
        await admin.clients()
    assert server.handshakes == 0
    server.bundle.write_bytes(certs.old + certs.new)
    with pytest.raises(TransientError):  # the server is no broker: it hangs up after TLS
        await admin.clients()
    assert server.handshakes == 1


async def test_the_bootstrap_reads_the_bundle_again_at_every_attempt(
    certs: Certs, tmp_path: Path
) -> None:
    """One fetch: its first attempt fails verification, one after the bundle changed succeeds."""
    bundle, token = tmp_path / "ca.crt", tmp_path / "token"
    bundle.write_bytes(certs.old)
    token.write_text("a-token")

    async def issue(_request: web.Request) -> web.Response:
        return web.json_response({"username": "agent-n1", "password": "pw", "cluster": "lab"})

    app = web.Application()
    app.router.add_post("/v1/credentials", issue)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=_server_context(certs))
    await site.start()
    port = runner.addresses[0][1]
    settings = BootstrapSettings(
        url=f"https://127.0.0.1:{port}/v1/credentials", token_file=str(token),
        ca_file=str(bundle), attempts=50, max_total_s=20, wait_min_s=0.02, wait_max_s=0.05,
    )  # fmt: skip
    try:
        with capture_logs() as logs:
            fetching = asyncio.create_task(fetch_credentials(settings))
            await _until(lambda: any(e["event"] == "bus.bootstrap_retrying" for e in logs))
            assert "CERTIFICATE_VERIFY_FAILED" in json.dumps(logs)
            bundle.write_bytes(certs.old + certs.new)
            creds = await asyncio.wait_for(fetching, timeout=10)
        assert creds.username == "agent-n1"
    finally:
        await runner.cleanup()
