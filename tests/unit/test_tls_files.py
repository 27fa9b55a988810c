"""A server's certificate rotated under it: the coordinator's HTTPS API takes the new pair.

Real files, laid out as a Kubernetes Secret volume is (``tls.crt`` -> ``..data/tls.crt``,
``..data`` -> a directory per version, swapped with one rename), and real TLS handshakes on
127.0.0.1: the certificate the API presents is read from the handshake (its DER compared
with the file's), before and after the swap. The port stays open and a connection made
before the swap still answers after it. A new pair that does not load (a key that is not
the certificate's, a truncated certificate) keeps the old certificate, with one warning.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from slonkd.runtime.coordinating.api import ApiTls, CoordinatorAPI
from slonkd.runtime.kit.tls_files import CertReloader, fingerprint, stamp
from slonkd_sandbox.tls import ServerCert, make_ca, make_server_cert


@dataclass(frozen=True)
class Pki:
    """A CA, two server certificates it signed, and the mounted Secret's directory."""

    ca: Path
    first: ServerCert
    second: ServerCert
    mount: Path


def _der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def _swap(mount: Path, version: str, cert: bytes, key: bytes) -> None:
    """Publish a new version of the Secret as the kubelet does: new directory, one rename."""
    new = mount / f"..{version}"
    new.mkdir()
    (new / "tls.crt").write_bytes(cert)
    (new / "tls.key").write_bytes(key)
    (mount / "..data_tmp").symlink_to(new.name)
    os.replace(mount / "..data_tmp", mount / "..data")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ServerCert, ServerCert]:
    """One CA and two server certificates for 127.0.0.1 (made once: openssl takes a while)."""
    root = tmp_path_factory.mktemp("pki")
    ca = make_ca(root, "rotation-ca")
    return ca.cert, make_server_cert(ca, root, "first"), make_server_cert(ca, root, "second")


@pytest.fixture
def pki(certs: tuple[Path, ServerCert, ServerCert], tmp_path: Path) -> Pki:
    """The Secret's mount holding the first pair."""
    ca, first, second = certs
    mount = tmp_path / "tls"
    mount.mkdir()
    _swap(mount, "v1", first.cert.read_bytes(), first.key.read_bytes())
    for name in ("tls.crt", "tls.key"):
        (mount / name).symlink_to(f"..data/{name}")
    return Pki(ca=ca, first=first, second=second, mount=mount)


@pytest.fixture
async def api(pki: Pki) -> AsyncIterator[CoordinatorAPI]:
    """The coordinator's API over HTTPS from the mount, looking at it every 50 ms."""
    served = CoordinatorAPI(identity="c-0", holder=lambda: "c-1")
    tls = ApiTls(
        cert_file=str(pki.mount / "tls.crt"),
        key_file=str(pki.mount / "tls.key"),
        reload_period_s=0.05,
    )
    await served.start("127.0.0.1", 0, tls=tls)
    try:
        yield served
    finally:
        await served.stop()


async def _connect(port: int, ca: Path) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """A verified TLS connection to the API: the certificate it presented (DER) and the streams."""
    context = ssl.create_default_context(cafile=str(ca))
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context), timeout=5
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return der, reader, writer


async def _presented(port: int, ca: Path) -> bytes:
    der, _, writer = await _connect(port, ca)
    writer.close()
    return der


async def _healthz(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: c\r\n\r\n")
    await writer.drain()
    return await asyncio.wait_for(reader.readline(), timeout=5)


async def _until_reloaded(api: CoordinatorAPI, count: int) -> None:
    assert api.tls is not None
    async with asyncio.timeout(5):
        while api.tls.reloads < count:  # noqa: ASYNC110 - a counter the reloader owns
            await asyncio.sleep(0.02)


async def test_a_rotated_certificate_is_served_without_a_restart(
    api: CoordinatorAPI, pki: Pki
) -> None:
    """After the Secret's swap the next handshake gets the new certificate, on the same port.

    The connection made before the swap keeps working; the reload is logged with the new
    certificate's fingerprint.
    """
    port = api.port
    der, reader, writer = await _connect(port, pki.ca)
    assert der == _der(pki.first.cert)
    with capture_logs() as logs:
        _swap(pki.mount, "v2", pki.second.cert.read_bytes(), pki.second.key.read_bytes())
        await _until_reloaded(api, 1)
    assert await _presented(port, pki.ca) == _der(pki.second.cert)
    assert api.port == port
    assert (await _healthz(reader, writer)).startswith(b"HTTP/1.1 200")
    writer.close()
    (line,) = [e for e in logs if e["event"] == "tls.reloaded"]
    assert line["cert_file"] == str(pki.mount / "tls.crt")
    assert line["sha256"] == fingerprint(pki.second.cert.read_bytes())


@pytest.mark.parametrize("broken", ["key of another certificate", "truncated certificate"])
async def test_a_new_pair_that_does_not_load_keeps_the_old_one(
    api: CoordinatorAPI, pki: Pki, broken: str
) -> None:
    """A bad new pair is refused with one warning (not one per look); the old one is served.

    Once the files are good again the new certificate is served.
    """
    assert api.tls is not None
    cert, key = pki.second.cert.read_bytes(), pki.second.key.read_bytes()
    if broken == "key of another certificate":
        key = pki.first.key.read_bytes()
    else:
        cert = cert[: len(cert) // 2]
    with capture_logs() as logs:
        _swap(pki.mount, "v2", cert, key)
        await asyncio.sleep(0.3)  # several looks of the reloader
    failed = [e for e in logs if e["event"] == "tls.reload_failed"]
    assert len(failed) == 1, logs
    assert failed[0]["log_level"] == "warning"
    assert failed[0]["error"]
    assert api.tls.reloads == 0
    assert await _presented(api.port, pki.ca) == _der(pki.first.cert)
    _swap(pki.mount, "v3", pki.second.cert.read_bytes(), pki.second.key.read_bytes())
    await _until_reloaded(api, 1)
    assert await _presented(api.port, pki.ca) == _der(pki.second.cert)


def test_the_stamp_follows_the_symlinks(pki: Pki) -> None:
    """A swap changes the stamp though the names stay; a missing file has none."""
    names = [str(pki.mount / "tls.crt"), str(pki.mount / "tls.key")]
    before = stamp(names)
    assert before is not None
    assert stamp(names) == before
    _swap(pki.mount, "v2", pki.first.cert.read_bytes(), pki.first.key.read_bytes())
    assert stamp(names) not in (None, before)  # the same bytes, a new version
    assert stamp([*names, str(pki.mount / "absent")]) is None


def test_a_pair_that_does_not_load_at_start_names_the_files(pki: Pki, tmp_path: Path) -> None:
    """At start a bad pair is a ValueError naming both files (the role exits 2 on it)."""
    with pytest.raises(ValueError, match=r"tls\.crt with the key .*other\.key"):
        CertReloader(str(pki.mount / "tls.crt"), str(tmp_path / "other.key"))
