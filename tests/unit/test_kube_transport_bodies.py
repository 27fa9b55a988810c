"""The transport against a real loopback HTTP server that answers 2xx with bodies not JSON.

The server is aiohttp's, on a real socket; the unit under test is
:class:`~slonkd.adapters.kube.transport.KubeTransport` (and the informer above it): a body
the apiserver (or a proxy in front of it) garbles must become slonkd's TransientError, never
an uncaught ``json`` error that ends the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import suppress
from typing import Any

import pytest
from aiohttp import web

from slonkd.adapters.kube.errors import Call, KubeUnavailable
from slonkd.adapters.kube.informer import Informer, InformerSettings
from slonkd.adapters.kube.kubeconfig import ApiEndpoint
from slonkd.adapters.kube.sources import pod_source
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.errors import TransientError

LIST_PODS = Call(verb="list", resource="pods", namespace="ns")
WATCH_PODS = Call(verb="watch", resource="pods", namespace="ns")
PODS = "/api/v1/namespaces/ns/pods"

Handler = Callable[[web.Request], Any]


async def _serve(handler: Handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get(PODS, handler)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def garbage_server() -> AsyncIterator[KubeTransport]:
    """A server answering every GET of pods with 200 and an HTML body."""

    async def handler(_request: web.Request) -> web.Response:
        return web.Response(status=200, text="<html>proxy says hello</html>")

    runner, url = await _serve(handler)
    transport = KubeTransport(ApiEndpoint(server=url), timeout_s=5)
    try:
        yield transport
    finally:
        await transport.close()
        await runner.cleanup()


async def test_a_2xx_body_that_is_not_json_is_a_transient_error(
    garbage_server: KubeTransport,
) -> None:
    """A 200 whose body is not JSON raises KubeUnavailable (a TransientError) naming the call."""
    with pytest.raises(KubeUnavailable, match="list pods") as caught:
        await garbage_server.request(LIST_PODS, "GET", PODS)
    assert isinstance(caught.value, TransientError)
    assert caught.value.__cause__ is not None


async def test_a_2xx_json_body_that_is_not_an_object_is_a_transient_error() -> None:
    """A 200 whose body is JSON but not an object (a list) is a TransientError too."""

    async def handler(_request: web.Request) -> web.Response:
        return web.Response(status=200, text="[1, 2]", content_type="application/json")

    runner, url = await _serve(handler)
    transport = KubeTransport(ApiEndpoint(server=url), timeout_s=5)
    try:
        with pytest.raises(TransientError, match="not a JSON object"):
            await transport.request(LIST_PODS, "GET", PODS)
    finally:
        await transport.close()
        await runner.cleanup()


async def test_a_watch_line_that_is_not_json_ends_the_stream_with_a_transient_error() -> None:
    """The lines before a garbled one are yielded; the garbled one raises a TransientError."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        await response.write(b'{"type": "BOOKMARK", "object": {"metadata": {}}}\n')
        await response.write(b"this is not json\n")
        await response.write(b'{"type": "BOOKMARK", "object": {"metadata": {}}}\n')
        return response

    runner, url = await _serve(handler)
    transport = KubeTransport(ApiEndpoint(server=url), timeout_s=5)
    seen: list[dict[str, Any]] = []
    try:

        async def drain() -> None:
            async for line in transport.stream(WATCH_PODS, PODS, query={}, idle_timeout_s=5):
                seen.append(line)

        with pytest.raises(KubeUnavailable, match="watch pods") as caught:
            await drain()
        assert isinstance(caught.value, TransientError)
        assert [line["type"] for line in seen] == ["BOOKMARK"]
    finally:
        await transport.close()
        await runner.cleanup()


def _pod(name: str, rv: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }


async def test_an_informer_survives_a_garbled_watch_line_and_resumes() -> None:
    """A garbled watch line does not end the informer, which resumes.

    It reconnects from the last good resourceVersion and the event it missed arrives on the
    next watch.
    """
    watches: list[str] = []
    finished = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "1":
            return web.json_response({"items": [], "metadata": {"resourceVersion": "5"}})
        watches.append(request.query.get("resourceVersion", ""))
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        if len(watches) == 1:
            await response.write(b'{"type": "ADDED", "obj\n')  # cut off by a broken proxy
            return response
        line = web.json_response({"type": "ADDED", "object": _pod("p1", "6")}).text
        assert line is not None
        await response.write(line.encode() + b"\n")
        await finished.wait()  # a quiet, healthy watch
        return response

    runner, url = await _serve(handler)
    transport = KubeTransport(ApiEndpoint(server=url), timeout_s=5)
    settings = InformerSettings(backoff_initial_s=0.01, backoff_max_s=0.05)
    informer = Informer(transport, pod_source("ns"), settings)
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(10):
            while informer.get("ns/p1") is None:
                assert not task.done(), task.exception()
                await asyncio.sleep(0.02)
        assert watches[:2] == ["5", "5"]
        assert informer.stats.reconnects >= 1
    finally:
        finished.set()
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await transport.close()
        await runner.cleanup()
