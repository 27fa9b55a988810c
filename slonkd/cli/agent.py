"""``slonkd agent``: the sidecar in every slurmd pod.

Settings come from the environment the chart sets (the downward API gives ``POD_NAME``,
``POD_NAMESPACE`` and ``NODE_NAME``), optionally overridden by a JSON file named in
``SLONKD_CONFIG``. Keys: ``slurm_node`` (default: the pod name), ``kubeconfig`` (default:
``$KUBECONFIG``, else the in-cluster ServiceAccount), ``resync_s``, ``ready_file``,
``failure_grace_s``, ``unready_grace_s``, ``cluster``, ``health`` (the checks: every field of
``HealthSettings``, thresholds included), ``hysteresis`` (``fail_n``, ``window_m``,
``clear_k``), ``metrics_port``
(``$SLONKD_METRICS_PORT``, default 9464, 0: off; serves /healthz, /readyz and /metrics) and
``metrics_address`` (``$SLONKD_METRICS_ADDRESS``, default 0.0.0.0). MQTT comes from
``SLONKD_MQTT_HOST``, ``SLONKD_MQTT_PORT``, ``SLONKD_MQTT_USER`` and ``SLONKD_MQTT_PASSWORD``
(or ``SLONKD_MQTT_PASSWORD_FILE``), or from the coordinator with ``SLONKD_MQTT_BOOTSTRAP_URL``
and ``SLONKD_TOKEN_FILE`` (see :mod:`slonkd.cli.bus_env`). Bad settings exit 2 with a
one-line reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import math
import os
import re
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slonkd.adapters.bus.dynsec_roles import agent_client_id
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.cli.bus_env import agent_bus_settings
from slonkd.cli.config import config_file, env_values
from slonkd.cli.refusal import EXIT_BAD_SETTINGS, settings_or_refusal
from slonkd.core.config_tree import value_of
from slonkd.core.plan import Policy

if TYPE_CHECKING:  # the runtime pulls in aiohttp, aiomqtt, prometheus_client: import it only to run
    from slonkd.runtime.agent.sidecar import AgentSettings

_UID = re.compile(r"[0-9A-Fa-f]{8}(-?[0-9A-Fa-f]{4}){3}-?[0-9A-Fa-f]{12}")
"""A pod's ``metadata.uid`` (RFC 4122, as the apiserver makes them)."""
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
NOT_IN_FILE = frozenset({"slurm", "policy", "bus", "bootstrap", "pod_uid"})
"""AgentSettings' fields that come from the environment, never from the config file (a
file cannot know the pod's uid)."""
POLICY_KEYS = ("failure_grace_s", "unready_grace_s")
"""The file's flat keys of :class:`~slonkd.core.decide.Policy`'s fields."""
ENV = {
    "pod_name": "POD_NAME",
    "namespace": "POD_NAMESPACE",
    "kube_node": "NODE_NAME",
    "slurm_node": "SLONKD_SLURM_NODE",
    "kubeconfig": "KUBECONFIG",
    "cluster": "SLONKD_CLUSTER",
    "resync_s": "SLONKD_RESYNC_S",
    "ready_file": "SLONKD_READY_FILE",
    "metrics_port": "SLONKD_METRICS_PORT",
    "metrics_address": "SLONKD_METRICS_ADDRESS",
}
"""The environment variable of each file key it sets (the file's value wins; ``slonkd config
schema agent`` shows it as ``x-env``)."""


