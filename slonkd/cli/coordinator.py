"""``slonkd coordinator``: the leader that reconciles every worker node (2 replicas, one leads).

Settings from the environment: ``POD_NAMESPACE`` (where the worker pods and the Lease live),
``POD_NAME`` (this candidate's identity), ``KUBECONFIG`` (else in-cluster), ``SLURM_CONF``,
and optionally a JSON file in ``SLONKD_CONFIG`` with any of the keys in ``_KEYS`` below
(the fields of :class:`~slonkd.runtime.coordinating.settings.CoordinatorSettings` and of the policy:
timings, budget, state, API, audit, dry run, remediation, topology, fleet metrics);
MQTT (the agents' health) from ``SLONKD_MQTT_*`` as for the agent; ``SLONKD_MQTT_ADMIN_*``
turn on the agents' credential bootstrap (see :mod:`slonkd.cli.bus_env`);
``SLONKD_API_TLS_CERT_FILE`` and ``SLONKD_API_TLS_KEY_FILE`` (PEM, both or neither) make the
API serve HTTPS only. Bad settings exit 2
with a one-line reason. ``topology`` (an object, see :mod:`slonkd.runtime.topology_sync`) turns on
topology.conf from node labels; its ConfigMap defaults to ``SLONKD_TOPOLOGY_CONFIGMAP``.
``rollout`` (an object with ``max_parallel``, ``job_wait_s``, ``poll_s``, ``settle_s``,
``requeue_in_prestop``, or null: off) tunes the worker rollouts of OnDelete StatefulSets (on
by default).
``job_blame`` (an object with ``min_failures``, ``window_failures``, ``max_p_value``,
``infrastructure_exit_codes``, ``poll_s``, ``max_jobs``; off by default) drains nodes that keep
failing multi-node jobs (see :mod:`slonkd.runtime.coordinating.job_outcomes`).
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
import os
import socket
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.cli.bus_env import coordinator_bus_settings, credential_settings
from slonkd.cli.config import config_file
from slonkd.core.plan import Policy
from slonkd.core.revalidation import RevalidationPolicy
from slonkd.core.rollout import RolloutSettings

if TYPE_CHECKING:  # the runtime pulls in aiohttp, aiomqtt, prometheus_client: import it only to run
    from slonkd.runtime.coordinating import CoordinatorSettings
    from slonkd.runtime.coordinator_api import ApiTls

EXIT_BAD_SETTINGS = 2
_NUMBERS = {
    "resync_s",
    "debounce_s",
    "max_batch_delay_s",
    "max_out",
    "lease_duration_s",
    "renew_deadline_s",
    "retry_period_s",
    "failure_grace_s",
    "unready_grace_s",
    "suspect_min_nodes",
    "suspect_fraction",
    "max_out_percent",
    "mass_percent",
    "api_port",
    "poll_s",
    "change_poll_s",
    "state_poll_s",
    "remediation_cooldown_s",
    "revalidate_timeout_s",
    "revalidate_recheck_s",
    "max_reads_per_s",
    "audit_max_bytes",
    "audit_keep",
    "sdiag_s",
    "sdiag_timeout_s",
}
_WHOLE = {"max_out", "suspect_min_nodes", "api_port"}
_STRINGS = {
    "pod_selector",
    "namespace",
    "identity",
    "cluster",
    "lease_name",
    "state_name",
    "budget_block_label",
    "audit_path",
    "api_host",
    "trigger_program",
}
_NAMES = {"namespace", "identity", "cluster", "lease_name", "state_name", "api_host"}
"""Strings that must not be empty."""
_KEYS = _NUMBERS | {
    "pod_selector",
    "namespace",
    "identity",
    "kubeconfig",
    "cluster",
    "lease_name",
    "state_name",
    "budget_block_label",
    "audit_path",
    "api_host",
    "dry_run",
    "topology",
    "remediate",
    "revalidate",
    "revalidate_checks",
    "rollout",
    "fleet_metrics",
    "change_poll",
    "trigger_program",
    "job_blame",
}


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
    """Settings from ``env`` and the optional JSON file; ValueError with a one-line reason."""
    values: dict[str, Any] = {
        "namespace": env.get("POD_NAMESPACE", ""),
        "identity": env.get("POD_NAME") or socket.gethostname(),
        "kubeconfig": env.get("KUBECONFIG") or None,
    }
    values.update(config_file(env, _KEYS))
    if not values["namespace"]:
        raise ValueError("POD_NAMESPACE is not set (the namespace of the workers and the Lease)")
    for key in _NUMBERS & set(values):
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ValueError(f"{key} must be a non-negative number")
        if key in _WHOLE and not isinstance(value, int):
            raise ValueError(f"{key} must be a whole number")
    for key in _STRINGS & set(values):
        if not isinstance(values[key], str) or (key in _NAMES and not values[key]):
            raise ValueError(f"{key} must be a {'non-empty ' if key in _NAMES else ''}string")
    if values.get("kubeconfig") is not None and not isinstance(values["kubeconfig"], str):
        raise ValueError("kubeconfig must be a path")
    for flag in ("dry_run", "remediate", "fleet_metrics", "revalidate", "change_poll"):
        if not isinstance(values.get(flag, False), bool):
            raise ValueError(f"{flag} must be true or false")
    if "change_poll_s" in values and not values["change_poll_s"] > 0:
        raise ValueError("change_poll_s must be positive")
    policy = Policy(
        failure_grace_s=float(values.pop("failure_grace_s", 120)),
        unready_grace_s=float(values.pop("unready_grace_s", 60)),
        remediate=bool(values.pop("remediate", True)),
        remediation_cooldown_s=float(values.pop("remediation_cooldown_s", 900)),
        revalidation=_revalidation(values),
    )
    from slonkd.runtime.coordinating import CoordinatorSettings
    from slonkd.runtime.topology_settings import topology_settings

    if "rollout" in values:  # an object of RolloutSettings' fields, or null: rollouts off
        raw = values["rollout"]
        values["rollout"] = None if raw is None else RolloutSettings.from_mapping(raw)
    if values.get("job_blame") is not None:  # an object of JobBlameSettings' fields; null: off
        from slonkd.runtime.coordinating.settings import JobBlameSettings

        values["job_blame"] = JobBlameSettings.from_mapping(values["job_blame"])
    if values.get("topology") is not None:
        cm = env.get("SLONKD_TOPOLOGY_CONFIGMAP") or None
        values["topology"] = topology_settings(values["topology"], default_configmap=cm)
    slurm_env = {"SLURM_CONF": env["SLURM_CONF"]} if "SLURM_CONF" in env else {}
    values.setdefault("cluster", env.get("SLONKD_CLUSTER", "lab"))
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


def _api_tls(env: Mapping[str, str]) -> ApiTls | None:
    """The API's certificate and key from the environment, loaded once to check them."""
    from slonkd.runtime.coordinator_api import ApiTls

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
    try:
        settings = load_settings(os.environ)
    except ValueError as exc:
        print(f"slonkd coordinator: {exc}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    if getattr(args, "dry_run", False):
        from dataclasses import replace

        settings = replace(settings, dry_run=True)
    from slonkd.runtime.coordinating import run_coordinator

    return asyncio.run(run_coordinator(settings))


def _revalidation(values: dict[str, Any]) -> RevalidationPolicy:
    """Proof of health before return: ``revalidate`` (on), its timeout, recheck period, checks."""
    checks = values.pop("revalidate_checks", [])
    if not isinstance(checks, list) or not all(isinstance(c, str) and c for c in checks):
        raise ValueError("revalidate_checks must be a list of check names")
    return RevalidationPolicy(
        enabled=bool(values.pop("revalidate", True)),
        timeout_s=float(values.pop("revalidate_timeout_s", 900)),
        recheck_s=float(values.pop("revalidate_recheck_s", 30)),
        required=tuple(checks),
    )
