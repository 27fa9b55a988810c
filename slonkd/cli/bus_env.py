"""MQTT credential settings from the environment: the agent's bootstrap, the coordinator's issuer.

Agent: ``SLONKD_MQTT_BOOTSTRAP_URL`` (the coordinator's ``/v1/credentials``) and
``SLONKD_TOKEN_FILE`` (the projected pod-bound token; default
``/var/run/secrets/slonk.dev/bus/token``) replace ``SLONKD_MQTT_USER``/``PASSWORD``, which
keep working when no bootstrap URL is set. ``SLONKD_MQTT_BOOTSTRAP_CA`` names a CA bundle
for an https URL.

Coordinator: ``SLONKD_DYNSEC_ADMIN_USER`` and ``SLONKD_DYNSEC_ADMIN_PASSWORD`` (or
``SLONKD_DYNSEC_ADMIN_PASSWORD_FILE``) turn on ``POST /v1/credentials``; the broker is
``SLONKD_MQTT_HOST``/``PORT``; ``SLONKD_TOKEN_AUDIENCE`` (comma-separated) is the audience
TokenReview checks; ``SLONKD_WORKER_SERVICE_ACCOUNT`` restricts the accepted tokens to that
ServiceAccount. Every problem is a ValueError with a one-line reason.
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
    user = env.get("SLONKD_DYNSEC_ADMIN_USER")
    if not user:
        return None
    password = env.get("SLONKD_DYNSEC_ADMIN_PASSWORD", "")
    if env.get("SLONKD_DYNSEC_ADMIN_PASSWORD_FILE"):
        try:
            password = Path(env["SLONKD_DYNSEC_ADMIN_PASSWORD_FILE"]).read_text().strip()
        except OSError as exc:
            raise ValueError(
                f"cannot read SLONKD_DYNSEC_ADMIN_PASSWORD_FILE: {exc.strerror}"
            ) from None
    host = env.get("SLONKD_MQTT_HOST")
    if not host or not password:
        raise ValueError("SLONKD_DYNSEC_ADMIN_USER needs SLONKD_MQTT_HOST and its password")
    raw = env.get("SLONKD_TOKEN_AUDIENCE", "").split(",")
    audiences = tuple(a for a in (r.strip() for r in raw) if a)
    from slonkd.runtime.credentials import CredentialSettings

    return CredentialSettings(
        admin_host=host,
        admin_port=_port(env),
        admin_user=user,
        admin_password=password,
        audiences=audiences,
        service_account=env.get("SLONKD_WORKER_SERVICE_ACCOUNT", ""),
    )
