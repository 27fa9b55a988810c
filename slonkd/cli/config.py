"""Settings shared by the roles: their section of the one JSON file, and MQTT from env.

``SLONKD_CONFIG`` names the JSON file of the configuration tree
(:mod:`slonkd.runtime.config_root`): :func:`role_section` takes a role's section from it
and lays it over the values the fields' variables set (:mod:`slonkd.core.config_sources`);
keys a role does not know are refused when its section is built (a typo must not pass
silently). Old flat files and old variables still load, each with a deprecation line
(:func:`deprecations`: a ``config.deprecated`` warning, logged once the settings are good).
MQTT comes from ``SLONKD_MQTT_HOST``, ``SLONKD_MQTT_PORT``, ``SLONKD_MQTT_USER`` and
``SLONKD_MQTT_PASSWORD`` (or ``SLONKD_MQTT_PASSWORD_FILE``); ``SLONKD_MQTT_TLS_CA_FILE`` (a
PEM CA bundle) makes every MQTT client of the process connect with TLS and verify the
broker against it. Every problem is a ValueError with a one-line reason.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import structlog

from slonkd.adapters.bus.client import BusSettings, tls_context
from slonkd.cli.refusal import settings_or_refusal
from slonkd.core.config_sources import env_tree, lift_old_keys, merge
from slonkd.core.log_events import CONFIG_DEPRECATED

T = TypeVar("T")


def role_section(
    env: Mapping[str, str],
    role: str,
    cls: type[Any],
    notes: list[str],
    renamed: dict[str, str] | None = None,
    *,
    had_flat_file: bool = True,
) -> dict[str, Any]:
    """The JSON object of ``role``'s section: the file's over the environment's values.

    The file (``$SLONKD_CONFIG``; none when unset) holds the whole tree or only ``role``'s
    section, or, deprecated, an old flat per-role file (the section's keys at the top, with
    the old flat aliases of nested keys). The values the fields' variables set lie under it.
    Each deprecated file, key or variable read adds one line naming the new key to ``notes``;
    ``renamed`` gets the old flat keys read (for :func:`~slonkd.core.config_sources.say_old_names`).
    A role that never had a file of its own (``had_flat_file=False``: prestop) leaves a flat
    file alone: it is another role's (the agent's, in the same pod).
    """
    doc, path = _read(env)
    flat = bool(doc) and not set(doc) & set(ROOT_KEYS)
    if flat and not had_flat_file:
        doc, flat = {}, False
    if flat:
        notes.append(
            f"SLONKD_CONFIG {path}: a flat {role} file is deprecated: "
            f'put its keys under "{role}" (slonkd config schema)'
        )
        raw: Any = doc
    else:
        unknown = sorted(set(doc) - set(ROOT_KEYS))
        if unknown:
            sections = ", ".join(ROOT_KEYS)
            raise ValueError(f"SLONKD_CONFIG {path}: unknown keys {unknown} (sections: {sections})")
        raw = {} if doc.get(role) is None else doc[role]
        if not isinstance(raw, Mapping):
            raise ValueError(f"SLONKD_CONFIG {path}: {role} must be a JSON object")
    lifted, old = lift_old_keys(
        cls, raw, path=role, old_prefix="" if flat else f"{role}.", renamed=renamed
    )
    from_env, old_env = env_tree(cls, env, path=role)
    notes += old + old_env
    return merge(from_env, lifted)


ROOT_KEYS = ("agent", "coordinator", "prestop")
"""The tree's sections (:data:`slonkd.runtime.config_root.ROLES`, kept here to read a file
without importing every role's runtime; tests/unit/test_config_root.py holds them equal)."""


def _read(env: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    """The JSON object in ``$SLONKD_CONFIG`` and its path (empty when unset)."""
    path = env.get("SLONKD_CONFIG")
    if not path:
        return {}, ""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read SLONKD_CONFIG {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"SLONKD_CONFIG {path}: not a JSON object")
    return doc, path


def deprecations(command: str, notes: list[str], *, structured: bool = True) -> None:
    """Each deprecation line once: a ``config.deprecated`` warning in the role's JSON log.

    ``structured=False`` (``slonkd config check``, which has no log): plain lines on stderr,
    ``slonkd COMMAND: deprecated: ...``.
    """
    for note in dict.fromkeys(notes):
        if structured:
            structlog.get_logger("slonkd.config").warning(
                CONFIG_DEPRECATED, command=command, detail=note
            )
        else:
            print(f"slonkd {command}: deprecated: {note}", file=sys.stderr)


def loaded(command: str, load: Callable[[list[str]], T]) -> T | None:
    """``load(notes)``, or None once its ValueError is said (:func:`settings_or_refusal`).

    The deprecation notes it gathered are logged (:func:`deprecations`).
    """
    notes: list[str] = []
    settings = settings_or_refusal(command, lambda: load(notes))
    if settings is not None:
        deprecations(command, notes)
    return settings


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
