"""The coordinator's HTTP API: ``/v1/status``, ``/v1/nodes``, ``/v1/explain/{node}``.

Two POSTs, loopback only (``kubectl exec`` into the pod: RBAC decides who): ``recheck``
(:mod:`.commands`) and ``return`` of a quarantined K8s node (:mod:`.returning`).

Every replica serves it; only the leader has a pass to show, the others answer 503 with the
holder they last saw on the Lease so ``slonkd status`` can say where to look. ``/healthz``
says the process is alive; ``/readyz`` that it is campaigning and reaching the Kubernetes
API (a standby is ready too: it is doing its job; a replica the API does not answer is not).
Otherwise read-only: operators change slonkd through Kubernetes objects (hold label, the
state ConfigMap) so that RBAC, not this API, decides who may.

With :class:`ApiTls` it serves HTTPS only (the chart's ``tls.enabled``): the port then
answers no plain HTTP, so agents fetching MQTT credentials verify the coordinator with the
CA and a token never crosses the network in the clear. The certificate and key are loaded
again when their files change (a rotated Secret), without a restart and without closing the
port (:class:`~slonkd.runtime.kit.tls_files.CertReloader`, a task of the server's).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from slonkd.core.status import explain, node_row
from slonkd.runtime.coordinating.commands import recheck_endpoint
from slonkd.runtime.coordinating.returning import return_endpoint
from slonkd.runtime.kit.metrics import Metrics
from slonkd.runtime.kit.tls_files import RELOAD_PERIOD_S, CertReloader

MAX_BODY_BYTES = 64 * 1024
"""Largest request body any handler may read (none needs more)."""
MAX_HEADER_FIELD_BYTES = 8190
"""Longest header line; a bound token is 1-2 KB (longer ones get 400 from aiohttp)."""
MAX_HEADERS = 64
"""Most header lines in one request."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiTls:
    """The API's certificate (chain) and private key, PEM files: the API serves HTTPS."""

    cert_file: str
    key_file: str
    reload_period_s: float = RELOAD_PERIOD_S
    """How often the files are looked at for a new certificate."""

    def reloader(self) -> CertReloader:
        """The server's TLS context, kept current; ValueError naming a file that will not load."""
        return CertReloader(self.cert_file, self.key_file, period_s=self.reload_period_s)

    def context(self) -> ssl.SSLContext:
        """A server TLS context (TLS 1.2 at least); ValueError naming a file that will not load."""
        return self.reloader().context


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


class CoordinatorAPI:
    """Serves the leader's last pass; ``leader`` is set while this replica leads."""

    def __init__(
        self,
        *,
        identity: str,
        holder: Callable[[], str],
        ready: Callable[[], tuple[bool, str]] = lambda: (True, "ready"),
    ) -> None:
        self.identity = identity
        self._holder = holder
        self._ready = ready
        self.leader: Any = None
        """The leading :class:`~slonkd.runtime.coordinating.reconciling.Coordinator`, or None."""
        self._runner: web.AppRunner | None = None
        self._reloading: asyncio.Task[None] | None = None
        self.tls: CertReloader | None = None
        """The HTTPS certificate's reloader while serving with TLS."""
        self.port = 0
        self.credentials: Any = None
        """A :class:`~slonkd.runtime.coordinating.credentials.CredentialIssuer` (any replica), or
        None."""
        self.metrics: Metrics | None = None
        """This process's metrics, served on ``/metrics``."""

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/nodes", self._nodes)
        app.router.add_get("/v1/explain/{node}", self._explain)
        if self.credentials is not None:
            app.router.add_post("/v1/credentials", self.credentials.handle)
        app.router.add_post("/v1/nodes/{node}/recheck", self._recheck)
        app.router.add_post("/v1/nodes/{node}/return", self._return)
        return app

    async def start(self, host: str, port: int, *, tls: ApiTls | None = None) -> None:
        """Listen on ``host:port`` (port 0: any free port, see :attr:`port`); HTTPS with ``tls``."""
        self._runner = web.AppRunner(
            self.app(),
            access_log=None,
            max_line_size=MAX_HEADER_FIELD_BYTES,
            max_field_size=MAX_HEADER_FIELD_BYTES,
            max_headers=MAX_HEADERS,
        )
        await self._runner.setup()
        self.tls = tls.reloader() if tls is not None else None
        site = web.TCPSite(
            self._runner, host, port, ssl_context=self.tls.context if self.tls else None
        )
        await site.start()
        if self.tls is not None:
            self._reloading = asyncio.create_task(self.tls.run(), name="api-tls-reload")
        addresses = self._runner.addresses
        self.port = int(addresses[0][1]) if addresses else port

    async def stop(self) -> None:
        """Stop listening (and log the credentials' pending refusal summary)."""
        if self._reloading is not None:
            self._reloading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloading
        if self._runner is not None:
            await self._runner.cleanup()
        if self.credentials is not None:
            self.credentials.close()

    # -- handlers ----------------------------------------------------------------------------

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def ready(self) -> tuple[bool, str]:
        """``/readyz``'s answer (the metrics port's too)."""
        return self._ready()

    async def _readyz(self, _request: web.Request) -> web.Response:
        ok, why = self.ready()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    async def _metrics(self, _request: web.Request) -> web.Response:
        if self.metrics is None:
            return web.Response(status=404, text="no metrics in this process")
        return web.Response(body=self.metrics.render(), content_type="text/plain")

    def _not_leading(self) -> web.Response | None:
        leader = self.leader
        if leader is None or leader.snapshot is None:
            return _json(
                {
                    "leading": False,
                    "identity": self.identity,
                    "holder": self._holder(),
                    "error": "this replica is not the leader (or has not finished a pass yet)",
                },
                status=503,
            )
        return None

    async def _status(self, _request: web.Request) -> web.Response:
        if (refusal := self._not_leading()) is not None:
            return refusal
        snap = self.leader.snapshot
        refused = snap.admission.refused
        body: dict[str, Any] = {
            "leading": True,
            "identity": self.identity,
            "fencing_token": snap.fencing_token,
            "at": snap.at,
            "dry_run": self.leader.s.dry_run,
            "state": snap.state.as_json(),
            "budget": [
                {"pool": p.pool, "size": p.size, "out": p.out, "limit": p.limit}
                for p in snap.admission.pools
            ],
            "suspected": sorted(str(c) for c in self.leader.suspected),
            "nodes": [node_row(v, p, refused) for v, p in zip(snap.views, snap.plans, strict=True)],
        }
        body.update(self.leader.status_sections())
        return _json(body)

    async def _nodes(self, _request: web.Request) -> web.Response:
        if (refusal := self._not_leading()) is not None:
            return refusal
        snap = self.leader.snapshot
        rows = [
            node_row(v, p, snap.admission.refused)
            for v, p in zip(snap.views, snap.plans, strict=True)
        ]
        return _json(rows)

    async def _explain(self, request: web.Request) -> web.Response:
        if (refusal := self._not_leading()) is not None:
            return refusal
        snap = self.leader.snapshot
        name = request.match_info["node"]
        for view, plan in zip(snap.views, snap.plans, strict=True):
            if str(view.node) == name:
                return _json(explain(view, plan, snap.admission.refused))
        return _json({"error": f"no worker node {name[:100]!r} in the last pass"}, status=404)

    async def _recheck(self, request: web.Request) -> web.Response:
        return await recheck_endpoint(request, self.leader, self._not_leading)

    async def _return(self, request: web.Request) -> web.Response:
        return await return_endpoint(request, self.leader, self._not_leading)
