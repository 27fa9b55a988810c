"""``POST /v1/credentials``: an agent trades its pod-bound token for its own MQTT client.

A StatefulSet cannot mount one Secret per pod, so each agent presents the projected,
pod-bound ServiceAccount token of its pod (``Authorization: Bearer ...``). The handler asks
the apiserver who that is (TokenReview, with the configured audience), and issues
credentials only when the token is bound to a pod in the coordinator's namespace that
matches the worker selector with the same uid (the pod name is the SLURM node name). Then
:meth:`~slonkd.adapters.bus.dynsec.DynSecAdmin.ensure_agent` (re)creates that agent's client
and role with the password of that pod uid, unless dynsec already holds exactly that (the
check and the change over one admin connection): requests
for one pod uid are idempotent (a retry or a replayed token gets the same password and
kicks nobody off the broker), a restarted pod (new uid) gets a new one and the old one
stops working. The per-pod limit counts only the requests that change dynsec. The leader's
:class:`~slonkd.runtime.coordinating.credential_reaper.CredentialReaper` deletes the client when
its pod
is gone. Everything else is refused (401: no or invalid
token; 403: a valid token that is not a worker pod's; 429: too many requests from one pod)
with a logged reason. Neither the token nor the password is ever logged.

Before any TokenReview, a request must pass two token buckets (429 with Retry-After
otherwise, see :mod:`slonkd.core.rate_limit`): one per source address, taken by every
request (each agent has its own pod IP, so one noisy client spends only its own allowance),
and one for the whole replica, taken by those about to be reviewed (it caps what the
apiserver is asked). The endpoint takes no body: one with more than ``max_body_bytes`` (or
of unknown length) is refused with 413 unread. Refusals are logged through
:class:`~slonkd.runtime.coordinating.refusal_log.RefusalLog`: the first in full, the rest of a
burst as
one summary line per interval.

Any replica may serve it (standbys too): TokenReview and dynsec are idempotent and hold no
leader state. It must not decide anything about SLURM or Kubernetes.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import secrets
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web

from slonkd.adapters.bus.client import CredentialSource
from slonkd.adapters.bus.dynsec import DynSecAdmin
from slonkd.adapters.bus.dynsec_roles import coordinator_role
from slonkd.adapters.kube.informer import Informer
from slonkd.adapters.kube.tokenreview import find_worker_pod, review_token
from slonkd.adapters.kube.transport import KubeTransport
from slonkd.core.config_tree import setting
from slonkd.core.errors import ParseError, SlonkdError, TransientError
from slonkd.core.kube_objects import Pod
from slonkd.core.messages import check_name
from slonkd.core.rate_limit import SourceLimiter
from slonkd.runtime.coordinating.credential_reaper import CredentialReaper
from slonkd.runtime.coordinating.refusal_log import RefusalLog

log = structlog.get_logger("slonkd.credentials")

MAX_TOKEN_BYTES = 8000
"""Longer bearer values are refused before any TokenReview (real tokens are 1-2 KB; aiohttp
itself refuses header lines over 8190 bytes with 400)."""


def _env(name: str) -> Mapping[str, Any]:
    """The metadata of a limit set by ``SLONKD_CREDENTIALS_<name>`` (read by slonkd.cli.bus_env)."""
    return setting(env=f"SLONKD_CREDENTIALS_{name}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CredentialSettings:
    """How the coordinator reaches dynsec and whom it trusts (the limits: ``x-env`` each)."""

    admin_host: str
    admin_port: int
    admin_user: str
    admin_password: str
    admin_ca_file: str | None = None
    """The broker's CA bundle: the dynsec admin connects with TLS (None: plain MQTT)."""
    audiences: Sequence[str] = ()
    """TokenReview audiences (the agent's projected token's ``audience``); () : the apiserver's."""
    service_account: str = ""
    """If set, only this ServiceAccount's tokens (``name`` or ``system:serviceaccount:ns:name``)."""
    per_pod_limit: int = field(default=5, metadata=_env("PER_POD_LIMIT"))
    """Most (re)creations of one pod's client within ``per_pod_window_s`` ..."""
    per_pod_window_s: float = field(default=60.0, metadata=_env("PER_POD_WINDOW_S"))
    max_concurrent_reviews: int = field(default=8, metadata=_env("MAX_CONCURRENT_REVIEWS"))
    """Concurrent TokenReviews (what passed the limits waits here, not on the apiserver)."""
    source_rate: float = field(default=0.5, metadata=_env("SOURCE_RATE"))
    """Requests per second one source address may make after its burst ..."""
    source_burst: int = field(default=10, metadata=_env("SOURCE_BURST"))
    """... and at once (an agent asks once per start or rotation)."""
    global_rate: float = field(default=20.0, metadata=_env("GLOBAL_RATE"))
    """TokenReviews per second this replica asks for after its burst ..."""
    global_burst: int = field(default=50, metadata=_env("GLOBAL_BURST"))
    """... and at once (a rollout restarting many workers)."""
    max_sources: int = 10_000
    """Source addresses whose buckets are remembered (least recently used forgotten)."""
    max_body_bytes: int = field(default=1024, metadata=_env("MAX_BODY_BYTES"))
    """Largest request body accepted (the agent sends none)."""
    refusal_log_interval_s: float = 60.0
    """After the first refusal is logged, one summary line per this many seconds."""

    def __post_init__(self) -> None:
        if self.per_pod_limit < 1 or self.per_pod_window_s <= 0:
            raise ValueError("per_pod_limit must be >= 1 and per_pod_window_s positive")
        if self.max_concurrent_reviews < 1:
            raise ValueError("max_concurrent_reviews must be >= 1")
        for key in ("source_rate", "global_rate", "refusal_log_interval_s"):
            value = getattr(self, key)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{key} must be a positive number, not {value!r}")
        for key in ("source_burst", "global_burst", "max_sources"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ValueError(f"{key} must be an integer >= 1, not {getattr(self, key)!r}")
        if not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 0:
            raise ValueError(f"max_body_bytes must be an integer >= 0, not {self.max_body_bytes!r}")


class _Refused(Exception):
    """A request refused with ``status`` for ``reason`` (logged, and said to the client)."""

    def __init__(self, status: int, reason: str, **context: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.context = context
        self.retry_after = 0.0
        """For a 429: seconds until the client may try again."""


def _too_many(reason: str, retry_after: float, **context: str) -> _Refused:
    refused = _Refused(429, reason, **context)
    refused.retry_after = retry_after
    return refused


class CredentialIssuer:
    """The ``/v1/credentials`` handler of one replica."""

    def __init__(
        self,
        settings: CredentialSettings,
        *,
        transport: KubeTransport,
        admin: DynSecAdmin,
        namespace: str,
        cluster: str,
        pod_selector: str,
    ) -> None:
        self.s = settings
        self._transport = transport
        self.admin = admin
        self._namespace = namespace
        self._cluster = cluster
        self._selector = pod_selector
        self._reviews = asyncio.Semaphore(settings.max_concurrent_reviews)
        self._recent: dict[str, deque[float]] = {}
        self._uids: dict[str, str] = {}
        self._limiter = SourceLimiter(
            source_rate=settings.source_rate,
            source_burst=settings.source_burst,
            global_rate=settings.global_rate,
            global_burst=settings.global_burst,
            max_sources=settings.max_sources,
        )
        self._refusals = RefusalLog(
            log, "bus.credentials_refused", interval_s=settings.refusal_log_interval_s
        )
        self.issued = 0
        self.refused = 0
        self.reviews = 0
        """TokenReviews asked for."""

    async def handle(self, request: web.Request) -> web.Response:
        """Check the bearer token and answer ``{username, password, cluster}`` or refuse."""
        remote = request.remote or ""
        try:
            self._admit(self._limiter.take_source(remote, time.monotonic()), "source")
            self._check_body(request)
            token = _bearer(request.headers.get("Authorization", ""))
            self._admit(self._limiter.take_global(time.monotonic()), "replica")
            node, uid = await self._identify(token)
            # only changes count against the per-pod limit: a retry must not lock the agent out
            creds, changed = await self.admin.ensure_agent(
                self._cluster, node, uid, before_change=lambda: self._limit(node)
            )
        except _Refused as exc:
            self.refused += 1
            self._refusals.refused(
                status=exc.status, reason=exc.reason, remote=remote, **exc.context
            )
            headers = {}
            if exc.status == 429:
                headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
            response = web.json_response({"error": exc.reason}, status=exc.status, headers=headers)
            if exc.status == 413:
                response.force_close()  # do not read the body it came with
            return response
        except TransientError as exc:
            log.warning("bus.credentials_unavailable", error=str(exc)[:200], remote=remote)
            return web.json_response({"error": "try again later"}, status=503)
        except SlonkdError as exc:
            log.error("bus.credentials_failed", error=str(exc)[:200], remote=remote)
            return web.json_response({"error": "cannot issue credentials"}, status=500)
        rotated = self._uids.get(node, "") not in ("", uid)
        self._uids[node] = uid
        self.issued += 1
        log.info(
            "bus.credentials_issued",
            node=node,
            pod=node,
            pod_uid=uid,
            username=creds.username,
            new_pod=rotated,
            changed=changed,
            cause="agent-bootstrap",
            remote=remote,
        )
        return web.json_response(
            {
                "username": creds.username,
                "password": creds.password,
                "clientId": creds.client_id,  # the only id the broker accepts for it
                "cluster": self._cluster,
            },
            headers={"Cache-Control": "no-store"},
        )

    def close(self) -> None:
        """Log the pending refusal summary (on shutdown)."""
        self._refusals.close()

    @staticmethod
    def _admit(wait_s: float, scope: str) -> None:
        if wait_s > 0:
            raise _too_many(f"too many requests (this {scope})", wait_s)

    def _check_body(self, request: web.Request) -> None:
        """413 for a body over the cap or of unknown length (chunked), before reading it."""
        if not request.body_exists:
            return
        length = request.content_length
        if length is None or length > self.s.max_body_bytes:
            raise _Refused(413, "request body too large (this endpoint takes none)")

    async def _identify(self, token: str) -> tuple[str, str]:
        """The worker pod (name, uid) the token is bound to; _Refused otherwise."""
        self.reviews += 1
        async with self._reviews:
            who = await review_token(self._transport, token, audiences=self.s.audiences)
        if not who.authenticated:
            raise _Refused(401, "token not authenticated", detail=who.error[:160])
        if who.pod_name is None:
            raise _Refused(403, "token is not bound to a pod", user=who.username[:120])
        pod = str(who.pod_name)
        ctx = {"pod": pod[:80], "namespace": who.namespace[:80]}
        if who.namespace != self._namespace:
            raise _Refused(403, "pod is outside the coordinator's namespace", **ctx)
        wanted = self.s.service_account
        if wanted and wanted not in (who.service_account, who.username):
            raise _Refused(403, "token of another ServiceAccount", **ctx)
        try:
            check_name(pod, "node")
        except ParseError:
            raise _Refused(403, "pod name is not a valid node name", **ctx) from None
        found = await find_worker_pod(
            self._transport, self._namespace, pod, selector=self._selector
        )
        if found is None:
            raise _Refused(403, "not a worker pod (selector does not match)", **ctx)
        if not who.pod_uid or found.uid != who.pod_uid:
            raise _Refused(403, "token is bound to an older pod of that name", **ctx)
        return pod, found.uid

    def _limit(self, node: str) -> None:
        """At most ``per_pod_limit`` issues per pod per window (a looping agent, a replay)."""
        now = time.monotonic()
        horizon = now - self.s.per_pod_window_s
        for name in [n for n, q in self._recent.items() if not q or q[-1] < horizon]:
            del self._recent[name]  # bounded by the pods seen within one window
        recent = self._recent.setdefault(node, deque())
        while recent and recent[0] < horizon:
            recent.popleft()
        if len(recent) >= self.s.per_pod_limit:
            raise _too_many(
                "too many credential requests for this pod", self.s.per_pod_window_s, pod=node
            )
        recent.append(now)


def dynsec_admin(settings: CredentialSettings) -> DynSecAdmin:
    """The broker's dynsec admin client these settings name (TLS with ``admin_ca_file``)."""
    return DynSecAdmin(
        host=settings.admin_host,
        port=settings.admin_port,
        username=settings.admin_user,
        password=settings.admin_password,
        ca_file=settings.admin_ca_file,
    )


def credential_issuer(
    settings: CredentialSettings,
    transport: KubeTransport,
    namespace: str,
    cluster: str,
    pod_selector: str,
) -> CredentialIssuer:
    """The issuer ``run_coordinator`` hangs on its API (every replica serves it)."""
    admin = dynsec_admin(settings)
    return CredentialIssuer(
        settings,
        transport=transport,
        admin=admin,
        namespace=namespace,
        cluster=cluster,
        pod_selector=pod_selector,
    )


def credential_reaper(
    settings: CredentialSettings,
    transport: KubeTransport,
    namespace: str,
    pod_selector: str,
    pods: Informer[Pod],
    identity: str,
) -> CredentialReaper:
    """The leader's reaper of gone pods' clients (never touching ``identity``'s own)."""
    admin = dynsec_admin(settings)
    return CredentialReaper(
        admin,
        transport=transport,
        namespace=namespace,
        pod_selector=pod_selector,
        pods=pods,
        own_client=coordinator_username(identity),
    )


def _bearer(header: str) -> str:
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _Refused(401, "missing bearer token")
    if len(token) > MAX_TOKEN_BYTES or not token.isascii() or not token.isprintable():
        raise _Refused(401, "malformed bearer token")
    return token


def coordinator_bus_credentials(
    settings: CredentialSettings, *, cluster: str, identity: str, client_id: str
) -> CredentialSource:
    """The coordinator's own MQTT client, (re)created in dynsec with the admin's rights.

    The admin may not publish on ``slonk/#``, so each replica makes itself a client with the
    coordinator's role (every node's commands, its status) and a fresh password whenever
    the bus needs one: at start and after the broker refuses the last.
    """
    admin = dynsec_admin(settings)
    name = coordinator_username(identity)
    pod = identity if re.fullmatch(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?", identity) else ""

    async def provision() -> tuple[str, str]:
        password = secrets.token_urlsafe(24)
        await admin.ensure_client(
            name, password, coordinator_role(cluster, name), client_id=client_id, pod=pod
        )
        return name, password

    return provision


def coordinator_username(identity: str) -> str:
    """The dynsec username of the coordinator replica ``identity`` (its pod name)."""
    name = f"coordinator-{identity}"
    if len(name) > 63 or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        name = f"coordinator-{hashlib.sha256(identity.encode()).hexdigest()[:20]}"
    return name
