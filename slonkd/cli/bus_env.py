"""MQTT credential settings from the environment: the agent's bootstrap, the coordinator's issuer.

Agent: ``SLONKD_MQTT_BOOTSTRAP_URL`` (the coordinator's ``/v1/credentials``; without it and
without ``SLONKD_MQTT_USER``, ``$SLONKD_COORDINATOR_URL/v1/credentials``, as the chart sets)
and ``SLONKD_TOKEN_FILE`` (the projected pod-bound token; default
``/var/run/secrets/slonk.dev/token/token``). Static ``SLONKD_MQTT_USER``/``PASSWORD`` keep
working and win when set. ``SLONKD_MQTT_BOOTSTRAP_CA`` names a CA bundle for an https URL.

Coordinator: ``SLONKD_MQTT_ADMIN_USERNAME`` and ``SLONKD_MQTT_ADMIN_PASSWORD`` (or
``SLONKD_MQTT_ADMIN_PASSWORD_FILE``), the broker's dynsec admin, turn on
``POST /v1/credentials``; the broker is ``SLONKD_MQTT_HOST``/``PORT``;
``SLONKD_TOKEN_AUDIENCE`` (comma-separated) is the audience TokenReview checks;
``SLONKD_AGENT_SERVICE_ACCOUNT`` (``name`` or ``system:serviceaccount:ns:name``) restricts
the accepted tokens to that ServiceAccount. Without ``SLONKD_MQTT_USER`` the coordinator
makes its own bus client through dynsec. Every problem is a ValueError with a one-line
reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from slonkd.adapters.bus.bootstrap import DEFAULT_TOKEN_FILE, BootstrapSettings
from slonkd.adapters.bus.client import BusSettings
from slonkd.cli.config import bus_settings

if TYPE_CHECKING:  # the runtime pulls in kubernetes_asyncio: import it only to run
    from slonkd.runtime.credentials import CredentialSettings


def _port(env: Mapping[str, str]) -> int:
    try:
        port = int(env.get("SLONKD_MQTT_PORT", "1883"))
    except ValueError:
        raise ValueError("SLONKD_MQTT_PORT must be a port number") from None
    if not 0 < port < 65536:
        raise ValueError("SLONKD_MQTT_PORT must be a port number")
    return port


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
            ca_file=env.get("SLONKD_MQTT_BOOTSTRAP_CA") or None,
        )
    except ValueError as exc:
        raise ValueError(f"bad SLONKD_MQTT_BOOTSTRAP_URL: {exc}") from None
    bus = BusSettings(host=host, port=_port(env), username="", password="", client_id=client_id)
    return bus, bootstrap


def credential_settings(env: Mapping[str, str]) -> CredentialSettings | None:
    """The coordinator's credential issuer settings (None when no dynsec admin is set)."""
    user = env.get("SLONKD_MQTT_ADMIN_USERNAME")
    if not user:
        return None
    password = env.get("SLONKD_MQTT_ADMIN_PASSWORD", "")
    if env.get("SLONKD_MQTT_ADMIN_PASSWORD_FILE"):
        try:
            password = Path(env["SLONKD_MQTT_ADMIN_PASSWORD_FILE"]).read_text().strip()
        except OSError as exc:
            raise ValueError(
                f"cannot read SLONKD_MQTT_ADMIN_PASSWORD_FILE: {exc.strerror}"
            ) from None
    host = env.get("SLONKD_MQTT_HOST")
    if not host or not password:
        raise ValueError("SLONKD_MQTT_ADMIN_USERNAME needs SLONKD_MQTT_HOST and its password")
    raw = env.get("SLONKD_TOKEN_AUDIENCE", "").split(",")
    audiences = tuple(a for a in (r.strip() for r in raw) if a)
    from slonkd.runtime.credentials import CredentialSettings

    return CredentialSettings(
        admin_host=host,
        admin_port=_port(env),
        admin_user=user,
        admin_password=password,
        audiences=audiences,
        service_account=env.get("SLONKD_AGENT_SERVICE_ACCOUNT", ""),
    )


def coordinator_bus_settings(env: Mapping[str, str], client_id: str) -> BusSettings | None:
    """The coordinator's broker settings; no user but a dynsec admin: it makes its own client."""
    if env.get("SLONKD_MQTT_USER") or not env.get("SLONKD_MQTT_ADMIN_USERNAME"):
        return bus_settings(env, client_id)
    host = env.get("SLONKD_MQTT_HOST")
    if not host:
        return None
    return BusSettings(host=host, port=_port(env), username="", password="", client_id=client_id)
