"""A leader's term checks its lease right before each write is sent, not only before a batch.

A leader SIGSTOPped between its batch's lease check and the request sent the request on
waking, 12 s into its successor's term (the soak's I3, a full run: a cordon's
read-modify-write had its GET between the check and the PATCH). The guard
(:mod:`slonkd.core.fencing`) runs in the Kubernetes transport for every method but GET and
in the SLURM runner for a write; a real loopback HTTP server and real tiny programs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from slonkd.adapters.kube.errors import Call
from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.adapters.slurm.runner import CommandRunner, SlurmSettings
from slonkd.core.errors import TerminalError
from slonkd.core.fencing import guard_writes

NODE = "/api/v1/nodes/k1"
GET_NODE = Call(verb="get", resource="nodes")
PATCH_NODE = Call(verb="patch", resource="nodes")


class _Lease:
    """A lease that runs out when told (the leader stopped past it)."""

    def __init__(self) -> None:
        self.valid = True
        self.checks = 0

    def check(self) -> int:
        self.checks += 1
        if not self.valid:
            raise TerminalError("c-0: lease slonkd is not held")
        return 2


@pytest.fixture
async def api() -> AsyncIterator[tuple[KubeTransport, list[str]]]:
    """A loopback server that records each request's method; a transport to it."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.method)
        return web.json_response({"kind": "Node", "metadata": {"name": "k1"}})

    app = web.Application()
    app.router.add_route("*", NODE, handler)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    transport = KubeTransport(ApiEndpoint(server=f"http://127.0.0.1:{runner.addresses[0][1]}"))
    try:
        yield transport, seen
    finally:
        await transport.close()
        await runner.cleanup()


async def test_a_patch_after_the_lease_ran_out_mid_read_modify_write_is_not_sent(
    api: tuple[KubeTransport, list[str]],
) -> None:
    """The GET goes, the lease runs out, the PATCH is refused before it leaves; reads go on."""
    transport, seen = api
    lease = _Lease()

    async def term() -> None:
        guard_writes(lease.check)
        await transport.request(GET_NODE, "GET", NODE)
        lease.valid = False  # stopped here past the lease, woken in the successor's term
        with pytest.raises(TerminalError, match="not held"):
            await transport.request(PATCH_NODE, "PATCH", NODE, body={"spec": {}})
        await transport.request(GET_NODE, "GET", NODE)  # reads are not fenced

    await asyncio.create_task(term())
    assert seen == ["GET", "GET"]
    assert lease.checks == 1


async def test_the_guard_holds_in_the_tasks_a_term_starts_and_nowhere_else(
    api: tuple[KubeTransport, list[str]],
) -> None:
    """A task the term starts inherits the guard; the elector's and other tasks have none."""
    transport, seen = api
    lease = _Lease()
    lease.valid = False

    async def patch() -> None:
        await transport.request(PATCH_NODE, "PATCH", NODE, body={"spec": {}})

    async def term() -> None:
        guard_writes(lease.check)
        with pytest.raises(TerminalError):
            await asyncio.create_task(patch())  # the pass, the fast path, the rollout ...

    await asyncio.create_task(term())
    await asyncio.create_task(patch())  # e.g. the elector renewing the Lease: no guard
    assert seen == ["PATCH"]
    assert lease.checks == 1


async def test_a_slurm_write_is_refused_before_its_process_starts(tmp_path: Path) -> None:
    """The runner calls the guard before it spawns a write; a read runs unguarded."""
    runner = CommandRunner(SlurmSettings(timeout_s=5, attempts=1))
    marker = tmp_path / "sent"
    lease = _Lease()
    lease.valid = False

    async def term() -> None:
        guard_writes(lease.check)
        with pytest.raises(TerminalError, match="not held"):
            await runner.write("/bin/sh", "-c", f"touch {marker}")
        assert await runner.run("/bin/sh", "-c", "echo read") == "read\n"

    await asyncio.create_task(term())
    assert not marker.exists()
    assert lease.checks == 1
    lease.valid = True

    async def valid_term() -> None:
        guard_writes(lease.check)
        await runner.write("/bin/sh", "-c", f"touch {marker}")

    await asyncio.create_task(valid_term())
    assert marker.exists()
