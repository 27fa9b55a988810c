"""``slonkd agent``: the sidecar in every slurmd pod.

Its settings are the ``agent`` section of the configuration tree (the JSON file in
``SLONKD_CONFIG``, :mod:`slonkd.cli.config`): the fields of
:class:`~slonkd.runtime.agent.sidecar.AgentSettings` (``slonkd config schema agent``):
``slurm_node`` (default: the pod name), ``kubeconfig`` (default: ``$KUBECONFIG``, else the
in-cluster ServiceAccount), ``resync_s``, ``ready_file``, ``policy`` (``failure_grace_s``,
``unready_grace_s``), ``cluster``, ``health`` (the checks: every field of
``HealthSettings``, thresholds included), ``hysteresis`` (``fail_n``, ``window_m``,
``clear_k``), ``metrics_port`` (default 9464, 0: off; serves /healthz, /readyz and /metrics)
and ``metrics_address`` (default 0.0.0.0). The downward API gives ``POD_NAME``,
``POD_NAMESPACE``, ``NODE_NAME`` and ``POD_UID``. The old flat file, its flat graces and the
old variables (``SLONKD_SLURM_NODE``, ``SLONKD_RESYNC_S``, ``SLONKD_READY_FILE``,
``SLONKD_CLUSTER``, ``SLONKD_METRICS_PORT``, ``SLONKD_METRICS_ADDRESS``: each field names
its own) still load, each with one deprecation line on stderr. MQTT comes from
``SLONKD_MQTT_HOST``, ``SLONKD_MQTT_PORT``, ``SLONKD_MQTT_USER`` and ``SLONKD_MQTT_PASSWORD``
(or ``SLONKD_MQTT_PASSWORD_FILE``), or from the coordinator with ``SLONKD_MQTT_BOOTSTRAP_URL``
and ``SLONKD_TOKEN_FILE`` (see :mod:`slonkd.cli.bus_env`). Bad settings exit 2 with a
one-line reason.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ipaddress
import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slonkd.adapters.bus.dynsec_roles import agent_client_id
from slonkd.adapters.slurm.runner import SlurmSettings
from slonkd.cli.bus_env import agent_bus_settings
from slonkd.cli.config import loaded, role_section
from slonkd.cli.refusal import EXIT_BAD_SETTINGS
from slonkd.core.config_sources import say_old_names
from slonkd.core.config_tree import build, of

if TYPE_CHECKING:  # the runtime pulls in aiohttp, aiomqtt, prometheus_client: import it only to run
    from slonkd.runtime.agent.settings import AgentSettings

_UID = re.compile(r"[0-9A-Fa-f]{8}(-?[0-9A-Fa-f]{4}){3}-?[0-9A-Fa-f]{12}")
"""A pod's ``metadata.uid`` (RFC 4122, as the apiserver makes them)."""
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``agent``."""
    sub.add_parser("agent", help="run the sidecar agent of one slurmd pod", description=__doc__)


def load_settings(env: Mapping[str, str], notes: list[str] | None = None) -> AgentSettings:
    """Settings from ``env`` and the file's ``agent`` section; ValueError, one line.

    Deprecated files, keys and variables read add their line to ``notes``.
    """
    from slonkd.runtime.agent.settings import AgentSettings

    renamed: dict[str, str] = {}
    raw = role_section(env, "agent", AgentSettings, [] if notes is None else notes, renamed)
    for key in ("pod_name", "namespace", "kube_node"):
        what = _variable(AgentSettings, key)
        if not raw.get(key):
            raise ValueError(f"{what} is not set (the chart passes it through the downward API)")
        if not isinstance(raw[key], str) or not _NAME.fullmatch(raw[key]):
            raise ValueError(f"{what}={str(raw[key])[:60]!r} is not a valid Kubernetes name")
    pod_uid = env.get("POD_UID", "")
    if pod_uid and not _UID.fullmatch(pod_uid):
        raise ValueError(f"POD_UID={pod_uid[:60]!r} is not a Kubernetes uid")
    slurm_node = raw.get("slurm_node") or raw["pod_name"]
    if not isinstance(slurm_node, str) or not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", slurm_node
    ):
        raise ValueError(f"SLURM node name {str(slurm_node)[:60]!r} is not valid")
    raw["slurm_node"] = slurm_node
    slurm_env = {"SLURM_CONF": env["SLURM_CONF"]} if "SLURM_CONF" in env else {}
    bus, bootstrap = agent_bus_settings(env, agent_client_id(slurm_node))
    given = {
        "bus": bus, "bootstrap": bootstrap, "pod_uid": pod_uid,
        "slurm": SlurmSettings(env=slurm_env),
    }  # fmt: skip
    try:
        settings = build(AgentSettings, raw, non_negative=True, given=given)
    except ValueError as exc:
        raise ValueError(f"bad agent settings: {say_old_names(str(exc), renamed)}") from None
    if not 0 < settings.resync_s < math.inf:
        raise ValueError("resync_s must be a number of seconds > 0")
    for key in ("failure_grace_s", "unready_grace_s"):
        if not math.isfinite(getattr(settings.policy, key)):
            raise ValueError(f"policy.{key} must be a number of seconds >= 0")
    port, address = _metrics_listen(settings.metrics_port, settings.metrics_address)
    return dataclasses.replace(settings, metrics_port=port, metrics_address=address)


def _variable(cls: type[Any], key: str) -> str:
    """The environment variable a field of ``cls`` declares (its key when it declares none)."""
    (f,) = (f for f in dataclasses.fields(cls) if f.name == key)
    return of(f).env or key


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
    settings = loaded("agent", lambda notes: load_settings(os.environ, notes))
    if settings is None:
        return EXIT_BAD_SETTINGS
    from slonkd.runtime.agent.sidecar import run_agent

    return asyncio.run(run_agent(settings))
