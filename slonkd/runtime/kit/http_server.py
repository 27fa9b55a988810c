"""The process's own small HTTP server: /healthz, /readyz, /metrics, and routes callers add.

One aiohttp.web application on one address and port, with no access log (probes every few
seconds would drown the structured log):

- ``/healthz`` (liveness): 200 while the event loop serves requests and ``alive`` says yes; a
  wedged loop answers nothing, which is what a liveness probe must see.
- ``/readyz`` (readiness): 200 or 503 from the ``ready`` callback, whose reason is the body.
  The callbacks must be quick and must not reach out to other services (the agent's
  readiness never depends on slurmctld or MQTT).
- ``/metrics``: a prometheus_client registry, in the format the scraper asks for.

The coordinator adds its status API with :meth:`HttpServer.add_route` before starting.
It serves until cancelled (:meth:`HttpServer.serve`) or until :meth:`HttpServer.stop`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = structlog.get_logger("slonkd.http")

Check = Callable[[], tuple[bool, str]]
"""``() -> (ok, reason)``: quick, no I/O."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def always() -> tuple[bool, str]:
    """A check that always passes."""
    return True, "ok"


class ServeError(Exception):
    """The server could not listen (address in use, not allowed, unknown host)."""


class HttpServer:
    """Health, readiness and metrics on ``host:port``, plus any routes added before start."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        registry: CollectorRegistry,
        ready: Check,
        alive: Check = always,
    ) -> None:
        self.host = host
        self.port = port
        """The port asked for; after :meth:`start`, the port bound (0 asks for a free one)."""
        self._registry = registry
        self._ready = ready
        self._alive = alive
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None
        self.scrapes = 0
        """/metrics requests served so far (counted before rendering)."""

    def add_route(self, method: str, path: str, handler: Handler) -> None:
        """Serve ``handler`` for ``method path`` too (before :meth:`start`)."""
        self.app.router.add_route(method, path, handler)

    @property
    def url(self) -> str:
        """The base URL (after :meth:`start`), with 127.0.0.1 for a wildcard address."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Listen; :class:`ServeError` with the address when that is impossible."""
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise ServeError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from exc
        self._runner = runner
        bound = runner.addresses[0]
        self.port = int(bound[1])
        log.info("http.listening", address=self.host, port=self.port)

    async def stop(self) -> None:
        """Stop listening and close open connections."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def serve(self) -> None:
        """Start if needed, serve until cancelled, then stop."""
        if self._runner is None:
            await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def _healthz(self, _request: web.Request) -> web.Response:
        return _answer(*self._alive())

    async def _readyz(self, _request: web.Request) -> web.Response:
        return _answer(*self._ready())

    async def _metrics(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self._registry), headers={"Content-Type": content_type})


def _answer(ok: bool, reason: str) -> web.Response:
    return web.Response(status=200 if ok else 503, text=reason + "\n")
