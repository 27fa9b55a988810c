"""The agent's side of the credential bootstrap: pod-bound token in, MQTT client out.

The agent reads its projected, pod-bound ServiceAccount token (fresh on every attempt: the
kubelet rotates it) and POSTs it to the coordinator's ``/v1/credentials``. The answer is
its own MQTT username and password (see :mod:`slonkd.runtime.coordinating.credentials`). Connection
errors, timeouts, 429 and 5xx are transient and retried with jittered backoff (tenacity,
capped in attempts and total time); 401/403 or a malformed answer are terminal. The CA
bundle is read again for every attempt, as the token is (a rotated bundle counts at once). The token
and the password are never logged; aiohttp objects stop here.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import structlog
import tenacity

from slonkd.core.errors import TerminalError, TransientError

log = structlog.get_logger("slonkd.bus.bootstrap")

DEFAULT_TOKEN_FILE = "/var/run/secrets/slonk.dev/token/token"  # noqa: S105 - a path, not a secret
"""Where the chart mounts the projected token (audience: the coordinator)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapSettings:
    """Where to ask, with which token, and how patiently."""

    url: str
    """The coordinator's credentials endpoint, e.g. ``http://slonkd-coordinator:8081/v1/credentials``."""
    token_file: str = DEFAULT_TOKEN_FILE
    timeout_s: float = 5.0
    attempts: int = 6
    max_total_s: float = 60.0
    wait_min_s: float = 0.5
    wait_max_s: float = 10.0
    ca_file: str | None = None
    """A CA bundle for an https URL (None: the system's)."""

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("the bootstrap URL must be http:// or https://")
        if self.attempts < 1 or self.timeout_s <= 0 or self.max_total_s <= 0:
            raise ValueError("attempts, timeout_s and max_total_s must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class IssuedCredentials:
    """What the coordinator issued: this agent's MQTT username and password."""

    username: str
    password: str
    cluster: str
    client_id: str = ""
    """The client id the broker binds to this username ("" from an older coordinator)."""

    def __repr__(self) -> str:  # never print the password
        return f"IssuedCredentials(username={self.username!r}, cluster={self.cluster!r})"


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise TransientError(f"cannot read the token file {path}: {exc.strerror}") from exc
    if not token:
        raise TransientError(f"the token file {path} is empty")
    return token


def _ca_context(path: str | None) -> ssl.SSLContext | bool:
    """A context trusting the bundle at ``path``, read now (no bundle: aiohttp's default)."""
    if not path:
        return True
    try:
        return ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise TransientError(f"cannot load the CA bundle {path}: {exc}") from None


async def _fetch_once(s: BootstrapSettings, session: aiohttp.ClientSession) -> IssuedCredentials:
    token = await asyncio.to_thread(_read_token, s.token_file)
    verify = await asyncio.to_thread(_ca_context, s.ca_file)
    try:
        async with session.post(
            s.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=aiohttp.ClientTimeout(total=s.timeout_s),
            ssl=verify,
        ) as response:
            raw = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TransientError(f"credentials request failed: {type(exc).__name__}: {exc}") from exc
    if status == 429 or status >= 500:
        raise TransientError(f"coordinator answered {status}: {raw[:200]!r}")
    if status != 200:
        raise TerminalError(f"coordinator refused the credentials ({status}): {raw[:200]!r}")
    try:
        body = json.loads(raw)
        creds = IssuedCredentials(
            username=str(body["username"]),
            password=str(body["password"]),
            cluster=str(body.get("cluster", "")),
            client_id=str(body.get("clientId", "")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise TerminalError("malformed credentials answer") from exc
    if not creds.username or not creds.password:
        raise TerminalError("malformed credentials answer (empty username or password)")
    return creds


async def fetch_credentials(s: BootstrapSettings) -> IssuedCredentials:
    """Ask the coordinator for this agent's MQTT credentials (transient errors retried)."""
    retrying = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(TransientError),
        stop=tenacity.stop_after_attempt(s.attempts) | tenacity.stop_after_delay(s.max_total_s),
        wait=tenacity.wait_random_exponential(multiplier=s.wait_min_s, max=s.wait_max_s),
        before_sleep=lambda rs: log.warning(
            "bus.bootstrap_retrying",
            attempt=rs.attempt_number,
            error=str(rs.outcome.exception() if rs.outcome else "")[:200],
        ),
        reraise=True,
    )
    async with aiohttp.ClientSession() as session:
        creds: IssuedCredentials = await retrying(_fetch_once, s, session)
    log.info("bus.bootstrap_done", username=creds.username, cluster=creds.cluster)
    return creds
