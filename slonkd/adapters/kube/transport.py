"""The adapter's one way to talk to the apiserver: plain aiohttp, raw JSON in and out.

Where the apiserver is and the credentials come from :mod:`slonkd.adapters.kube.kubeconfig`
(a kubeconfig, or the pod's ServiceAccount with its token re-read as it rotates) and, for a
kubeconfig with an exec plugin, :mod:`slonkd.adapters.kube.exec_auth` (a request the
apiserver answers 401 is sent once more with the plugin's next credential); this module
owns one aiohttp session (connection pool, TLS context) and decodes bodies with ``json``.
No client library is used for requests: kubernetes_asyncio's client alone costs about 60 MB
of RSS per agent (only an exec plugin's kubeconfig imports it, for its ExecProvider), and
model objects are never wanted anyway (turning 5,000 nodes into ``V1Node`` objects takes
11.9 s where raw JSON takes about 1.8 s; see docs/architecture.md, "The Kubernetes adapter").

Errors leave this module as slonkd errors (:mod:`slonkd.adapters.kube.errors`). Every write
carries ``fieldManager`` so that managedFields tells slonkd's writes from everyone else's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from slonkd.adapters.kube.errors import (
    Call,
    KubeUnavailable,
    error_for_exception,
    error_for_status,
)
from slonkd.adapters.kube.exec_auth import ExecAuth, ExecCredential
from slonkd.adapters.kube.kubeconfig import (
    TOKEN_REFRESH_S,
    ApiEndpoint,
    TokenSource,
    in_cluster_endpoint,
    load_kubeconfig,
    ssl_context,
)
from slonkd.core.fencing import before_write

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
FIELD_MANAGER = "slonkd"
POOL_SIZE = 100
"""Connections at once to the apiserver (kubernetes_asyncio's default, kept)."""
READ_BUFSIZE = 2**21
"""Watch lines of large objects exceed aiohttp's default buffer (etcd allows 1.5 MiB)."""


class KubeTransport:
    """Raw-JSON requests and watch streams over one aiohttp session to one apiserver.

    Building one reads the TLS material and the token (a :class:`KubeConfigError` when they
    are unusable) but opens no connection; the session is made on the first call.
    """

    def __init__(
        self,
        endpoint: ApiEndpoint,
        *,
        field_manager: str = FIELD_MANAGER,
        timeout_s: float = 10.0,
        pool_size: int = POOL_SIZE,
        token_refresh_s: float = TOKEN_REFRESH_S,
    ) -> None:
        self.endpoint = endpoint
        self.field_manager = field_manager
        self.timeout_s = timeout_s
        self._pool_size = pool_size
        self._ssl = ssl_context(endpoint) if endpoint.server.startswith("https://") else None
        self._token = TokenSource(endpoint.token, endpoint.token_file, refresh_s=token_refresh_s)
        # kubernetes_asyncio is imported here, and only for a kubeconfig with an exec plugin
        self._exec = ExecAuth(endpoint) if endpoint.exec_plugin else None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def from_kubeconfig(
        cls, path: Path | str, *, context: str | None = None, **kwargs: Any
    ) -> KubeTransport:
        """A transport for the current (or the named) context of a kubeconfig file."""
        endpoint = await asyncio.to_thread(load_kubeconfig, path, context)
        return cls(endpoint, **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeTransport:
        """A transport for the pod's own ServiceAccount (token re-read as it rotates)."""
        return cls(in_cluster_endpoint(), **kwargs)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size, ssl=self._ssl or True),
                trust_env=True,  # HTTPS_PROXY / NO_PROXY, as kubectl and client-go honour them
                read_bufsize=READ_BUFSIZE,
            )
        return self._session

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(
        self,
        call: Call,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        client_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON}
        if method != "GET":
            headers["Content-Type"] = content_type
        params = dict(query or {})
        if method in ("POST", "PUT", "PATCH"):
            params.setdefault("fieldManager", self.field_manager)
        data = None if body is None else json.dumps(body).encode()
        for attempt in (1, 2):
            credential: ExecCredential | None = None
            extra: dict[str, Any] = {}
            if self._exec is not None:
                credential = await self._exec.credential()
                authorization = f"Bearer {credential.token}" if credential.token else None
                if credential.tls is not None:
                    extra["ssl"] = credential.tls  # the plugin's client certificate
            try:
                if self._exec is None:
                    authorization = self._token.header()
                if authorization:
                    headers["Authorization"] = authorization
                else:
                    headers.pop("Authorization", None)
                if method != "GET":
                    before_write()  # a leader's term: its lease, right before the request
                response = await self._client().request(
                    method,
                    self.endpoint.server + path,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=client_timeout,
                    server_hostname=self.endpoint.tls_server_name,
                    **extra,
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise error_for_exception(exc, call) from exc
            if response.status == 401 and self._exec and credential and attempt == 1:
                response.release()
                self._exec.rejected(credential)
                continue
            break
        return response

    async def request(
        self,
        call: Call,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """One call; the decoded JSON answer, or a slonkd error."""
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s)
        response = await self._send(
            call,
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            client_timeout=timeout,
        )
        try:
            async with response:
                raw = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise error_for_exception(exc, call) from exc
        if not 200 <= response.status < 300:
            raise error_for_status(response.status, raw, call)
        return _decode(raw, call, what=f"HTTP {response.status} body") if raw else {}

    async def stream(
        self,
        call: Call,
        path: str,
        *,
        query: Mapping[str, str],
        idle_timeout_s: float,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Yield the JSON lines of a watch until the server ends it.

        ``idle_timeout_s`` bounds the silence between bytes (bookmarks keep a healthy watch
        talking); a broken or silent connection raises a transient error.
        """
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timeout_s, sock_read=idle_timeout_s
        )
        response = await self._send(
            call, "GET", path, query=query, body=None, content_type=JSON, client_timeout=timeout
        )
        async with response:
            if response.status != 200:
                try:
                    raw = await response.read()
                except (aiohttp.ClientError, TimeoutError, OSError):
                    raw = b""
                raise error_for_status(response.status, raw, call)
            buffer = b""
            try:
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    if b"\n" not in chunk:
                        continue
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield _decode(line, call, what="watch line")
            except (aiohttp.ClientError, TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                raise error_for_exception(exc, call) from exc


def _decode(raw: bytes, call: Call, *, what: str) -> dict[str, Any]:
    """A JSON object from the apiserver.

    A garbled answer (a proxy's HTML page, a cut-off line) is a :class:`KubeUnavailable`,
    worth retrying, never an uncaught ``json`` error.
    """
    try:
        decoded = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        snippet = raw[:80].decode(errors="replace")
        raise KubeUnavailable(f"{call}: {what} is not JSON: {snippet!r}") from exc
    if not isinstance(decoded, dict):
        raise KubeUnavailable(f"{call}: {what} is not a JSON object: {type(decoded).__name__}")
    return decoded
