"""The coordinator's API over HTTPS on a real socket, and the operator commands that read it.

The API serves HTTPS with a certificate naming only the Service's DNS name (as a
cert-manager Certificate for the chart would); ``slonkd status`` and ``slonkd recheck``
(real child processes) reach it at ``https://127.0.0.1`` with ``SLONKD_COORDINATOR_CA`` and
``SLONKD_COORDINATOR_TLS_NAME``, as inside the coordinator's pod or through a port-forward.
Without the CA, or without the name, verification fails; plain HTTP gets no answer.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from slonkd.runtime.coordinating.api import ApiTls, CoordinatorAPI
from slonkd_sandbox.tls import make_ca, make_server_cert

NAME = "rel-coordinator.hpc.svc"


@dataclass(frozen=True)
class Served:
    """An HTTPS API (no leader) and the CA that signed its certificate."""

    url: str
    ca: str


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """The API with a certificate for ``NAME`` only, on a free loopback port."""
    ca = make_ca(tmp_path, "slonk-ca")
    server = make_server_cert(ca, tmp_path, "coordinator", sans=(f"DNS:{NAME}",))
    api = CoordinatorAPI(identity="c-0", holder=lambda: "c-1")
    await api.start(
        "127.0.0.1", 0, tls=ApiTls(cert_file=str(server.cert), key_file=str(server.key))
    )
    try:
        yield Served(url=f"https://127.0.0.1:{api.port}", ca=str(ca.cert))
    finally:
        await api.stop()


async def _slonkd(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run ``slonkd ARGS`` with ``env`` (and nothing else of ours); (exit code, stderr)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLONKD_")}
    proc = await _run([sys.executable, "-m", "slonkd.cli.main", *args], {**base, **env})
    return proc.returncode, proc.stderr


async def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, argv, env=env, capture_output=True, text=True, timeout=60, check=False
    )


async def test_operator_commands_reach_the_https_api_with_the_ca_and_name(served: Served) -> None:
    """``status`` and ``recheck`` get the API's answers (503: no leader; the holder) over HTTPS.

    ``recheck`` is answered only from loopback: the 503 (not 403) shows it arrived from
    127.0.0.1 through TLS.
    """
    env = {
        "SLONKD_COORDINATOR_URL": served.url,
        "SLONKD_COORDINATOR_CA": served.ca,
        "SLONKD_COORDINATOR_TLS_NAME": NAME,
    }
    code, err = await _slonkd("status", env=env)
    assert code == 1
    assert "not the leader; the leader is c-1" in err, err
    code, err = await _slonkd("recheck", "w-0", env=env)
    assert code == 1
    assert "refused (503)" in err, err


@pytest.mark.parametrize(
    "drop", ["SLONKD_COORDINATOR_CA", "SLONKD_COORDINATOR_TLS_NAME"], ids=["no-ca", "no-name"]
)
async def test_without_the_ca_or_the_name_verification_fails(served: Served, drop: str) -> None:
    """No CA (the system's trust store) or no name (127.0.0.1 is not in the SAN): refused."""
    env = {
        "SLONKD_COORDINATOR_URL": served.url,
        "SLONKD_COORDINATOR_CA": served.ca,
        "SLONKD_COORDINATOR_TLS_NAME": NAME,
    }
    del env[drop]
    code, err = await _slonkd("status", env=env)
    assert code == 1
    assert "cannot reach the coordinator" in err, err
    assert "certificate verify failed" in err.lower(), err


async def test_the_https_port_answers_no_plain_http(served: Served) -> None:
    """A plain HTTP request to the API's port gets no HTTP answer."""
    plain = served.url.replace("https://", "http://")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"{plain}/healthz") as response:
                await response.read()


async def test_a_bad_coordinator_ca_is_named(served: Served, tmp_path: Path) -> None:
    """A missing ``SLONKD_COORDINATOR_CA`` fails with one line naming the variable."""
    env = {"SLONKD_COORDINATOR_URL": served.url, "SLONKD_COORDINATOR_CA": str(tmp_path / "no")}
    code, err = await _slonkd("status", env=env)
    assert code == 1
    assert len(err.strip().splitlines()) == 1, err
    assert "SLONKD_COORDINATOR_CA" in err, err
