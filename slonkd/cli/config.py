"""Settings shared by the long-running commands: the optional JSON file and MQTT from env.

``SLONKD_CONFIG`` names a JSON object whose keys override the environment's values; keys a
command does not know are refused (a typo must not pass silently). MQTT comes from
``SLONKD_MQTT_HOST``, ``SLONKD_MQTT_PORT``, ``SLONKD_MQTT_USER`` and ``SLONKD_MQTT_PASSWORD``
(or ``SLONKD_MQTT_PASSWORD_FILE``); ``SLONKD_MQTT_TLS_CA_FILE`` (a PEM CA bundle) makes
every MQTT client of the process connect with TLS and verify the broker against it. Every
problem is a ValueError with a one-line reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Set
from pathlib import Path
from typing import Any

from slonkd.adapters.bus.client import BusSettings, tls_context


def config_file(env: Mapping[str, str], known: Set[str]) -> dict[str, Any]:
    """The JSON object in ``$SLONKD_CONFIG`` (empty when unset), with only ``known`` keys."""
    path = env.get("SLONKD_CONFIG")
    if not path:
        return {}
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read SLONKD_CONFIG {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"SLONKD_CONFIG {path}: not a JSON object")
    if set(doc) - known:
        raise ValueError(f"SLONKD_CONFIG {path}: unknown keys {sorted(set(doc) - known)}")
    return doc


def bus_settings(env: Mapping[str, str], client_id: str) -> BusSettings | None:
    """MQTT settings from ``SLONKD_MQTT_*`` (None when no host is set)."""
    host = env.get("SLONKD_MQTT_HOST")
    if not host:
        return None
    password = secret(env, "SLONKD_MQTT_PASSWORD")
    port = mqtt_port(env)
    user = env.get("SLONKD_MQTT_USER", "")
    if not user or not password:
        raise ValueError("SLONKD_MQTT_HOST is set but SLONKD_MQTT_USER or its password is not")
    return BusSettings(
        host=host,
        port=port,
        username=user,
        password=password,
        client_id=client_id,
        ca_file=ca_file(env, "SLONKD_MQTT_TLS_CA_FILE"),
    )


def secret(env: Mapping[str, str], key: str) -> str:
    """``env[key]``, or the content of the file ``env[key + "_FILE"]`` names, which wins.

    The bus's password here, the dynsec admin's in :mod:`slonkd.cli.bus_env`.
    """
    path = env.get(f"{key}_FILE")
    if not path:
        return env.get(key, "")
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {key}_FILE: {exc.strerror}") from None


def mqtt_port(env: Mapping[str, str]) -> int:
    """The broker's port, ``SLONKD_MQTT_PORT`` (1883 when unset)."""
    try:
        port = int(env.get("SLONKD_MQTT_PORT", "1883"))
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ValueError("SLONKD_MQTT_PORT must be a port number (1-65535)")
    return port


def ca_file(env: Mapping[str, str], key: str) -> str | None:
    """The CA bundle named by ``env[key]`` (None when unset), loaded once to check it."""
    path = env.get(key, "").strip()
    if not path:
        return None
    try:
        tls_context(path)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None
    return path


def env_values(env: Mapping[str, str], table: Mapping[str, str]) -> dict[str, str]:
    """The file keys ``table`` maps to an environment variable set (non-empty) in ``env``.

    A role's ``ENV`` table is the one place saying which variable sets which key; the
    file's value wins over the variable's, the settings class's default over neither.
    """
    return {key: env[var] for key, var in table.items() if env.get(var)}
