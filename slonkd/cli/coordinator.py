"""``slonkd coordinator``: the leader that reconciles every worker node (2 replicas, one leads).

Settings from the environment: ``POD_NAMESPACE`` (where the worker pods and the Lease live),
``POD_NAME`` (this candidate's identity), ``KUBECONFIG`` (else in-cluster), ``SLURM_CONF``,
and optionally a JSON file in ``SLONKD_CONFIG`` whose keys are the fields of
:class:`~slonkd.runtime.coordinating.settings.CoordinatorSettings` (timings, budget, state,
API, audit, dry run, topology, fleet metrics: :func:`file_keys`) and the policy's flat keys
(:data:`POLICY_KEYS`, :data:`REVALIDATION_KEYS`), typed by those fields (``slonkd config schema
coordinator`` prints them all);
MQTT (the agents' health) from ``SLONKD_MQTT_*`` as for the agent; ``SLONKD_MQTT_ADMIN_*``
turn on the agents' credential bootstrap (see :mod:`slonkd.cli.bus_env`);
``SLONKD_API_TLS_CERT_FILE`` and ``SLONKD_API_TLS_KEY_FILE`` (PEM, both or neither) make the
API serve HTTPS only. Bad settings exit 2
with a one-line reason. ``topology`` (an object, see
:mod:`slonkd.runtime.coordinating.topology_sync`) turns on
topology.conf from node labels; its ConfigMap defaults to ``SLONKD_TOPOLOGY_CONFIGMAP``.
``rollout`` (an object with ``max_parallel``, ``job_wait_s``, ``poll_s``, ``settle_s``,
``requeue_in_prestop``, or null: off) tunes the worker rollouts of OnDelete StatefulSets (on
by default).
``job_blame`` (an object with ``min_failures``, ``window_failures``, ``max_p_value``,
``infrastructure_exit_codes``, ``exit_code_min_users``, ``poll_s``, ``max_jobs``; off by
default) drains nodes that keep failing multi-node jobs (see
:mod:`slonkd.runtime.coordinating.job_outcomes`).
``trigger_program`` (a path where slurmctld runs; off by default) makes the leader install
slurmctld's PERM node triggers running it (see :mod:`slonkd.runtime.coordinating.triggering`);
``SLONKD_NUDGE_MQTT_USER`` and ``SLONKD_NUDGE_MQTT_PASSWORD`` (both or neither) name the
broker client the leader then makes in dynsec for that program.
Proof of health before return (:mod:`slonkd.core.revalidation`): ``revalidate`` (true; off
without MQTT), ``revalidate_timeout_s`` (900: then the ladder's next rung),
``revalidate_recheck_s`` (30: a recheck without a passing answer is sent again) and
``revalidate_checks`` (check names that must pass besides every check the agent reports,
e.g. ``["dcgm-diag"]``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.cli.bus_env import coordinator_bus_settings, credential_settings
from slonkd.cli.config import config_file, env_values
from slonkd.cli.refusal import EXIT_BAD_SETTINGS, settings_or_refusal
from slonkd.core.config_tree import value_of
from slonkd.core.plan import Policy
from slonkd.core.revalidation import RevalidationPolicy

if TYPE_CHECKING:  # the runtime pulls in aiohttp, aiomqtt, prometheus_client: import it only to run
    from slonkd.runtime.coordinating import CoordinatorSettings
    from slonkd.runtime.coordinating.api import ApiTls

NOT_IN_FILE = frozenset({"slurm", "policy", "bus", "credentials", "api_tls", "nudge_client"})
"""CoordinatorSettings' fields that come from the environment, never from the config file."""
POLICY_KEYS: dict[str, str] = {
    "failure_grace_s": "failure_grace_s",
    "unready_grace_s": "unready_grace_s",
    "remediate": "remediate",
    "remediation_cooldown_s": "remediation_cooldown_s",
}
"""The file's flat keys of :class:`~slonkd.core.decide.Policy`'s fields."""
REVALIDATION_KEYS: dict[str, str] = {
    "revalidate": "enabled",
    "revalidate_timeout_s": "timeout_s",
    "revalidate_recheck_s": "recheck_s",
    "revalidate_checks": "required",
}
"""The file's flat keys of :class:`~slonkd.core.revalidation.RevalidationPolicy`'s fields."""
ENV = {
    "namespace": "POD_NAMESPACE",
    "identity": "POD_NAME",
    "kubeconfig": "KUBECONFIG",
    "cluster": "SLONKD_CLUSTER",
}
"""The environment variable of each file key it sets (the file's value wins; ``slonkd config
schema coordinator`` shows it as ``x-env``). The MQTT, API TLS and nudge variables set
settings that are never in the file (:mod:`slonkd.cli.bus_env`)."""


