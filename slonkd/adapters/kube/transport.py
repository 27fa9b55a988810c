"""The adapter's one way to talk to the apiserver: kubernetes_asyncio's client, raw JSON out.

kubernetes_asyncio supplies configuration (kubeconfig, in-cluster ServiceAccount with token
refresh), TLS, authentication and the aiohttp connection pool; every call goes through
``ApiClient.call_api(..., _preload_content=False)`` and the body is decoded with ``json``
here. The library's model objects are never built: turning 5,000 nodes into ``V1Node``
objects takes 11.9 s where raw JSON takes about 1.8 s (see shared/REAL_SERVICES.md).

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
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from slonkd.adapters.kube.errors import Call, error_for_exception, error_for_status

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
FIELD_MANAGER = "slonkd"


class KubeTransport:
    """Raw-JSON requests and watch streams over one kubernetes_asyncio ``ApiClient``."""

    def __init__(
        self,
        api_client: Any,
        *,
        field_manager: str = FIELD_MANAGER,
        timeout_s: float = 10.0,
    ) -> None:
        self._api = api_client
        self.field_manager = field_manager
        self.timeout_s = timeout_s

    @classmethod
    async def from_kubeconfig(cls, path: Path | str, **kwargs: Any) -> KubeTransport:
        """A transport for the current context of a kubeconfig file."""
        configuration = k8s_client.Configuration()
        await k8s_config.load_kube_config(config_file=str(path), client_configuration=configuration)
        return cls(k8s_client.ApiClient(configuration), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeTransport:
        """A transport for the pod's own ServiceAccount (token re-read as it rotates)."""
        configuration = k8s_client.Configuration()
        load: Any = k8s_config.load_incluster_config  # untyped in the library
        load(client_configuration=configuration)
        return cls(k8s_client.ApiClient(configuration), **kwargs)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._api.close()

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
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list(params.items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise error_for_exception(exc, call) from exc
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
        decoded: dict[str, Any] = json.loads(raw) if raw else {}
        return decoded

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
                            yield json.loads(line)
            except (aiohttp.ClientError, TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                raise error_for_exception(exc, call) from exc
