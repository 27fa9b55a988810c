"""The probe and metrics server on a real socket: status codes, formats, added routes, errors."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from slonkd.runtime.kit.http_server import HttpServer, ServeError
from slonkd.runtime.kit.metrics import Metrics


async def _get(url: str, **headers: str) -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=5)) as response,
    ):
        return response.status, response.headers.get("Content-Type", ""), await response.text()


async def test_probes_follow_their_checks_and_metrics_render_the_registry() -> None:
    """/readyz is 503 with the reason until ready, /healthz 200, /metrics the registry's text."""
    metrics = Metrics(role="agent")
    metrics.applied("drain", "pod-terminating", changed=True)
    state = {"ready": False}
    server = HttpServer(
        host="127.0.0.1",
        port=0,
        registry=metrics.registry,
        ready=lambda: (state["ready"], "ready" if state["ready"] else "pod informer not synced"),
    )
    await server.start()  # binds a free port; serve() then serves until cancelled
    task = asyncio.create_task(server.serve())
    try:
        assert await _get(f"{server.url}/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
        status, _, body = await _get(f"{server.url}/readyz")
        assert (status, body) == (503, "pod informer not synced\n")
        state["ready"] = True
        assert (await _get(f"{server.url}/readyz"))[0] == 200
        status, content_type, text = await _get(f"{server.url}/metrics")
        assert status == 200
        assert content_type.startswith("text/plain; version=0.0.4")
        assert 'slonkd_transitions_total{action="drain",cause="pod-terminating"} 1.0' in text
        assert "process_resident_memory_bytes" in text
        _, content_type, text = await _get(
            f"{server.url}/metrics", Accept="application/openmetrics-text; version=1.0.0"
        )
        assert content_type.startswith("application/openmetrics-text")
        assert text.endswith("# EOF\n")
        assert (await _get(f"{server.url}/nothing-here"))[0] == 404
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(f"{server.url}/healthz")  # stopped: nothing listens any more


async def test_added_routes_are_served_and_a_failing_liveness_is_503() -> None:
    """The coordinator's status API goes on the same server; alive=False makes /healthz 503."""

    async def status(_request: web.Request) -> web.Response:
        return web.json_response({"leader": True})

    server = HttpServer(
        host="127.0.0.1",
        port=0,
        registry=Metrics(role="coordinator").registry,
        ready=lambda: (True, "ready"),
        alive=lambda: (False, "reconcile loop stopped"),
    )
    server.add_route("GET", "/status", status)
    await server.start()
    try:
        assert await _get(f"{server.url}/status") == (
            200,
            "application/json; charset=utf-8",
            '{"leader": true}',
        )
        assert await _get(f"{server.url}/healthz") == (
            503,
            "text/plain; charset=utf-8",
            "reconcile loop stopped\n",
        )
    finally:
        await server.stop()


async def test_a_port_in_use_is_a_serve_error_naming_the_address() -> None:
    """A second server on a port already bound fails at start with a clear ServeError."""
    registry = Metrics(role="agent").registry
    first = HttpServer(host="127.0.0.1", port=0, registry=registry, ready=lambda: (True, "ok"))
    await first.start()
    try:
        second = HttpServer(
            host="127.0.0.1", port=first.port, registry=registry, ready=lambda: (True, "ok")
        )
        with pytest.raises(ServeError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            await second.start()
    finally:
        await first.stop()
