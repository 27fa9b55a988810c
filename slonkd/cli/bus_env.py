"""MQTT credential settings from the environment: the agent's bootstrap, the coordinator's issuer.

Agent: ``SLONKD_MQTT_BOOTSTRAP_URL`` (the coordinator's ``/v1/credentials``; without it and
without ``SLONKD_MQTT_USER``, ``$SLONKD_COORDINATOR_URL/v1/credentials``, as the chart sets)
and ``SLONKD_TOKEN_FILE`` (the projected pod-bound token; default
``/var/run/secrets/slonk.dev/token/token``). Static ``SLONKD_MQTT_USER``/``PASSWORD`` keep
working and win when set. ``SLONKD_MQTT_BOOTSTRAP_CA`` names a CA bundle for an https URL
(checked at load). ``SLONKD_MQTT_TLS_CA_FILE`` (see :mod:`slonkd.cli.config`) makes the bus
and the coordinator's dynsec admin connect with TLS, verified against that CA.

Coordinator: ``SLONKD_MQTT_ADMIN_USERNAME`` and ``SLONKD_MQTT_ADMIN_PASSWORD`` (or
``SLONKD_MQTT_ADMIN_PASSWORD_FILE``), the broker's dynsec admin, turn on
``POST /v1/credentials``; the broker is ``SLONKD_MQTT_HOST``/``PORT``;
``SLONKD_TOKEN_AUDIENCE`` (comma-separated) is the audience TokenReview checks;
``SLONKD_AGENT_SERVICE_ACCOUNT`` (``name`` or ``system:serviceaccount:ns:name``) restricts
the accepted tokens to that ServiceAccount. Without ``SLONKD_MQTT_USER`` the coordinator
makes its own bus client through dynsec. The endpoint's limits are
``SLONKD_CREDENTIALS_SOURCE_RATE``, ``_SOURCE_BURST``, ``_GLOBAL_RATE``, ``_GLOBAL_BURST``,
``_PER_POD_LIMIT``, ``_PER_POD_WINDOW_S``, ``_MAX_CONCURRENT_REVIEWS`` and
``_MAX_BODY_BYTES``, each declared on its field of
:class:`~slonkd.runtime.coordinating.credentials.CredentialSettings` and read typed by it
(:func:`slonkd.core.config_sources.env_tree`). The coordinator's
MQTT session expires :data:`COORDINATOR_SESSION_EXPIRY_S` after it goes (it subscribes to
every node's status; a new leader reads the retained ones anyway). Every problem is a
ValueError with a one-line reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from slonkd.adapters.bus.bootstrap import DEFAULT_TOKEN_FILE, BootstrapSettings
from slonkd.adapters.bus.client import BusSettings
from slonkd.cli.config import bus_settings, ca_file, mqtt_port, secret
from slonkd.core.config_sources import env_tree
from slonkd.core.config_tree import of

if TYPE_CHECKING:  # the runtime pulls in kubernetes_asyncio: import it only to run
    from slonkd.runtime.coordinating.credentials import CredentialSettings

_CA = "SLONKD_MQTT_TLS_CA_FILE"
COORDINATOR_SESSION_EXPIRY_S = 60
"""Seconds the broker keeps a coordinator's session after it goes (a reconnect, no more)."""


def agent_bus_settings(
    env: Mapping[str, str], client_id: str
) -> tuple[BusSettings | None, BootstrapSettings | None]:
    """The agent's broker settings and, with a bootstrap URL, how to fetch its credentials."""
    url = env.get("SLONKD_MQTT_BOOTSTRAP_URL")
    if not url and not env.get("SLONKD_MQTT_USER") and env.get("SLONKD_COORDINATOR_URL"):
        url = env["SLONKD_COORDINATOR_URL"].rstrip("/") + "/v1/credentials"
    if not url:
        return bus_settings(env, client_id), None
    host = env.get("SLONKD_MQTT_HOST")
    if not host:
        raise ValueError("SLONKD_MQTT_BOOTSTRAP_URL is set but SLONKD_MQTT_HOST is not")
    try:
        bootstrap = BootstrapSettings(
            url=url,
            token_file=env.get("SLONKD_TOKEN_FILE") or DEFAULT_TOKEN_FILE,
            ca_file=ca_file(env, "SLONKD_MQTT_BOOTSTRAP_CA"),
        )
    except ValueError as exc:
        if "SLONKD_MQTT_BOOTSTRAP_CA" in str(exc):
            raise
        raise ValueError(f"bad SLONKD_MQTT_BOOTSTRAP_URL: {exc}") from None
    bus = BusSettings(
        host=host, port=mqtt_port(env), username="", password="", client_id=client_id,
        ca_file=ca_file(env, _CA),
    )  # fmt: skip
    return bus, bootstrap


def credential_settings(env: Mapping[str, str]) -> CredentialSettings | None:
    """The coordinator's credential issuer settings (None when no dynsec admin is set)."""
    user = env.get("SLONKD_MQTT_ADMIN_USERNAME")
    if not user:
        return None
    password = secret(env, "SLONKD_MQTT_ADMIN_PASSWORD")
    host = env.get("SLONKD_MQTT_HOST")
    if not host or not password:
        raise ValueError("SLONKD_MQTT_ADMIN_USERNAME needs SLONKD_MQTT_HOST and its password")
    raw = env.get("SLONKD_TOKEN_AUDIENCE", "").split(",")
    audiences = tuple(a for a in (r.strip() for r in raw) if a)
    from slonkd.runtime.coordinating.credentials import CredentialSettings

    limits, _ = env_tree(CredentialSettings, env, path="credentials")
    admin_ca = ca_file(env, _CA)
    try:
        settings = CredentialSettings(
            admin_host=host,
            admin_port=mqtt_port(env),
            admin_user=user,
            admin_password=password,
            admin_ca_file=admin_ca,
            audiences=audiences,
            service_account=env.get("SLONKD_AGENT_SERVICE_ACCOUNT", ""),
        )
        return dataclasses.replace(settings, **limits)
    except ValueError as exc:  # a limit out of range: name its variable
        declared = ((f.name, of(f).env) for f in dataclasses.fields(CredentialSettings))
        names = [var for name, var in declared if var and name in str(exc)]
        raise ValueError(f"{' '.join(names) or 'SLONKD_CREDENTIALS_*'}: {exc}") from None


def coordinator_bus_settings(env: Mapping[str, str], client_id: str) -> BusSettings | None:
    """The coordinator's broker settings; no user but a dynsec admin: it makes its own client."""
    if env.get("SLONKD_MQTT_USER") or not env.get("SLONKD_MQTT_ADMIN_USERNAME"):
        static = bus_settings(env, client_id)
        if static is None:
            return None
        return dataclasses.replace(static, session_expiry_s=COORDINATOR_SESSION_EXPIRY_S)
    host = env.get("SLONKD_MQTT_HOST")
    if not host:
        return None
    return BusSettings(
        host=host, port=mqtt_port(env), username="", password="", client_id=client_id,
        session_expiry_s=COORDINATOR_SESSION_EXPIRY_S, ca_file=ca_file(env, _CA),
    )  # fmt: skip
