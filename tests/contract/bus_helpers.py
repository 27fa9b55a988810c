"""Helpers shared by the MQTT bus's contract tests: a loop in a task, a running bus, the admin.

Also a dynamic-security broker in a fresh directory, running for the body of a block
(:func:`dynsec_broker_in`), as the dynsec and command tests' fixtures build theirs.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from slonkd.adapters.bus.client import Bus
from slonkd.adapters.bus.dynsec import DynSecAdmin
from slonkd_sandbox.mosquitto import Mosquitto


@asynccontextmanager
async def in_task(loop: Coroutine[Any, Any, object]) -> AsyncIterator[asyncio.Task[object]]:
    """Run ``loop`` in a task for the body of the block; then cancel it, which must end it."""
    task = asyncio.create_task(loop)
    try:
        yield task
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@asynccontextmanager
async def running(bus: Bus, *, connect_s: float | None = 10.0) -> AsyncIterator[Bus]:
    """Run ``bus`` for the body of the block, connected within ``connect_s`` (None: or not)."""
    async with in_task(bus.run()):
        if connect_s is not None:
            await bus.wait_connected(connect_s)
        yield bus


@asynccontextmanager
async def dynsec_broker_in(
    session_root: Path, prefix: str, *, tcp_nodelay: bool = True
) -> AsyncIterator[Mosquitto]:
    """A dynsec broker in a new directory ``prefix*`` under ``session_root``, run for the body.

    Started in a thread (it waits for its port), stopped after the body however it ends.
    """
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=session_root))
    broker = Mosquitto(root, dynamic_security=True, tcp_nodelay=tcp_nodelay)
    await asyncio.to_thread(broker.start)
    try:
        yield broker
    finally:
        await asyncio.to_thread(broker.stop)


def dynsec_admin(b: Mosquitto) -> DynSecAdmin:
    """The dynamic-security admin client of broker ``b`` (plain listener)."""
    return DynSecAdmin(host=b.host, port=b.port, username=b.admin_user, password=b.admin_password)


def admin_watcher(broker: Mosquitto) -> aiomqtt.Client:
    """An MQTT v5 client of ``broker``'s admin, who may read every topic."""
    return aiomqtt.Client(
        broker.host,
        broker.port,
        username=broker.admin_user,
        password=broker.admin_password,
        protocol=aiomqtt.ProtocolVersion.V5,
    )
