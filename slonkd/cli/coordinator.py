"""``slonkd coordinator``: the leader that reconciles every worker node (2 replicas, one leads).

Its settings are the ``coordinator`` section of the configuration tree (the JSON file in
``SLONKD_CONFIG``, :mod:`slonkd.cli.config`): the fields of
:class:`~slonkd.runtime.coordinating.settings.CoordinatorSettings`, typed, defaulted and
described there (``slonkd config schema coordinator`` prints them all). The pod gives
``POD_NAMESPACE`` (where the worker pods and the Lease live), ``POD_NAME`` (this candidate's
identity, else the host name), ``KUBECONFIG`` (else in-cluster) and ``SLURM_CONF``; the file's
value wins over a variable's. ``topology`` has its own format (see
:mod:`slonkd.runtime.coordinating.topology_settings`; its ConfigMap defaults to
``SLONKD_TOPOLOGY_CONFIGMAP``). The policy is nested (``policy.failure_grace_s``,
``policy.revalidation.required``); the old flat keys (``failure_grace_s``, ``revalidate*``)
and ``SLONKD_CLUSTER`` still load, each with one deprecation line on stderr.

Wiring from the environment, never the file: MQTT (the agents' health) from
``SLONKD_MQTT_*`` as for the agent; ``SLONKD_MQTT_ADMIN_*`` turn on the agents' credential
bootstrap (see :mod:`slonkd.cli.bus_env`); ``SLONKD_API_TLS_CERT_FILE`` and
``SLONKD_API_TLS_KEY_FILE`` (PEM, both or neither) make the API serve HTTPS only;
``SLONKD_NUDGE_MQTT_USER`` and ``SLONKD_NUDGE_MQTT_PASSWORD`` (both or neither) name the
broker client the leader makes in dynsec for slurmctld's ``trigger_program``. Bad settings
exit 2 with a one-line reason.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.cli.bus_env import coordinator_bus_settings, credential_settings
from slonkd.cli.config import loaded, role_section
from slonkd.cli.refusal import EXIT_BAD_SETTINGS
from slonkd.core.config_sources import say_old_names
from slonkd.core.config_tree import build

if TYPE_CHECKING:  # the runtime pulls in aiohttp, aiomqtt, prometheus_client: import it only to run
    from slonkd.runtime.coordinating import CoordinatorSettings
    from slonkd.runtime.coordinating.api import ApiTls


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``coordinator``."""
    parser = sub.add_parser(
        "coordinator", help="run the coordinator (leader-elected)", description=__doc__
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and log every plan (and the audit log) but write nothing",
    )


def load_settings(env: Mapping[str, str], notes: list[str] | None = None) -> CoordinatorSettings:
    """Settings from ``env`` and the file's ``coordinator`` section; ValueError, one line.

    Each key is typed by the settings class's field it sets (every number >= 0), defaults
    are the classes' own; a value the class refuses names its key too. Deprecated files,
    keys and variables read add their line to ``notes``.
    """
    from slonkd.runtime.coordinating import CoordinatorSettings
    from slonkd.runtime.coordinating.settings import NudgeClient
    from slonkd.runtime.coordinating.topology_settings import topology_settings

    renamed: dict[str, str] = {}
    raw = role_section(
        env, "coordinator", CoordinatorSettings, [] if notes is None else notes, renamed
    )
    if not raw.get("namespace"):
        raise ValueError("POD_NAMESPACE is not set (the namespace of the workers and the Lease)")
    raw.setdefault("identity", socket.gethostname())
    given: dict[str, Any] = {}
    if "topology" in raw:  # its own flat format (spec keys next to the publishing ones)
        topology = raw.pop("topology")
        cm = env.get("SLONKD_TOPOLOGY_CONFIGMAP") or None
        given["topology"] = (
            None if topology is None else topology_settings(topology, default_configmap=cm)
        )
    identity = raw["identity"] if isinstance(raw["identity"], str) else ""
    slurm_env = {"SLURM_CONF": env["SLURM_CONF"]} if "SLURM_CONF" in env else {}
    nudge_user = env.get("SLONKD_NUDGE_MQTT_USER", "").strip()
    nudge_password = env.get("SLONKD_NUDGE_MQTT_PASSWORD", "")
    if bool(nudge_user) != bool(nudge_password):
        raise ValueError("SLONKD_NUDGE_MQTT_USER and SLONKD_NUDGE_MQTT_PASSWORD go together")
    given.update(
        nudge_client=(
            NudgeClient(username=nudge_user, password=nudge_password) if nudge_user else None
        ),
        api_tls=_api_tls(env),
        slurm=SlurmSettings(env=slurm_env),
        bus=coordinator_bus_settings(env, f"slonkd-coordinator-{identity}"),
        credentials=credential_settings(env),
    )
    try:
        return build(CoordinatorSettings, raw, non_negative=True, given=given)
    except ValueError as exc:
        raise ValueError(f"bad coordinator settings: {say_old_names(str(exc), renamed)}") from None


def _api_tls(env: Mapping[str, str]) -> ApiTls | None:
    """The API's certificate and key from the environment, loaded once to check them."""
    from slonkd.runtime.coordinating.api import ApiTls

    cert = env.get("SLONKD_API_TLS_CERT_FILE", "").strip()
    key = env.get("SLONKD_API_TLS_KEY_FILE", "").strip()
    if not cert and not key:
        return None
    if not cert or not key:
        raise ValueError("SLONKD_API_TLS_CERT_FILE and SLONKD_API_TLS_KEY_FILE go together")
    tls = ApiTls(cert_file=cert, key_file=key)
    try:
        tls.context()
    except ValueError as exc:
        raise ValueError(f"SLONKD_API_TLS_CERT_FILE/SLONKD_API_TLS_KEY_FILE: {exc}") from None
    return tls


def main(args: argparse.Namespace) -> int:
    """Run ``slonkd coordinator``."""
    settings = loaded("coordinator", lambda notes: load_settings(os.environ, notes))
    if settings is None:
        return EXIT_BAD_SETTINGS
    if getattr(args, "dry_run", False):
        from dataclasses import replace

        settings = replace(settings, dry_run=True)
    from slonkd.runtime.coordinating import run_coordinator

    return asyncio.run(run_coordinator(settings))
