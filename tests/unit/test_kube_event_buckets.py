"""The Event recorder's rate-limit buckets stay bounded over many distinct objects.

The recorder posts to a real HTTP server on loopback (aiohttp's, answering 201) with a
clock the test moves, so that thousands of objects pass in a second.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from slonkd.adapters.kube.events import EventRecorder, EventSettings
from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.kube_changes import ChangeOutcome, ObjectRef


@pytest.fixture
async def transport() -> AsyncIterator[KubeTransport]:
    """A transport to a loopback server that accepts every Event."""

    async def accept(_request: web.Request) -> web.Response:
        return web.json_response({}, status=201)

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/events", accept)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = KubeTransport(ApiEndpoint(server=f"http://127.0.0.1:{port}"), timeout_s=5)
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


class Clock:
    """A monotonic clock the test advances."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        """The time the test set."""
        return self.now


def _node(i: int) -> ObjectRef:
    return ObjectRef(kind="Node", name=f"n{i}", uid=f"uid-{i}")


async def test_buckets_stay_bounded_over_many_distinct_objects(transport: KubeTransport) -> None:
    """Over 300 distinct nodes the recorder never holds more than max_buckets (50) buckets.

    A node that used up its burst stays limited throughout (its empty bucket is kept).
    """
    clock = Clock()
    settings = EventSettings(burst=2, refill_s=60, max_buckets=50)
    recorder = EventRecorder(transport, settings, clock=clock)
    flapping = _node(-1)
    outcomes = [
        (await recorder.record(flapping, type_="Warning", reason="R", message=str(i))).outcome
        for i in range(3)
    ]
    assert outcomes == [ChangeOutcome.CHANGED, ChangeOutcome.CHANGED, ChangeOutcome.DROPPED]
    most = 0
    for i in range(300):
        clock.now += 0.01
        result = await recorder.record(_node(i), type_="Normal", reason="R", message="m")
        assert result.outcome is ChangeOutcome.CHANGED
        most = max(most, recorder.tracked_objects)
    assert most <= 50
    again = await recorder.record(flapping, type_="Warning", reason="R", message="again")
    assert again.outcome is ChangeOutcome.DROPPED  # its empty bucket was kept


async def test_idle_buckets_are_forgotten_once_they_would_be_full(
    transport: KubeTransport,
) -> None:
    """Buckets idle long enough to refill are dropped at the bound, busy ones kept."""
    clock = Clock()
    settings = EventSettings(burst=1, refill_s=10, max_buckets=20)
    recorder = EventRecorder(transport, settings, clock=clock)
    for i in range(20):
        await recorder.record(_node(i), type_="Normal", reason="R", message="m")
    assert recorder.tracked_objects == 20
    clock.now += 11  # every bucket has refilled: the same as a new one
    await recorder.record(_node(100), type_="Normal", reason="R", message="m")
    assert recorder.tracked_objects == 1


def test_event_settings_are_validated() -> None:
    """A zero bound, burst or refill period is refused when the settings are made."""
    for bad in ({"max_buckets": 0}, {"burst": 0}, {"refill_s": 0}):
        with pytest.raises(ValueError, match="must be"):
            EventSettings(**bad)  # type: ignore[arg-type]
