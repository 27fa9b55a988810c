"""Two dynsec admins at once each get their own answers (real mosquitto 2.0, dynsec).

Every admin connection receives every answer on ``$CONTROL/dynamic-security/v1/response``.
The full run of 2026-12-02 caught a leader whose reaper's ``listClients`` took the answer to
the same leader's own ``ensure_client`` batch ("unexpected listClients answer: [{'command':
'deleteRole' ...") and so never swept a gone pod's client. Neighbours:
tests/contract/test_bus_dynsec.py (what the issued credentials may do).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from slonkd.adapters.bus.dynsec_link import CONTROL_TOPIC
from slonkd_sandbox.mosquitto import Mosquitto
from tests.contract.bus_helpers import admin_watcher, dynsec_admin, dynsec_broker_in

pytestmark = pytest.mark.mqtt


@pytest.fixture
async def broker(session_root: Path) -> AsyncIterator[Mosquitto]:
    """A mosquitto with the dynamic-security plugin and its admin."""
    async with dynsec_broker_in(session_root, "dynsec-ans-") as b:
        yield b


async def test_an_admin_takes_only_the_answer_to_its_own_batch(broker: Mosquitto) -> None:
    """While another admin's batches are answered all along, listClients still gets its list.

    The other admin's answers (getClient of a client that does not exist) arrive on the
    same topic in between: taking the first answer that came would read one of those.
    """
    admin = dynsec_admin(broker)
    await admin.issue("lab", "n1")
    stop = asyncio.Event()

    async def other_admin() -> None:
        async with admin_watcher(broker) as other:
            while not stop.is_set():
                batch = [{"command": "getClient", "username": "nobody"}]
                await other.publish(CONTROL_TOPIC, json.dumps({"commands": batch}), qos=1)
                await asyncio.sleep(0.002)

    noise = asyncio.create_task(other_admin())
    try:
        await asyncio.sleep(0.2)
        for _ in range(20):
            assert "agent-n1" in await admin.clients()
            record = await admin.client("agent-n1")
            assert record is not None
    finally:
        stop.set()
        await noise


@pytest.fixture
async def nagle_broker(session_root: Path) -> AsyncIterator[Mosquitto]:
    """A dynsec broker at mosquitto's default ``set_tcp_nodelay false`` (an operator's own)."""
    async with dynsec_broker_in(session_root, "dynsec-nagle-", tcp_nodelay=False) as b:
        yield b


async def test_an_answer_is_not_held_back_behind_the_brokers_ack(nagle_broker: Mosquitto) -> None:
    """Each admin call is answered in about a millisecond, not after a ~40 ms stall.

    mosquitto without ``set_tcp_nodelay`` (the chart sets it; a broker of the operator's may
    not) writes the answer right after the PUBACK of a QoS 1 command; Nagle holds that
    second write until the admin's kernel acknowledges the first, which a delayed ACK does
    only after 40 ms. Every call paid that (issuing one agent's credentials takes two calls:
    ~90 ms in bench/bus.py). The best of a few calls stays far under the 40 ms floor however
    loaded the machine is.
    """
    admin = dynsec_admin(nagle_broker)
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        assert await admin.client("nobody") is None
        best = min(best, time.perf_counter() - began)
    assert best < 0.025, f"fastest dynsec call took {best * 1000:.1f} ms"
