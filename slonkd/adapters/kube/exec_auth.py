"""Credentials from a kubeconfig's ``exec`` plugin: run it, cache what it says, ask again.

Operators run ``slonkd pause`` / ``unpause`` / ``budget reset`` and ``slonkd coordinator``
outside the cluster with their own kubeconfig, and managed clusters hand those out with exec
credential plugins (EKS ``aws eks get-token``, GKE ``gke-gcloud-auth-plugin``, OIDC
``kubelogin``). :class:`ExecAuth` runs the plugin through kubernetes_asyncio's
``ExecProvider`` (argv, ``env`` added to slonkd's environment, ``KUBERNETES_EXEC_INFO``, the
apiVersion check of the answer), imported when the first :class:`ExecAuth` is built, so a
process that never loads such a kubeconfig (every in-cluster agent) never pays its ~60 MB.

The plugin runs before the first request and again when its credential is about to expire
(``expirationTimestamp`` less a margin) or when the apiserver rejected it (401, see
:class:`slonkd.adapters.kube.transport.KubeTransport`); concurrent requests share one run.
It answers with a bearer token, a client certificate and key (used for the TLS handshake of
the requests that follow), or both. It runs under a deadline (:mod:`exec_deadline` kills it
when the deadline passes).

Errors: a plugin that cannot be started, or answers with something that is not a usable
ExecCredential, is a :class:`KubeConfigError` (terminal: running it again cannot help); one
that exits non-zero or runs out of time is an :class:`ExecPluginUnavailable` (transient: the
identity provider it asks may be down for a moment). Neither the token nor the key is ever
logged or put in a message. Not supported: ``provideClusterInfo`` (the cluster is not passed
to the plugin) and ``interactiveMode`` (the plugin inherits the terminal when there is one).
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from slonkd.adapters.kube import exec_deadline
from slonkd.adapters.kube.kubeconfig import ApiEndpoint, ExecPlugin, KubeConfigError, ssl_context
from slonkd.core.errors import TransientError

log = structlog.get_logger(__name__)

PLUGIN_TIMEOUT_S = 120.0
"""How long a plugin may take (an interactive OIDC login needs a person; most take < 2 s)."""
REFRESH_MARGIN_S = 60.0
"""Run the plugin again this long before its credential expires (at most a quarter of its life)."""
BACKSTOP_S = 10.0
"""Wait this much past the deadline for the plugin's exit before giving up on it."""
DEADLINE_SCRIPT = Path(exec_deadline.__file__)
_EXIT = re.compile(r"exec: process returned (-?\d+)")