def file_keys() -> frozenset[str]:
    """Every key of the agent's config file: AgentSettings' fields and the policy's graces."""
    from slonkd.runtime.agent.sidecar import AgentSettings

    fields = {f.name for f in dataclasses.fields(AgentSettings)} - NOT_IN_FILE
    return frozenset(fields | set(POLICY_KEYS))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``agent``."""
    sub.add_parser("agent", help="run the sidecar agent of one slurmd pod", description=__doc__)


def load_settings(env: Mapping[str, str]) -> AgentSettings:
    """Settings from ``env`` and the optional JSON file; ValueError with a one-line reason."""
    from slonkd.runtime.agent.sidecar import AgentSettings

    values: dict[str, Any] = {
        f.name: "" if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(AgentSettings)
        if f.name in ENV
    }
    values.update(env_values(env, ENV))

    doc = config_file(env, file_keys())
    hints = {**typing.get_type_hints(AgentSettings), **typing.get_type_hints(Policy)}
    values.update(
        {key: value_of(raw, hints[key], key, non_negative=True) for key, raw in doc.items()}
    )
    for key, what in (
        ("pod_name", "POD_NAME"),
        ("namespace", "POD_NAMESPACE"),
        ("kube_node", "NODE_NAME"),
    ):
        if not values[key]:
            raise ValueError(f"{what} is not set (the chart passes it through the downward API)")
        if not _NAME.fullmatch(str(values[key])):
            raise ValueError(f"{what}={str(values[key])[:60]!r} is not a valid Kubernetes name")
    pod_uid = env.get("POD_UID", "")
    if pod_uid and not _UID.fullmatch(pod_uid):
        raise ValueError(f"POD_UID={pod_uid[:60]!r} is not a Kubernetes uid")
    slurm_node = str(values["slurm_node"] or values["pod_name"])
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", slurm_node):
        raise ValueError(f"SLURM node name {slurm_node[:60]!r} is not valid")
    resync = _seconds("resync_s", values["resync_s"], positive=True)
    policy = Policy(
        failure_grace_s=_seconds("failure_grace_s", values.get("failure_grace_s", 120)),
        unready_grace_s=_seconds("unready_grace_s", values.get("unready_grace_s", 60)),
    )
    metrics_port, metrics_address = _metrics_listen(
        values["metrics_port"], values["metrics_address"]
    )
    slurm_env = {"SLURM_CONF": env["SLURM_CONF"]} if "SLURM_CONF" in env else {}
    bus, bootstrap = agent_bus_settings(env, agent_client_id(slurm_node))
    values.update(
        cluster=str(values["cluster"]),
        bus=bus,
        bootstrap=bootstrap,
        pod_name=str(values["pod_name"]),
        pod_uid=pod_uid,
        namespace=str(values["namespace"]),
        kube_node=str(values["kube_node"]),
        slurm_node=slurm_node,
        resync_s=resync,
        policy=policy,
        slurm=SlurmSettings(env=slurm_env),
        metrics_port=metrics_port,
        metrics_address=metrics_address,
    )
    for key in POLICY_KEYS:
        values.pop(key, None)
    try:
        return AgentSettings(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad agent settings: {exc}") from None


def _seconds(key: str, raw: Any, *, positive: bool = False) -> float:
    """A number of seconds from the environment (text) or the config file (a JSON number)."""
    value = math.nan
    if isinstance(raw, str) or (isinstance(raw, int | float) and not isinstance(raw, bool)):
        with contextlib.suppress(ValueError):
            value = float(raw)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{key} must be a number of seconds {'> 0' if positive else '>= 0'}")
    return value


def _metrics_listen(raw_port: Any, raw_address: Any) -> tuple[int, str]:
    """The port (0: off) and the IP address of /healthz, /readyz and /metrics."""
    try:
        port = int(str(raw_port))
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics_port {str(raw_port)[:20]!r} is not a port number (0: off)")
    try:
        address = str(ipaddress.ip_address(str(raw_address)))
    except ValueError:
        raise ValueError(
            f"metrics_address {str(raw_address)[:60]!r} is not an IP address (0.0.0.0: all)"
        ) from None
    return port, address


def main(_args: argparse.Namespace) -> int:
    """Run ``slonkd agent``."""
    settings = settings_or_refusal("agent", lambda: load_settings(os.environ))
    if settings is None:
        return EXIT_BAD_SETTINGS
    from slonkd.runtime.agent.sidecar import run_agent

    return asyncio.run(run_agent(settings))
