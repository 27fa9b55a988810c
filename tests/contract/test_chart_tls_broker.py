"""The chart's ``tls.enabled`` broker config runs on the real mosquitto, with the chart's clients.

The chart's rendered ``mosquitto.conf`` (only its paths and port moved to a private
directory: the Secret's files, the data directory, Debian's dynsec plugin) starts the real
mosquitto 2.0. The coordinator's dynsec admin and the agent's bus are loaded from the
rendered pods' environments by slonkd's own settings code (with the broker's address and
the CA file moved the same way) and talk to it over TLS; a plain client is refused.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from slonkd.adapters.bus.client import Bus
from slonkd.cli.bus_env import agent_bus_settings, credential_settings
from slonkd.core.messages import AgentStatus, Channel, node_topic
from slonkd.runtime.coordinating.credentials import dynsec_admin
from slonkd_sandbox import procs
from slonkd_sandbox.chart.helm import Helm
from slonkd_sandbox.mosquitto import DYNSEC_PLUGIN
from slonkd_sandbox.tls import make_ca, make_server_cert
from tests.contract.bus_helpers import running
from tests.unit.test_chart_render import _container_env, helm, kinds, one, render

__all__ = ["helm"]  # the module-scoped fixture of test_chart_render

pytestmark = pytest.mark.mqtt

TLS = ('tls={"enabled":true,"secretName":"slonk-tls"}',)
CLUSTER = "slonk"  # the chart's default clusterName


@pytest.fixture
def rendered_broker(
    helm: Helm, session_root: Path
) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
    """The chart's TLS mosquitto running locally; (port, CA file, rendered objects)."""
    root = Path(tempfile.mkdtemp(prefix="chart-tls-", dir=session_root))
    (root / "data").mkdir(parents=True)
    ca = make_ca(root / "tls", "ca")
    make_server_cert(ca, root / "tls", "tls")  # tls.crt, tls.key: the Secret's file names
    objs = render(helm, set_json=TLS)
    conf = one(objs, "ConfigMap", "rel-mosquitto")["data"]["mosquitto.conf"]
    port = procs.free_ports(1)[0]
    conf = re.sub(r"^listener 8883$", f"listener {port} 127.0.0.1", conf, flags=re.M)
    conf = conf.replace("/mosquitto/tls/", f"{root}/tls/").replace(
        "/mosquitto/data/", f"{root}/data/"
    )
    conf = re.sub(r"^plugin \S+$", f"plugin {DYNSEC_PLUGIN}", conf, flags=re.M)
    assert "/mosquitto/" not in conf, conf
    (root / "mosquitto.conf").write_text(f"user {pwd.getpwuid(os.geteuid()).pw_name}\n{conf}")
    subprocess.run(
        ["mosquitto_ctrl", "dynsec", "init", f"{root}/data/dynamic-security.json", "admin", "pw"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    log = root / "mosquitto.log"
    proc = procs.spawn(["mosquitto", "-c", str(root / "mosquitto.conf")], log=log)
    try:
        procs.wait_for(
            "mosquitto (chart config)",
            lambda: _accepts(port),
            timeout_s=20,
            alive=procs.exited(proc, log),
        )
        yield port, str(ca.cert), objs
    finally:
        procs.stop(proc)


def _accepts(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


def _moved(env: dict[str, str], port: int, ca: str) -> dict[str, str]:
    """``env`` with the broker at 127.0.0.1:``port`` and every CA file at ``ca``."""
    moved = {**env, "SLONKD_MQTT_HOST": "127.0.0.1", "SLONKD_MQTT_PORT": str(port)}
    for name in ("SLONKD_MQTT_TLS_CA_FILE", "SLONKD_MQTT_BOOTSTRAP_CA"):
        if name in moved:
            moved[name] = ca
    moved.pop("SLONKD_CONFIG", None)
    return moved


async def test_the_charts_tls_broker_serves_the_charts_clients_over_tls_only(
    rendered_broker: tuple[int, str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The rendered config listens with TLS; the rendered coordinator env issues over it.

    An agent client issued by the coordinator's dynsec admin (settings from the rendered
    coordinator env) publishes through the agent's bus (settings from the rendered agent
    env); a plain MQTT client on the same port is refused.
    """
    port, ca, objs = rendered_broker
    coord_pod = one(objs, "Deployment", "rel-coordinator")["spec"]["template"]["spec"]
    (coord,) = coord_pod["containers"]
    coord_env = _moved(_container_env(coord, tmp_path), port, ca)
    coord_env["SLONKD_MQTT_ADMIN_USERNAME"], coord_env["SLONKD_MQTT_ADMIN_PASSWORD"] = "admin", "pw"
    admin_settings = credential_settings(coord_env)
    assert admin_settings is not None
    assert admin_settings.admin_ca_file == ca
    creds = await dynsec_admin(admin_settings).issue(CLUSTER, "w-0")

    (sts,) = [s for s in kinds(objs, "StatefulSet") if s["metadata"]["name"] == "rel-gpu"]
    (agent,) = [
        c for c in sts["spec"]["template"]["spec"]["initContainers"] if c["name"] == "slonkd-agent"
    ]
    bus_settings, _ = agent_bus_settings(
        _moved(_container_env(agent, tmp_path), port, ca), creds.client_id
    )
    assert bus_settings is not None
    assert bus_settings.ca_file == ca
    bus = Bus(dataclasses.replace(bus_settings, username=creds.username, password=creds.password))
    async with running(bus, connect_s=None):
        status = AgentStatus(node="w-0", online=True)
        await bus.publish(node_topic(CLUSTER, "w-0", Channel.STATUS), status, timeout_s=10)
    plain = aiomqtt.Client(
        "127.0.0.1", port, username=creds.username, password=creds.password, timeout=3
    )
    with pytest.raises(aiomqtt.MqttError):
        async with plain:
            pass