class ExecPluginUnavailable(TransientError):
    """The exec plugin exited non-zero or ran out of time; it may work when asked again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecCredential:
    """What one run of the plugin gave, and until when to use it."""

    token: str | None = field(default=None, repr=False)
    tls: ssl.SSLContext | None = field(default=None, repr=False)
    """A TLS context with the plugin's client certificate, or None to use the endpoint's."""
    expires_at: float | None = None
    """Wall-clock time the credential expires (None: until the apiserver rejects it)."""
    refresh_at: float | None = None
    """Wall-clock time to run the plugin again (None: only after a rejection)."""

    def fresh(self, now: float) -> bool:
        """Whether to keep using it at ``now``."""
        return self.refresh_at is None or now < self.refresh_at


def _expiry(value: Any, where: str) -> float:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise KubeConfigError(f"{where}: expirationTimestamp {str(value)[:40]!r} is not RFC 3339")
    return moment.timestamp()


def credential_from_status(
    status: Any,
    endpoint: ApiEndpoint,
    *,
    now: float,
    margin_s: float = REFRESH_MARGIN_S,
) -> ExecCredential:
    """The credential of an ExecCredential ``status``, or a KubeConfigError saying what is wrong."""
    where = f"{endpoint.source}: exec plugin answer"
    if not isinstance(status, dict):
        raise KubeConfigError(f"{where}: status is not a mapping")
    token = status.get("token")
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if token is not None and (not isinstance(token, str) or not token):
        raise KubeConfigError(f"{where}: token is not a non-empty string")
    if bool(cert) != bool(key):
        raise KubeConfigError(f"{where}: clientCertificateData needs clientKeyData, and reverse")
    if not token and not cert:
        raise KubeConfigError(f"{where}: neither a token nor a client certificate")
    tls = None
    if cert and endpoint.server.startswith("https://"):
        if not isinstance(cert, str) or not isinstance(key, str):
            raise KubeConfigError(f"{where}: client certificate and key are not PEM text")
        with_cert = replace(endpoint, cert_file=None, key_file=None, cert_data=cert, key_data=key)
        tls = ssl_context(replace(with_cert, source=f"{endpoint.source}: exec plugin"))
    expires_at = refresh_at = None
    if status.get("expirationTimestamp"):
        expires_at = _expiry(status["expirationTimestamp"], where)
        refresh_at = expires_at - min(margin_s, max(expires_at - now, 0.0) / 4)
    return ExecCredential(token=token, tls=tls, expires_at=expires_at, refresh_at=refresh_at)


def _provider(plugin: ExecPlugin, timeout_s: float) -> tuple[Any, type[Exception]]:
    """kubernetes_asyncio's ExecProvider for ``plugin``, and the exception class it raises.

    The plugin's argv is put behind the deadline script.
    """
    try:
        from kubernetes_asyncio.config.config_exception import ConfigException
        from kubernetes_asyncio.config.exec_provider import ExecProvider
        from kubernetes_asyncio.config.kube_config import ConfigNode
    except ImportError as exc:
        raise KubeConfigError(
            f"exec credential plugins need the kubernetes_asyncio package ({exc})"
        ) from None
    section: dict[str, Any] = {"command": plugin.command, "apiVersion": plugin.api_version}
    if plugin.args:
        section["args"] = list(plugin.args)
    if plugin.env:
        section["env"] = [{"name": n, "value": v} for n, v in plugin.env]
    provider = ExecProvider(ConfigNode("exec", section))
    deadline = [sys.executable, "-I", "-S", str(DEADLINE_SCRIPT), f"{timeout_s:g}", "--"]
    provider.args = [*deadline, *provider.args]
    return provider, ConfigException


class ExecAuth:
    """The current credential of an endpoint's exec plugin, run again as it expires."""

    def __init__(
        self,
        endpoint: ApiEndpoint,
        *,
        timeout_s: float = PLUGIN_TIMEOUT_S,
        margin_s: float = REFRESH_MARGIN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if endpoint.exec_plugin is None:
            raise ValueError(f"{endpoint.source}: no exec plugin")
        self.endpoint = endpoint
        self.plugin = endpoint.exec_plugin
        self._timeout_s = timeout_s
        self._margin_s = margin_s
        self._clock = clock
        self._provider, self._config_exception = _provider(self.plugin, timeout_s)
        self._current: ExecCredential | None = None
        self._cause = "first request"
        self._lock = asyncio.Lock()
        self.runs = 0
        """How many times the plugin ran (for tests and metrics)."""

    async def credential(self) -> ExecCredential:
        """The credential to send now: the cached one while fresh, else the plugin's next."""
        current = self._current
        if current is not None and current.fresh(self._clock()):
            return current
        async with self._lock:  # one run for every request that waits
            current = self._current
            if current is not None and current.fresh(self._clock()):
                return current
            if current is not None and self._cause != "rejected":
                self._cause = "expiring"
            self._current = await self._run(self._cause)
            self._cause = "expiring"
            return self._current

    def rejected(self, credential: ExecCredential) -> None:
        """The apiserver answered 401 to ``credential``: the next request runs the plugin."""
        if self._current is credential:
            self._current = None
            self._cause = "rejected"

    async def _run(self, cause: str) -> ExecCredential:
        name = os.path.basename(self.plugin.command)
        where = f"{self.endpoint.source}: exec plugin {name}"
        started = time.monotonic()
        self.runs += 1
        try:
            async with asyncio.timeout(self._timeout_s + BACKSTOP_S):
                status = await self._provider.run()
        except TimeoutError:
            raise ExecPluginUnavailable(
                f"{where}: no answer in {self._timeout_s + BACKSTOP_S:g}s"
            ) from None
        except OSError as exc:
            raise KubeConfigError(f"{where}: cannot run: {exc.strerror}") from None
        except self._config_exception as exc:
            raise self._failure(where, exc) from None
        now = self._clock()
        credential = credential_from_status(status, self.endpoint, now=now, margin_s=self._margin_s)
        expires_in = None if credential.expires_at is None else round(credential.expires_at - now)
        log.info(
            "kube.exec_credential",
            plugin=name,
            cause=cause,
            token=credential.token is not None,
            client_cert=credential.tls is not None,
            expires_in_s=expires_in,
            duration_s=round(time.monotonic() - started, 3),
        )
        if expires_in is not None and expires_in <= 0:
            log.warning("kube.exec_credential_expired", plugin=name, expires_in_s=expires_in)
        return credential

    def _failure(self, where: str, exc: Exception) -> Exception:
        """A slonkd error for the plugin's failure: terminal if running it again cannot help."""
        message = str(exc).strip()[:500]
        exited = _EXIT.match(message)
        if exited is None:  # the answer: not JSON, a key missing, another apiVersion
            return KubeConfigError(f"{where}: unusable answer: {message}")
        code = int(exited.group(1))
        if code in (exec_deadline.CANNOT_RUN, 126):
            return KubeConfigError(f"{where}: {message}")
        if code == exec_deadline.TIMED_OUT:
            return ExecPluginUnavailable(f"{where}: no answer in {self._timeout_s:g}s: {message}")
        return ExecPluginUnavailable(f"{where}: {message}")
