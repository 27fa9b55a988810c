"""How the operator commands reach the coordinator's API: its URL and, over HTTPS, whom to trust.

The URL is ``--url``, else ``SLONKD_COORDINATOR_URL``, else http://127.0.0.1:8081. For an
https URL, ``SLONKD_COORDINATOR_CA`` names the CA bundle that verifies the coordinator (else
the system's trust store), and ``SLONKD_COORDINATOR_TLS_NAME`` the name its certificate must
carry when the URL's host is another: ``https://127.0.0.1:8081`` inside the coordinator's
pod or through ``kubectl port-forward``, while the certificate names the Service. The
certificate is always verified; there is no fallback to plain HTTP.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp

from slonkd.cli.config import ca_file

DEFAULT_URL = "http://127.0.0.1:8081"
TIMEOUT_S = 15.0


def base_url(url: str | None, env: Mapping[str, str] = os.environ) -> str:
    """The API's base URL (no trailing slash): ``url``, else the environment's, else the default."""
    return (url or env.get("SLONKD_COORDINATOR_URL") or DEFAULT_URL).rstrip("/")


async def call(
    method: str,
    url: str,
    *,
    timeout_s: float = TIMEOUT_S,
    env: Mapping[str, str] = os.environ,
    json_body: Any = None,
) -> tuple[int, Any]:
    """``method url`` (``json_body`` its body, if any); (status, JSON body).

    The environment's CA and TLS name verify an https URL.

    ValueError for an unusable ``SLONKD_COORDINATOR_CA`` (naming it); aiohttp's errors for
    an unreachable or unverifiable coordinator.
    """
    ca = ca_file(env, "SLONKD_COORDINATOR_CA")
    context: ssl.SSLContext | bool = True
    if ca is not None:
        context = ssl.create_default_context(cafile=ca)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
    name = env.get("SLONKD_COORDINATOR_TLS_NAME", "").strip() or None
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(method, url, ssl=context, server_hostname=name, json=json_body) as response,
    ):
        return response.status, await response.json(content_type=None)
