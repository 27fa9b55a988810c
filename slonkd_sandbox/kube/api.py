"""A small synchronous REST client for the harness's kube-apiserver (stdlib only).

The harness must not depend on the product's Kubernetes adapter (that is what the contract
tests check), so it speaks plain HTTPS + JSON: create fake nodes in bulk, mint tokens, run
the kubelet stand-in's watch. It verifies the server against the harness's own CA.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ApiError(RuntimeError):
    """A non-2xx answer from the apiserver, with its status code and Status body."""

    def __init__(self, status: int, body: Any, what: str) -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)[:500]
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.status = status
        self.body = body


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeApi:
    """Connection facts for one apiserver: address, CA and bearer token."""

    host: str
    port: int
    ca_file: Path
    token: str

    def _conn(self, timeout_s: float) -> http.client.HTTPSConnection:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        return http.client.HTTPSConnection(self.host, self.port, context=ctx, timeout=timeout_s)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout_s: float = 30.0,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> Any:
        """One call; returns the decoded JSON body or raises :class:`ApiError`."""
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        conn = self._conn(timeout_s)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            decoded = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            decoded = raw.decode(errors="replace")
        if resp.status not in ok:
            raise ApiError(resp.status, decoded, f"{method} {path}")
        return decoded

    def watch(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        timeout_s: float = 3600.0,
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events (``{"type": ..., "object": ...}``) until the server ends it."""
        query = {"watch": "true", "allowWatchBookmarks": "true", **(params or {})}
        conn = self._conn(timeout_s)
        try:
            conn.request(
                "GET",
                f"{path}?{urllib.parse.urlencode(query)}",
                headers={"Authorization": f"Bearer {self.token}"},
            )
            resp = conn.getresponse()
            if resp.status != 200:
                raise ApiError(resp.status, resp.read().decode(errors="replace"), f"watch {path}")
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()