def file_keys() -> frozenset[str]:
    """Every key of the coordinator's config file: the settings' fields and the flat aliases."""
    from slonkd.runtime.coordinating import CoordinatorSettings

    fields = {f.name for f in dataclasses.fields(CoordinatorSettings)} - NOT_IN_FILE
    return frozenset(fields | set(POLICY_KEYS) | set(REVALIDATION_KEYS))


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


def load_settings(env: Mapping[str, str]) -> CoordinatorSettings:
    """Settings from ``env`` and the optional JSON file; ValueError with a one-line reason.

    Each key is typed by the settings class's field it sets (every number >= 0), defaults
    are the classes' own; a value the class refuses names its key too.
    """
    from slonkd.runtime.coordinating import CoordinatorSettings
    from slonkd.runtime.coordinating.topology_settings import topology_settings

    doc = config_file(env, file_keys())
    values: dict[str, Any] = {
        f.name: "" if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(CoordinatorSettings)
        if f.name in ENV
    }
    values.update(env_values(env, ENV))
    values["identity"] = values["identity"] or socket.gethostname()
    if not values["namespace"] and "namespace" not in doc:
        raise ValueError("POD_NAMESPACE is not set (the namespace of the workers and the Lease)")
    policy = _policy(doc)
    hints = typing.get_type_hints(CoordinatorSettings)
    for key, raw in doc.items():
        if key == "topology":  # its own flat format (spec keys next to the publishing ones)
            cm = env.get("SLONKD_TOPOLOGY_CONFIGMAP") or None
            values[key] = None if raw is None else topology_settings(raw, default_configmap=cm)
        elif key not in POLICY_KEYS and key not in REVALIDATION_KEYS:
            values[key] = value_of(raw, hints[key], key, non_negative=True)
    slurm_env = {"SLURM_CONF": env["SLURM_CONF"]} if "SLURM_CONF" in env else {}
    bus = coordinator_bus_settings(env, f"slonkd-coordinator-{values['identity']}")
    api_tls = _api_tls(env)
    from slonkd.runtime.coordinating.settings import NudgeClient

    nudge_user = env.get("SLONKD_NUDGE_MQTT_USER", "").strip()
    nudge_password = env.get("SLONKD_NUDGE_MQTT_PASSWORD", "")
    if bool(nudge_user) != bool(nudge_password):
        raise ValueError("SLONKD_NUDGE_MQTT_USER and SLONKD_NUDGE_MQTT_PASSWORD go together")
    try:
        return CoordinatorSettings(
            nudge_client=(
                NudgeClient(username=nudge_user, password=nudge_password) if nudge_user else None
            ),
            api_tls=api_tls,
            policy=policy,
            slurm=SlurmSettings(env=slurm_env),
            bus=bus,
            credentials=credential_settings(env),
            **values,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad coordinator settings: {exc}") from None


def _policy(doc: Mapping[str, Any]) -> Policy:
    """The decision policy from the file's flat keys (:data:`POLICY_KEYS`, revalidation's)."""

    def typed(cls: type[Any], keys: Mapping[str, str]) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        return {
            field: value_of(doc[key], hints[field], key, non_negative=True)
            for key, field in keys.items()
            if key in doc
        }

    return Policy(
        **typed(Policy, POLICY_KEYS),
        revalidation=RevalidationPolicy(**typed(RevalidationPolicy, REVALIDATION_KEYS)),
    )


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
    settings = settings_or_refusal("coordinator", lambda: load_settings(os.environ))
    if settings is None:
        return EXIT_BAD_SETTINGS
    if getattr(args, "dry_run", False):
        from dataclasses import replace

        settings = replace(settings, dry_run=True)
    from slonkd.runtime.coordinating import run_coordinator

    return asyncio.run(run_coordinator(settings))
